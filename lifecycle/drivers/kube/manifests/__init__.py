"""Kubernetes objects racklife renders from the inventory (GPU Operator, Slinky), checked offline.

Rendering is pure: the same inventory and options give the same objects, and
nothing here talks to a cluster (an import-linter contract keeps the
Kubernetes client out). ``stacks/`` hands the objects to pulumi-kubernetes;
``racklife kube render`` prints them. Every object is checked before it is
handed out, against the CRDs of the releases it targets (shipped in
``crds/``) or, for built-in kinds, the upstream Kubernetes schema.
"""

from lifecycle.drivers.kube.manifests.common import RenderError, RenderProblem
from lifecycle.drivers.kube.manifests.gpu_operator import GpuOperatorOptions, render_gpu_operator
from lifecycle.drivers.kube.manifests.objects import FieldError, Manifest, Rendered, SecretKeyRef, dump
from lifecycle.drivers.kube.manifests.slinky import SlinkyOptions, render_slinky
from lifecycle.drivers.kube.manifests.validate import Checked, ManifestInvalid, validate, validated

__all__ = [
    "Checked",
    "FieldError",
    "GpuOperatorOptions",
    "Manifest",
    "ManifestInvalid",
    "RenderError",
    "RenderProblem",
    "Rendered",
    "SecretKeyRef",
    "SlinkyOptions",
    "dump",
    "render_gpu_operator",
    "render_slinky",
    "validate",
    "validated",
]

"""The Kubernetes side of the cluster, with pulumi-kubernetes: GPU Operator, pool labels and taints, Slinky.

The objects come from racklife's renderers (``lifecycle.drivers.kube.manifests``),
which check them offline against the releases' CRDs, so the stack, `racklife
kube render` and the tests hand Kubernetes the same documents. The charts get
only racklife's overrides of their values (the GPU Operator chart installs no
ClusterPolicy of its own: racklife's rendered one is applied after it).
A node's pool labels and taints are a ``NodePatch`` (server-side apply, its
own field manager) created after the node's ``PoolMembership``: racklife's
join sets the pool label and its maintenance taint under another manager, so
the two never fight over a field. Slinky's Secrets hold values the stack
reads from secret configuration; they reach the state encrypted, never as
plain inputs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from lifecycle.drivers.kube.manifests import Manifest, render_gpu_operator, render_slinky
from lifecycle.drivers.kube.manifests import gpu_operator as gpu
from lifecycle.drivers.kube.manifests import slinky as sl
from lifecycle.drivers.kube.types import Taint
from lifecycle.model.inventory import Inventory

TOKEN = "racklife:index:"  # noqa: S105 (Pulumi type tokens)
GPU_OPERATOR_CHART = ("gpu-operator", "https://helm.ngc.nvidia.com/nvidia", gpu.RELEASE)
SLURM_OPERATOR_CHART = ("oci://ghcr.io/slinkyproject/charts/slurm-operator", None, sl.RELEASE.lstrip("v"))
SLURM_OPERATOR_CRDS_CHART = ("oci://ghcr.io/slinkyproject/charts/slurm-operator-crds", None, sl.RELEASE.lstrip("v"))
SLURM_OPERATOR_VALUES: dict[str, Any] = {"crds": {"enabled": False}}  # the CRDs chart, installed first, owns them
"""Overrides of the charts' values; each key is checked against the chart's values.yaml (``charts/``)."""


def _object(name: str, m: Manifest, opts: pulumi.ResourceOptions) -> pulumi.CustomResource:
    """A rendered object as the pulumi-kubernetes resource of its kind (a custom resource for the CRDs' kinds)."""
    body = m.to_dict()
    meta = body.pop("metadata")
    kind, api = body.pop("kind"), body.pop("apiVersion")
    if (api, kind) == ("v1", "Namespace"):
        return k8s.core.v1.Namespace(name, metadata=meta, **body, opts=opts)
    if (api, kind) == ("v1", "ConfigMap"):
        return k8s.core.v1.ConfigMap(name, metadata=meta, **body, opts=opts)
    return k8s.apiextensions.CustomResource(name, api_version=api, kind=kind, metadata=meta, **body, opts=opts)


def _release(name: str, chart: tuple[str, str | None, str], namespace: str, values: Mapping[str, Any],
             opts: pulumi.ResourceOptions) -> k8s.helm.v3.Release:
    ref, repo, version = chart
    return k8s.helm.v3.Release(name, k8s.helm.v3.ReleaseArgs(
        chart=ref, version=version, namespace=namespace, create_namespace=True, values=dict(values),
        repository_opts=k8s.helm.v3.RepositoryOptsArgs(repo=repo) if repo else None), opts=opts)


@dataclass(frozen=True)
class InferenceClusterArgs:
    inventory: Inventory
    memberships: Mapping[str, pulumi.Resource]  # node -> its PoolMembership
    kubeconfig: str
    gpu_operator: bool = True
    options: gpu.GpuOperatorOptions = field(default_factory=gpu.GpuOperatorOptions)


class InferenceCluster(pulumi.ComponentResource):
    """The GPU Operator release with racklife's ClusterPolicy, and each inference node's pool labels and taints."""

    def __init__(self, name: str, args: InferenceClusterArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(f"{TOKEN}InferenceCluster", name, None, opts)
        inv = args.inventory
        self.provider = k8s.Provider(f"{name}-k8s", kubeconfig=args.kubeconfig,
                                     opts=pulumi.ResourceOptions(parent=self))
        child = pulumi.ResourceOptions(parent=self, provider=self.provider)
        self.objects: list[pulumi.CustomResource] = []
        if args.gpu_operator:
            rendered = render_gpu_operator(inv, args.options)
            release = _release(f"{name}-gpu-operator", GPU_OPERATOR_CHART, args.options.namespace,
                               gpu.CHART_VALUES, child)
            self.objects = [_object(f"{name}-{m.kind.lower()}-{m.name}", m, child.merge(
                pulumi.ResourceOptions(depends_on=[release]))) for m in rendered.objects if m.kind != "Namespace"]
        self.patches: dict[str, k8s.core.v1.NodePatch] = {}
        for n in inv.nodes:
            pool = inv.pool(n.pool)
            if pool.scheduler != "kubernetes" or n.name not in args.memberships:
                continue
            taints = [Taint.parse(t) for t in pool.taints]
            self.patches[n.name] = k8s.core.v1.NodePatch(
                f"{name}-{n.name}-pool",
                metadata=k8s.meta.v1.ObjectMetaPatchArgs(name=n.name, labels={**pool.labels,
                                                                               "racklife.io/pool": n.pool}),
                spec=k8s.core.v1.NodeSpecPatchArgs(taints=[
                    k8s.core.v1.TaintPatchArgs(key=t.key, value=t.value or None, effect=t.effect) for t in taints]),
                opts=child.merge(pulumi.ResourceOptions(depends_on=[args.memberships[n.name]])))
        self.register_outputs({"labelled": sorted(self.patches)})


@dataclass(frozen=True)
class SlinkySlurmArgs:
    inventory: Inventory
    kubeconfig: str
    secrets: Mapping[str, pulumi.Input[str]]  # Secret name -> its value (from secret configuration)
    options: sl.SlinkyOptions = field(default_factory=sl.SlinkyOptions)


class SlinkySlurm(pulumi.ComponentResource):
    """The slurm-operator (its CRDs, then the operator) and racklife's rendered Slinky resources."""

    def __init__(self, name: str, args: SlinkySlurmArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(f"{TOKEN}SlinkySlurm", name, None, opts)
        rendered = render_slinky(args.inventory, args.options)
        missing = sorted({r.name for r in rendered.secrets} - set(args.secrets))
        if missing:
            raise ValueError(f"SlinkySlurm {name}: no value for Secret(s) {', '.join(missing)} "
                             "(set them with `pulumi config set --secret`)")
        self.provider = k8s.Provider(f"{name}-k8s", kubeconfig=args.kubeconfig,
                                     opts=pulumi.ResourceOptions(parent=self))
        child = pulumi.ResourceOptions(parent=self, provider=self.provider)
        ns = args.options.namespace
        crds = _release(f"{name}-crds", SLURM_OPERATOR_CRDS_CHART, "slinky", {}, child)
        operator = _release(f"{name}-operator", SLURM_OPERATOR_CHART, "slinky", SLURM_OPERATOR_VALUES,
                            child.merge(pulumi.ResourceOptions(depends_on=[crds])))
        namespace = next(m for m in rendered.objects if m.kind == "Namespace")
        ns_res = _object(f"{name}-namespace", namespace, child)
        secrets = [k8s.core.v1.Secret(f"{name}-{ref.name}", metadata={"name": ref.name, "namespace": ref.namespace},
                                      string_data={ref.key: pulumi.Output.secret(args.secrets[ref.name])},
                                      opts=child.merge(pulumi.ResourceOptions(depends_on=[ns_res])))
                   for ref in rendered.secrets]
        after = pulumi.ResourceOptions(depends_on=[operator, ns_res, *secrets])
        self.objects = [_object(f"{name}-{m.kind.lower()}-{m.name}", m, child.merge(after))
                        for m in rendered.objects if m.kind != "Namespace"]
        self.register_outputs({"namespace": ns, "objects": [f"{m.kind}/{m.name}" for m in rendered.objects]})

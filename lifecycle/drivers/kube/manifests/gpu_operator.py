"""The NVIDIA GPU Operator's ClusterPolicy, from the inventory and the site's choices.

The GPU Operator runs the node agents that turn a GPU server into a
Kubernetes node that advertises ``nvidia.com/gpu``: driver, container
toolkit, device plugin, GPU feature discovery, DCGM exporter, MIG manager.
Its chart normally creates a ``ClusterPolicy`` from Helm values; racklife
renders that object itself (and installs the chart with
``clusterPolicy.deployCR=false``), so the policy is typed data checked
against the release's CRD, and follows the inventory:

- every pool's taints are tolerated by the operands, with racklife's
  maintenance taint: a node that joins cordoned, or is drained, keeps its
  device plugin, so racklife can wait for its allocatable GPUs before calling
  it in service;
- the driver and container toolkit come from the host (the golden image and
  the ``kube_node`` role install them) unless the site chooses the
  operator's containers (``driver="operator"``);
- the MIG strategy is a site choice (``single`` by default: a GPU without MIG
  partitions is advertised whole, as ``nvidia.com/gpu``).

Image versions are those of GPU Operator v26.7.0's chart (``crds/SOURCES.md``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from lifecycle.drivers.kube.manifests.common import (
    MAINTENANCE_TOLERATION,
    MANAGED_BY,
    RenderError,
    RenderProblem,
    pool_taints,
    toleration,
)
from lifecycle.drivers.kube.manifests.objects import Manifest, Rendered
from lifecycle.drivers.kube.types import GPU_RESOURCE
from lifecycle.model.inventory import Inventory

API_VERSION = "nvidia.com/v1"
POLICY_NAME = "cluster-policy"  # the name the chart gives it; the operator reconciles exactly one
RELEASE = "v26.7.0"
CHART_VALUES: dict[str, Any] = {"clusterPolicy": {"deployCR": False}}
"""Helm values for the gpu-operator chart when racklife supplies the ClusterPolicy."""


@dataclass(frozen=True)
class Image:
    repository: str
    image: str
    version: str

    def fields(self) -> dict[str, str]:
        return {"repository": self.repository, "image": self.image, "version": self.version}


# Component images of the v26.7.0 chart (deployments/gpu-operator/values.yaml at the tag).
IMAGES: dict[str, Image] = {
    "validator": Image("nvcr.io/nvidia", "gpu-operator", RELEASE),
    "driver": Image("nvcr.io/nvidia", "driver", "595.91.07"),
    "toolkit": Image("nvcr.io/nvidia/k8s", "container-toolkit", "v1.20.0"),
    "devicePlugin": Image("nvcr.io/nvidia", "k8s-device-plugin", "v0.20.0"),
    "gfd": Image("nvcr.io/nvidia", "k8s-device-plugin", "v0.20.0"),
    "dcgmExporter": Image("nvcr.io/nvidia/k8s", "dcgm-exporter", "4.6.0-4.8.3-distroless"),
    "migManager": Image("nvcr.io/nvidia/cloud-native", "k8s-mig-manager", "v0.15.0"),
}

Source = Literal["host", "operator"]
MigStrategy = Literal["none", "single", "mixed"]


@dataclass(frozen=True)
class GpuOperatorOptions:
    """Site choices the inventory does not hold."""

    driver: Source = "host"
    """``host``: the node image carries the NVIDIA driver; ``operator``: the operator's driver container."""
    toolkit: Source = "host"
    """``host``: ``kube_node`` installs nvidia-container-toolkit and the containerd runtime."""
    mig_strategy: MigStrategy = "single"
    dcgm_exporter: bool = True
    namespace: str = "gpu-operator"


def _component(name: str, enabled: bool, **extra: Any) -> dict[str, Any]:
    return {"enabled": enabled, **(IMAGES[name].fields() if enabled else {}), **extra}


def _tolerations(inv: Inventory) -> list[dict[str, str]]:
    found: list[dict[str, str]] = [{"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"},
                                   MAINTENANCE_TOLERATION]
    problems: list[RenderProblem] = []
    for pool in sorted(inv.pools):
        taints, bad = pool_taints(inv, pool)
        problems += bad
        found += [toleration(t) for t in taints]
    if problems:
        raise RenderError(problems)
    unique: dict[tuple[tuple[str, str], ...], dict[str, str]] = {}
    for t in found:
        unique.setdefault(tuple(sorted(t.items())), t)
    return list(unique.values())


def cluster_policy(inv: Inventory, opts: GpuOperatorOptions | None = None) -> Manifest:
    opts = opts or GpuOperatorOptions()
    labels = {**MANAGED_BY, "racklife.io/site": inv.site.name}
    spec: dict[str, Any] = {
        "operator": {"defaultRuntime": "containerd", "runtimeClass": "nvidia"},
        "daemonsets": {
            "labels": labels,
            "priorityClassName": "system-node-critical",
            "tolerations": _tolerations(inv),
            "updateStrategy": "RollingUpdate",
            "rollingUpdate": {"maxUnavailable": "1"},
        },
        "hostPaths": {"rootFS": "/", "driverInstallDir": "/" if opts.driver == "host" else "/run/nvidia/driver"},
        "validator": IMAGES["validator"].fields(),
        "mig": {"strategy": opts.mig_strategy},
        "driver": _component("driver", opts.driver == "operator", **(
            {"kernelModuleType": "auto", "usePrecompiled": False} if opts.driver == "operator" else {})),
        "toolkit": _component("toolkit", opts.toolkit == "operator"),
        "devicePlugin": _component("devicePlugin", True),
        "gfd": _component("gfd", True),
        "dcgm": {"enabled": False},  # the exporter embeds its own host engine
        "dcgmExporter": _component("dcgmExporter", opts.dcgm_exporter),
        "migManager": _component("migManager", opts.mig_strategy != "none"),
        "nodeStatusExporter": {"enabled": False},
        "cdi": {"enabled": True},
    }
    return Manifest.new(API_VERSION, "ClusterPolicy", POLICY_NAME, labels=labels, spec=spec)


def render_gpu_operator(inv: Inventory, opts: GpuOperatorOptions | None = None) -> Rendered:
    opts = opts or GpuOperatorOptions()
    namespace = Manifest.new("v1", "Namespace", opts.namespace, labels=MANAGED_BY)
    return Rendered((namespace, cluster_policy(inv, opts)))

"""What racklife knows about Kubernetes nodes and pods, in the field's words, independent of the client.

The real driver reads lightkube models and the fake reads its own dicts; both
hand the rest of racklife these frozen dataclasses, so no vendor object crosses
a module border. The ownership marks racklife puts on a node are named here
once: the annotation ``racklife.io/cordoned-by: <run-id>`` and the taint
``racklife.io/maintenance=<run-id>:NoSchedule``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from lifecycle.model import vocab
from lifecycle.model.vocab import TAINT_EFFECTS
from lifecycle.model.vocab import TaintEffect as TaintEffect

CORDONED_BY = "racklife.io/cordoned-by"
CORDON_REASON = "racklife.io/cordon-reason"
MAINTENANCE_TAINT = "racklife.io/maintenance"
POOL_LABEL = "racklife.io/pool"
MANAGED = "racklife.io/managed"
"""Annotation listing the label and taint keys racklife set for the node's pool (JSON)."""
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
GPU_RESOURCE = "nvidia.com/gpu"

_RUN = re.compile(r"^[A-Za-z0-9._-]{1,63}\Z")


def check_run_id(run_id: str) -> str:
    """Run ids go into label-like values (annotation and taint value): 1-63 of ``[A-Za-z0-9._-]``."""
    if not _RUN.match(run_id):
        raise ValueError(f"run id {run_id!r} must be 1-63 of [A-Za-z0-9._-]")
    return run_id


@dataclass(frozen=True)
class Taint:
    key: str
    effect: TaintEffect
    value: str = ""

    @classmethod
    def parse(cls, text: str) -> Taint:
        """kubectl's notation: ``key=value:Effect`` or ``key:Effect`` (what pool definitions use).

        The grammar is the model's (``vocab.taint``, the rule the inventory applied), so a taint this
        accepts is one kube-apiserver stores.
        """
        try:
            spec = vocab.taint(text.strip())
        except ValueError as exc:
            raise ValueError(f"{text!r} {exc}") from None
        return cls(spec.key, spec.effect, spec.value)

    @classmethod
    def from_api(cls, data: Mapping[str, Any]) -> Taint:
        effect = str(data.get("effect"))
        if effect not in TAINT_EFFECTS:
            raise ValueError(f"unknown taint effect {effect!r}")
        return cls(str(data["key"]), effect, str(data.get("value") or ""))

    def to_api(self) -> dict[str, str]:
        out = {"key": self.key, "effect": self.effect}
        if self.value:
            out["value"] = self.value
        return out

    def __str__(self) -> str:
        return f"{self.key}={self.value}:{self.effect}" if self.value else f"{self.key}:{self.effect}"


def maintenance_taint(run_id: str) -> Taint:
    return Taint(MAINTENANCE_TAINT, "NoSchedule", check_run_id(run_id))


@dataclass(frozen=True)
class ForeignMark:
    """How another tool marks the nodes it cordons, so a report can name it (racklife never lifts them)."""

    owner: str
    where: Literal["annotation", "taint"]
    key: str
    source: str
    """Where the tool sets it (upstream code), since no capture of a live cluster is kept for it."""


FOREIGN_MARKS: tuple[ForeignMark, ...] = (
    ForeignMark("cluster-autoscaler", "taint", "ToBeDeletedByClusterAutoscaler",
                "kubernetes/autoscaler: cluster-autoscaler/utils/taints/taints.go (ToBeDeletedTaint)"),
    ForeignMark("karpenter", "taint", "karpenter.sh/disrupted",
                "kubernetes-sigs/karpenter: pkg/apis/v1/taints.go (DisruptedNoScheduleTaint)"),
    ForeignMark("kured", "annotation", "weave.works/kured-reboot-in-progress",
                "kubereboot/kured: cmd/kured/main.go (KuredRebootInProgressAnnotation)"),
)


@dataclass(frozen=True)
class CordonOwner:
    """Who holds a node's cordon: racklife (with its run id), someone else, or nobody."""

    kind: Literal["racklife", "other", "none"]
    run_id: str | None = None
    by: str | None = None
    """For ``other``: the tool whose mark the node carries (``FOREIGN_MARKS``), when one is recognised."""

    def describe(self) -> str:
        if self.kind == "racklife":
            return f"racklife run {self.run_id!r}"
        if self.kind == "other" and self.by:
            return f"someone else ({self.by}, by its mark on the node)"
        if self.kind == "other":
            return f"someone else (no {CORDONED_BY} annotation: an admin, kubectl or another tool)"
        return "nobody"


@dataclass(frozen=True)
class KubeNode:
    name: str
    ready: bool
    unschedulable: bool
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    gpus: int = 0
    """``status.allocatable[nvidia.com/gpu]``."""
    resource_version: str = ""
    boot_id: str = ""
    """``status.nodeInfo.bootID``: the kubelet reports a new one after every boot of the node."""

    @property
    def owner(self) -> CordonOwner:
        """Who cordoned the node, from racklife's annotation (``none`` when it is schedulable).

        A node that also carries another tool's mark is that tool's, even with
        racklife's annotation on it: the other tool cordoned it too, and
        lifting the cordon would undo its work.
        """
        run = self.annotations.get(CORDONED_BY)
        if not self.unschedulable:
            return CordonOwner("none", run)
        taints = {t.key for t in self.taints}
        by = next((m.owner for m in FOREIGN_MARKS if (m.key in self.annotations if m.where == "annotation"
                                                       else m.key in taints)), None)
        if by is not None:
            return CordonOwner("other", by=by)
        return CordonOwner("racklife", run) if run else CordonOwner("other")

    @property
    def pool(self) -> str | None:
        return self.labels.get(POOL_LABEL)


@dataclass(frozen=True)
class KubePod:
    namespace: str
    name: str
    node: str
    phase: str
    labels: Mapping[str, str] = field(default_factory=dict)
    owner_kind: str | None = None
    """Kind of the controlling owner (``ReplicaSet``, ``DaemonSet``, ``StatefulSet``, …)."""
    mirror: bool = False
    """A static pod's mirror: the kubelet owns it, the API cannot evict it."""
    terminating: bool = False

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def skip_reason(self) -> str | None:
        """Why a drain leaves this pod alone (as ``kubectl drain --ignore-daemonsets`` does), or None."""
        if self.mirror:
            return "mirror pod (static pod managed by the kubelet)"
        if self.owner_kind == "DaemonSet":
            return "DaemonSet-managed"
        return None


@dataclass(frozen=True)
class CordonResult:
    node: str
    action: Literal["cordoned", "already", "foreign", "uncordoned"]
    """``foreign``: cordoned by someone else before us; left as it is and never lifted by racklife."""
    owner: CordonOwner


@dataclass(frozen=True)
class PoolChange:
    node: str
    pool: str
    labels_set: Mapping[str, str] = field(default_factory=dict)
    labels_removed: tuple[str, ...] = ()
    taints_added: tuple[Taint, ...] = ()
    taints_removed: tuple[Taint, ...] = ()

    @property
    def changed(self) -> bool:
        return bool(self.labels_set or self.labels_removed or self.taints_added or self.taints_removed)


@dataclass(frozen=True)
class EvictionBackoff:
    """How long a drain waits between eviction rounds while a PodDisruptionBudget says 429."""

    first_s: float = 1.0
    factor: float = 2.0
    max_s: float = 30.0

    def delays(self) -> Iterator[float]:
        delay = self.first_s
        while True:
            yield delay
            delay = min(delay * self.factor, self.max_s)


@dataclass(frozen=True)
class Refusal:
    """The Eviction API's 429: the budget's words, and the delay the server suggests (0: none)."""

    message: str
    retry_after_s: float = 0.0


@dataclass(frozen=True)
class Budget:
    """A PodDisruptionBudget as the API reports it (spec figures and the controller's status)."""

    namespace: str
    name: str
    selector: Mapping[str, Any] = field(default_factory=dict)
    """The ``LabelSelector`` (``matchLabels``, ``matchExpressions``)."""
    min_available: int | str | None = None
    max_unavailable: int | str | None = None
    expected_pods: int = 0
    current_healthy: int = 0
    desired_healthy: int = 0
    disruptions_allowed: int = 0

    @property
    def figure(self) -> str:
        if self.max_unavailable is not None:
            return f"maxUnavailable {self.max_unavailable}"
        if self.min_available is not None:
            return f"minAvailable {self.min_available}"
        return "no figure"


@dataclass(frozen=True)
class Blocker:
    """A pod a drain could not evict by its deadline, and the budget that protects it."""

    pod: str
    message: str
    """The API's own refusal ("The disruption budget web needs 2 healthy pods and has 2 currently")."""
    budget: Budget | None = None

    def describe(self) -> str:
        if self.budget is None:
            return f"{self.pod}: {self.message}"
        b = self.budget
        return (f"{self.pod}: held by PodDisruptionBudget {b.namespace}/{b.name} ({b.figure}; "
                f"{b.current_healthy} healthy of {b.expected_pods} expected, {b.desired_healthy} needed, "
                f"{b.disruptions_allowed} disruptions allowed): {self.message}")


@dataclass(frozen=True)
class DrainReport:
    """Every pod a drain touched, and what became of it."""

    node: str
    evicted: tuple[str, ...] = ()
    skipped: Mapping[str, str] = field(default_factory=dict)
    """pod → why it was left (DaemonSet, mirror pod)."""
    blocked: Mapping[str, str] = field(default_factory=dict)
    """pod → why it could not be evicted by the deadline (the budget's own words)."""
    terminating: tuple[str, ...] = ()
    """Evicted, but still on the node when the deadline came."""
    eviction_calls: int = 0
    waited_s: float = 0.0
    blockers: tuple[Blocker, ...] = ()
    """Each pod in ``blocked``, with the budget that holds it (read when the deadline came)."""

    @property
    def complete(self) -> bool:
        return not self.blocked and not self.terminating

    def describe(self) -> str:
        """The report in words, naming each blocking pod and its budget."""
        if self.complete:
            return (f"{self.node}: drained ({len(self.evicted)} evicted, {len(self.skipped)} left as DaemonSet or "
                    "mirror pods)")
        lines = [f"{self.node}: not drained after {self.waited_s:.0f} s"]
        lines += [f"  blocked {b.describe()}" for b in self.blockers]
        lines += [f"  still terminating {p}" for p in self.terminating]
        return "\n".join(lines)


@dataclass(frozen=True)
class WatchEvent:
    type: Literal["ADDED", "MODIFIED", "DELETED"]
    name: str
    namespace: str | None
    resource_version: str
    node: KubeNode | None = None
    pod: KubePod | None = None

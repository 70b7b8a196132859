"""The Kubernetes driver interface, with the ownership and drain rules written once.

A real driver (over the Kubernetes API) and the fake (in memory, for workflow
tests) implement five primitives: read a node, list nodes, patch a node, list
a node's pods, evict a pod. Everything racklife decides on top of them —
cordon with an owner mark, uncordon only what it cordoned, pool labels and
taints that never clobber anyone else's, drain that honours
PodDisruptionBudgets with backoff up to a deadline — lives here, so the fake
cannot drift from the real thing on the rules that matter.
"""

from __future__ import annotations

import json
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from lifecycle.drivers.errors import OperationFailed, TemporaryError
from lifecycle.drivers.kube import names
from lifecycle.drivers.kube import selectors as sel
from lifecycle.drivers.kube.types import (
    CORDON_REASON,
    CORDONED_BY,
    GPU_RESOURCE,
    MAINTENANCE_TAINT,
    MANAGED,
    POOL_LABEL,
    Blocker,
    Budget,
    CordonOwner,
    CordonResult,
    DrainReport,
    EvictionBackoff,
    KubeNode,
    KubePod,
    PoolChange,
    Refusal,
    Taint,
    check_run_id,
    maintenance_taint,
)
from lifecycle.model.inventory import Inventory, Pool

CONFLICT_ATTEMPTS = 5


class Conflict(TemporaryError):
    """The object changed between our read and our write (409); re-read and try again."""


class NotOurs(OperationFailed):
    """racklife refuses to lift a cordon it did not set."""

    def __init__(self, node: str, owner: CordonOwner, run_id: str) -> None:
        super().__init__(
            node,
            f"cordoned by {owner.describe()}, not by racklife run {run_id!r}; racklife only uncordons nodes "
            f"whose {CORDONED_BY} annotation carries its own run id — uncordon it by hand if that is intended",
        )
        self.owner = owner


class KubeDriver(ABC):
    """One Kubernetes cluster. ``clock``/``sleep`` are injectable so drains run in virtual time in tests."""

    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep

    # ------------------------------------------------------------ primitives

    @abstractmethod
    def node(self, name: str) -> KubeNode:
        """The node, or ``OperationFailed`` when the cluster has no such node."""

    @abstractmethod
    def nodes(self, labels: Mapping[str, str] | None = None) -> list[KubeNode]:
        """Nodes carrying all these labels (``{"racklife.io/pool": "inference"}``), all when None."""

    @abstractmethod
    def pods_on(self, node: str, labels: Mapping[str, str] | None = None) -> list[KubePod]:
        """Pods bound to ``node`` in every namespace (``fieldSelector=spec.nodeName=…``)."""

    @abstractmethod
    def _patch_node(self, name: str, patch: Mapping[str, Any]) -> KubeNode:
        """A JSON merge patch; a ``metadata.resourceVersion`` in it makes it conditional (``Conflict``)."""

    @abstractmethod
    def _evict(self, pod: KubePod) -> Refusal | None:
        """Ask the Eviction subresource; None when the pod is gone or going, else the budget's refusal."""

    @abstractmethod
    def budgets(self, namespace: str) -> list[Budget]:
        """The PodDisruptionBudgets of a namespace, with their status."""

    @abstractmethod
    def delete_node(self, name: str) -> bool:
        """Delete the Node object (a decommissioned server); False when the cluster had no such node."""

    # ------------------------------------------------------------ read-modify-write

    def _update_node(self, name: str, change: Callable[[KubeNode], dict[str, Any] | None],
                     lifting_for: str | None = None) -> KubeNode:
        """Apply ``change(current)`` as a conditional patch, re-reading on conflict (the one retry layer).

        Every node write of racklife passes here, so here is where a cordon
        racklife does not hold is protected: a patch that would make a
        cordoned node schedulable, or change who its annotation says cordoned
        it, is refused (``NotOurs``) unless it is ``uncordon`` lifting the
        cordon of the run that holds it (``lifting_for``).
        """
        for _ in range(CONFLICT_ATTEMPTS):
            current = self.node(name)
            patch = change(current)
            if patch is None:
                return current
            _guard(current, patch, lifting_for)
            patch.setdefault("metadata", {})["resourceVersion"] = current.resource_version
            try:
                return self._patch_node(name, patch)
            except Conflict:
                continue
        raise Conflict(name, f"the node kept changing under us ({CONFLICT_ATTEMPTS} attempts)")

    # ------------------------------------------------------------ cordon

    def cordon(self, name: str, run_id: str, reason: str = "") -> CordonResult:
        """Mark the node unschedulable, owned by ``run_id``; a node someone else cordoned is left alone."""
        check_run_id(run_id)
        current = self.node(name)
        owner = current.owner
        if owner.kind == "racklife" and owner.run_id == run_id and maintenance_taint(run_id) in current.taints:
            return CordonResult(name, "already", owner)
        if current.unschedulable and not (owner.kind == "racklife" and owner.run_id == run_id):
            return CordonResult(name, "foreign", owner)

        taken: list[CordonOwner] = []

        def change(node: KubeNode) -> dict[str, Any] | None:
            if node.unschedulable and node.owner != CordonOwner("racklife", run_id):
                taken[:] = [node.owner]  # someone cordoned it between our read and our write
                return None
            taints = [t for t in node.taints if t.key != MAINTENANCE_TAINT] + [maintenance_taint(run_id)]
            return {
                "metadata": {"annotations": {CORDONED_BY: run_id, CORDON_REASON: " ".join(reason.split()) or None}},
                "spec": {"unschedulable": True, "taints": [t.to_api() for t in taints]},
            }

        self._update_node(name, change)
        if taken:
            return CordonResult(name, "foreign", taken[0])
        return CordonResult(name, "cordoned", CordonOwner("racklife", run_id))

    def uncordon(self, name: str, run_id: str) -> CordonResult:
        """Lift the cordon only if ``run_id`` set it; otherwise raise ``NotOurs`` and change nothing."""
        check_run_id(run_id)
        current = self.node(name)
        owner = current.owner
        ours = maintenance_taint(run_id)
        if current.unschedulable and (owner.kind != "racklife" or owner.run_id != run_id):
            raise NotOurs(name, owner, run_id)
        leftovers = current.annotations.get(CORDONED_BY) == run_id or ours in current.taints
        if not current.unschedulable and not leftovers:
            return CordonResult(name, "already", owner)

        def change(node: KubeNode) -> dict[str, Any] | None:
            if node.unschedulable and node.owner != CordonOwner("racklife", run_id):
                raise NotOurs(name, node.owner, run_id)
            return {
                "metadata": {"annotations": {CORDONED_BY: None, CORDON_REASON: None}},
                "spec": {"unschedulable": None, "taints": [t.to_api() for t in node.taints if t != ours]},
            }

        self._update_node(name, change, lifting_for=run_id)
        return CordonResult(name, "uncordoned" if current.unschedulable else "already", owner)

    # ------------------------------------------------------------ pools

    def set_pool(self, name: str, pool: str, labels: Mapping[str, str] | None = None,
                 taints: Iterable[str | Taint] = ()) -> PoolChange:
        """Give the node its pool's labels and taints, removing only those racklife set for a previous pool.

        The keys racklife manages are recorded in the ``racklife.io/managed``
        annotation; labels and taints set by anyone else are never touched.
        A second call with the same pool changes nothing and says so.
        """
        want_labels = {POOL_LABEL: pool, **dict(labels or {})}
        want_taints = tuple(t if isinstance(t, Taint) else Taint.parse(t) for t in taints)
        change_seen: list[PoolChange] = []

        def change(node: KubeNode) -> dict[str, Any] | None:
            managed = _managed(node)
            gone_labels = tuple(k for k in managed.get("labels", []) if k not in want_labels and k in node.labels)
            set_labels = {k: v for k, v in want_labels.items() if node.labels.get(k) != v}
            gone_taints = tuple(t for t in node.taints
                                if t.key in managed.get("taints", []) and t not in want_taints)
            new_taints = tuple(t for t in want_taints if t not in node.taints)
            record = json.dumps({"labels": sorted(want_labels), "taints": sorted({t.key for t in want_taints})},
                                sort_keys=True)
            result = PoolChange(name, pool, set_labels, gone_labels, new_taints, gone_taints)
            change_seen[:] = [result]
            if not result.changed and node.annotations.get(MANAGED) == record:
                return None
            kept = [t for t in node.taints if t not in gone_taints and t not in want_taints]
            return {
                "metadata": {"labels": {**set_labels, **dict.fromkeys(gone_labels)},
                             "annotations": {MANAGED: record}},
                "spec": {"taints": [t.to_api() for t in (*kept, *want_taints)]},
            }

        self._update_node(name, change)
        return change_seen[0]

    # ------------------------------------------------------------ drain

    def drain(self, name: str, *, deadline_s: float, backoff: EvictionBackoff | None = None,
              run_id: str | None = None, on_wait: Callable[[str], None] | None = None) -> DrainReport:
        """Evict every evictable pod from a cordoned node, honouring PodDisruptionBudgets.

        A 429 from a budget is retried with backoff until ``deadline_s``;
        then the pods still refused are reported with the budget that holds
        each (``DrainReport.blockers``). DaemonSet pods and mirror pods are
        skipped and reported. The node must be cordoned first, or evicted pods
        could land on it again; with ``run_id``, by that run: the pods on a
        node someone else cordoned are theirs to move, not racklife's. ``on_wait`` is told what the
        drain waits on whenever that changes ("eviction of pod default/web-1 (…)"), for progress.
        """
        said = on_wait or (lambda _what: None)
        node = self.node(name)
        if not node.unschedulable:
            raise OperationFailed(name, "refusing to drain a schedulable node: cordon it first")
        if run_id is not None and node.owner != CordonOwner("racklife", check_run_id(run_id)):
            raise OperationFailed(name, f"refusing to drain: the cordon is not held by racklife run {run_id!r} "
                                  f"but by {node.owner.describe()}")
        start = self.clock()
        deadline = start + deadline_s
        delays = (backoff or EvictionBackoff()).delays()
        pods = self.pods_on(name)
        skipped = {p.key: reason for p in pods if (reason := p.skip_reason) is not None}
        pending = [p for p in pods if p.skip_reason is None and not p.terminating]
        evicted = [p.key for p in pods if p.skip_reason is None and p.terminating]
        blocked: dict[str, str] = {}
        calls = 0
        while pending:
            refused: list[KubePod] = []
            suggested = 0.0
            for pod in pending:
                calls += 1
                why = self._evict(pod)
                if why is None:
                    evicted.append(pod.key)
                    blocked.pop(pod.key, None)
                else:
                    blocked[pod.key] = why.message
                    suggested = max(suggested, why.retry_after_s)
                    refused.append(pod)
            pending = refused
            if pending:
                said("eviction of " + ", ".join(f"pod {p.key} ({blocked[p.key]})" for p in pending))
            # The server's Retry-After is a floor: waiting less would only be refused again.
            if not pending or not self._wait(deadline, max(next(delays), suggested)):
                break
        terminating = set(evicted)
        gone_delays = (backoff or EvictionBackoff()).delays()
        while terminating:
            terminating &= {p.key for p in self.pods_on(name)}
            if terminating:
                said("evicted pods to terminate: " + ", ".join(f"pod {k}" for k in sorted(terminating)))
            if not terminating or not self._wait(deadline, next(gone_delays)):
                break
        return DrainReport(name, tuple(evicted), skipped, blocked, tuple(sorted(terminating)), calls,
                           self.clock() - start, self._blockers(pods, blocked))

    def _blockers(self, pods: list[KubePod], blocked: Mapping[str, str]) -> tuple[Blocker, ...]:
        """Each blocked pod with the budget that selects it (read now, so its figures are current)."""
        by_key = {p.key: p for p in pods}
        found: dict[str, list[Budget]] = {}
        out: list[Blocker] = []
        for key, message in sorted(blocked.items()):
            pod = by_key[key]
            budgets = found.setdefault(pod.namespace, self.budgets(pod.namespace))
            held = next((b for b in budgets
                         if sel.match_labels(sel.from_label_selector(b.selector), pod.labels)), None)
            out.append(Blocker(key, message, held))
        return tuple(out)

    # ------------------------------------------------------------ joining

    def wait_ready(self, name: str, gpus: int, *, deadline_s: float, poll_s: float = 2.0) -> KubeNode:
        """Wait until the node's kubelet reports it Ready with ``gpus`` allocatable ``nvidia.com/gpu``.

        What "serving" means for an inference node: registered, Ready, and
        the device plugin advertising every GPU the SKU has. Anything else at
        the deadline — not registered, NotReady, fewer (or more) GPUs — is an
        ``OperationFailed`` saying what was last seen, never a pass.
        """
        deadline = self.clock() + deadline_s
        seen = "not registered"
        while True:
            try:
                node = self.node(name)
            except OperationFailed:
                node = None
            if node is not None:
                if node.ready and node.gpus == gpus:
                    return node
                seen = (f"{'Ready' if node.ready else 'NotReady'}, allocatable {GPU_RESOURCE} {node.gpus} "
                        f"(the SKU has {gpus})")
            if not self._wait(deadline, poll_s):
                raise OperationFailed(name, f"not serving after {deadline_s:.0f} s: {seen}")

    # ------------------------------------------------------------ pools from the inventory

    def set_pool_from(self, inventory: Inventory, name: str) -> PoolChange:
        """Give an inventory node the labels and taints its pool declares (a Kubernetes pool, or refuse)."""
        try:
            node = inventory.node(name)
        except KeyError:
            raise OperationFailed(name, "not in the inventory: racklife sets pools only on nodes it knows") from None
        return self.set_pool_of(name, node.pool, inventory.pool(node.pool))

    def set_pool_of(self, name: str, pool_name: str, pool: Pool) -> PoolChange:
        """Give the node the labels and taints ``pool`` declares, checked as kube-apiserver would first."""
        if pool.scheduler != "kubernetes":
            raise OperationFailed(name, f"pool {pool_name!r} is scheduled by {pool.scheduler}, not Kubernetes")
        problems = [f"label {k}={v}: {e}" for k, v in pool.labels.items() for e in names.label_errors(k, v)]
        taints: list[Taint] = []
        for text in pool.taints:
            try:
                taint = Taint.parse(text)
            except ValueError as e:
                problems.append(str(e))
                continue
            problems += [f"taint {text}: {e}" for e in names.taint_errors(taint.key, taint.value)]
            taints.append(taint)
        if problems:
            raise OperationFailed(name, f"pool {pool_name!r} of the inventory: " + "; ".join(problems))
        return self.set_pool(name, pool_name, pool.labels, taints)

    def _wait(self, deadline: float, delay: float) -> bool:
        """Sleep ``delay`` but not past the deadline; False when the deadline has come."""
        left = deadline - self.clock()
        if left <= 0:
            return False
        self.sleep(min(delay, left))
        return True


def _guard(current: KubeNode, patch: Mapping[str, Any], lifting_for: str | None) -> None:
    if not current.unschedulable:
        return
    spec = patch.get("spec") or {}
    lifts = "unschedulable" in spec and not spec["unschedulable"]
    annotations = (patch.get("metadata") or {}).get("annotations") or {}
    retags = CORDONED_BY in annotations and annotations[CORDONED_BY] != current.annotations.get(CORDONED_BY)
    ours = lifting_for is not None and current.owner == CordonOwner("racklife", lifting_for)
    if (lifts or retags) and not ours:
        raise NotOurs(current.name, current.owner, lifting_for or "(none)")


def _managed(node: KubeNode) -> dict[str, list[str]]:
    try:
        data = json.loads(node.annotations.get(MANAGED) or "{}")
    except ValueError:
        return {}
    return {k: [str(x) for x in v] for k, v in data.items() if isinstance(v, list)} if isinstance(data, dict) else {}

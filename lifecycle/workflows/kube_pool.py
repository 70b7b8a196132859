"""Join and leave a Kubernetes pool, durably, with ownership of every cordon.

The counterpart of :mod:`lifecycle.workflows.slurm_pool` for the inference
pools. ``join``: a node with a passing, unexpired acceptance record is in
service only once Kubernetes says it serves — its Node Ready with the SKU's
``nvidia.com/gpu`` allocatable (``KubeDriver.wait_ready``) — after it has its
pool's labels and taints from the inventory (``KubeDriver.set_pool_of``) and
racklife's own cordon, if any, is lifted. A cordon someone else holds is
reported and left: the join fails closed, the node is ``join_failed`` with
who holds it. ``leave``: cordon with racklife's owner mark (this run's id),
then evict every pod through the Eviction API, honouring
PodDisruptionBudgets with backoff up to a deadline; a drain blocked at the
deadline names each pod and its budget, and the node stays cordoned (by
this run) and ``draining``.

The bodies (:func:`join_body`, :func:`leave_body`) run inside any workflow
that holds the node — the one-node runs here, the role swap and elastic
capacity — so the join and leave logic exists once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from dbos import DBOS

from lifecycle.drivers.errors import DriverError, OperationFailed
from lifecycle.drivers.kube.base import KubeDriver
from lifecycle.drivers.kube.base import NotOurs as KubeNotOurs
from lifecycle.drivers.kube.types import EvictionBackoff
from lifecycle.model.skus import SKUS
from lifecycle.store import shared_store
from lifecycle.workflows.leasing import release_leases, take_leases
from lifecycle.workflows.node_ops import SWAP, Moves, current_run_id, node_pool, node_state, transition
from lifecycle.workflows.retry import step
from lifecycle.workflows.slurm_pool import PoolOutcome, valid_acceptance
from lifecycle.workflows.waiting import waiting


@dataclass(frozen=True)
class KubeSettings:
    """How racklife reaches the cluster; an argument of each run, so a recovered run has it too."""

    kubeconfig: str
    ready_timeout_s: float = 300.0
    """How long a joining node's kubelet may take to report Ready with every GPU."""
    poll_s: float = 1.0


def driver(s: KubeSettings) -> KubeDriver:
    from lifecycle.drivers.kube.api import KubeApiDriver

    return KubeApiDriver.from_kubeconfig(Path(s.kubeconfig))


def close(kube: KubeDriver) -> None:
    close = getattr(kube, "close", None)
    if close is not None:
        close()


# ------------------------------------------------------------------ steps


@step(idempotent=True)
def kube_holder(node: str, s: KubeSettings) -> str:
    """Why the node's cordon is not racklife's to lift ("" when it is schedulable, unregistered or ours)."""
    kube = driver(s)
    try:
        try:
            current = kube.node(node)
        except OperationFailed:
            return ""  # not registered yet: nobody's cordon
        if current.unschedulable and current.owner.kind != "racklife":
            return f"Kubernetes: cordoned by {current.owner.describe()}; racklife leaves it (not lifted)"
        return ""
    finally:
        close(kube)


@step(idempotent=False)  # a wait to a deadline: a retry would extend it
def kube_wait_ready(node: str, gpus: int, s: KubeSettings) -> dict[str, Any]:
    kube = driver(s)
    try:
        with waiting(node, "join", f"the kubelet to report Ready with {gpus} GPU(s)"):
            seen = kube.wait_ready(node, gpus, deadline_s=s.ready_timeout_s, poll_s=s.poll_s)
        return {"ready": seen.ready, "gpus": seen.gpus}
    finally:
        close(kube)


@step(idempotent=True)  # set_pool reads first; the same pool again changes nothing
def kube_set_pool(node: str, pool: str, s: KubeSettings) -> dict[str, Any]:
    kube = driver(s)
    try:
        change = kube.set_pool_of(node, pool, shared_store().pool(pool))
        return {"pool": pool, "labels_set": dict(change.labels_set), "labels_removed": list(change.labels_removed),
                "taints_added": [str(t) for t in change.taints_added],
                "taints_removed": [str(t) for t in change.taints_removed]}
    finally:
        close(kube)


@step(idempotent=True)  # uncordon reads first
def kube_lift_own_cordon(node: str, s: KubeSettings) -> str:
    """Lift racklife's cordon (any racklife run's: this node is leased to us); a foreign one raises NotOurs."""
    kube = driver(s)
    try:
        current = kube.node(node)
        owner = current.owner
        if not current.unschedulable:  # an old mark of racklife's (annotation, taint) is still cleaned up
            return str(kube.uncordon(node, owner.run_id).action) if owner.run_id else "already"
        if owner.kind != "racklife" or not owner.run_id:
            raise KubeNotOurs(node, owner, current_run_id())
        return str(kube.uncordon(node, owner.run_id).action)
    finally:
        close(kube)


@step(idempotent=True)  # cordon reads first; ours again is "already"
def kube_cordon(node: str, reason: str, s: KubeSettings) -> dict[str, Any]:
    kube = driver(s)
    try:
        result = kube.cordon(node, current_run_id(), reason)
        return {"action": result.action, "owner": result.owner.describe()}
    finally:
        close(kube)


@step(idempotent=False)  # a wait to the leave's deadline: never started twice
def kube_drain(node: str, deadline_s: float, s: KubeSettings) -> dict[str, Any]:
    """Evict every pod through the Eviction API; refuses unless this run holds the cordon."""
    kube = driver(s)
    try:
        with waiting(node, "leave", "Kubernetes to evict the node's pods") as say:
            report = kube.drain(node, deadline_s=deadline_s, backoff=EvictionBackoff(first_s=0.5, max_s=5.0),
                                run_id=current_run_id(), on_wait=say)
        return {"evicted": list(report.evicted), "skipped": dict(report.skipped), "blocked": dict(report.blocked),
                "terminating": list(report.terminating), "eviction_calls": report.eviction_calls,
                "waited_s": round(report.waited_s, 2), "complete": report.complete,
                "blockers": [b.describe() for b in report.blockers], "describe": report.describe()}
    finally:
        close(kube)


# ------------------------------------------------------------------ bodies (inside a run holding the node)


def join_body(node: str, s: KubeSettings, moves: Moves = SWAP, pool_name: str | None = None,
              last: Callable[[], Any] | None = None) -> PoolOutcome:
    """Take an accepted (or drained, or join_failed) node of a Kubernetes pool into service.

    ``pool_name``: the pool whose labels and taints it takes (default: its own; a lent node keeps its Slurm
    pool and serves the lend pool); ``last`` runs before the node is recorded in service (a lend lifts its
    Slurm drain there), its DriverError a failed join.
    """
    out = PoolOutcome(node, False, node_state(node))
    store = shared_store()
    rec = store.get(node)  # its sku only; the pool comes journaled (a replay must see what the run saw)
    pool_name = pool_name or node_pool(node)
    pool = store.pool(pool_name)
    if pool.scheduler != "kubernetes":
        out.reason = f"pool '{pool_name}' is not a Kubernetes pool (scheduler: {pool.scheduler})"
        return out
    try:
        foreign = kube_holder(node, s)
    except DriverError as exc:
        out.reason = f"kubernetes: {exc.message}"
        return out
    if out.state == moves.served:
        if foreign:
            out.reason = foreign  # the store's "in service" is stale: say what Kubernetes says
        else:
            out.ok, out.reason = True, "already in service"
        return out
    record = valid_acceptance(node)
    if record is None:
        out.reason = "no passing, unexpired acceptance record: run `racklife accept` first (fail closed)"
        return out
    if moves.join is None:
        if out.state != moves.joining:
            out.reason = f"node is {out.state}; only a node {moves.joining} joins here"
            return out
    elif out.state != moves.joining:
        try:
            transition(node, moves.join, f"join Kubernetes pool {pool_name}", acceptance_record=record)
        except Exception as exc:  # IllegalTransition or StoreError, already journaled by DBOS
            out.reason = str(exc)
            return out
    if foreign:
        out.reason = foreign
        out.state = transition(node, moves.join_fail, foreign)
        return out
    report: dict[str, Any] = {}
    try:
        report["ready"] = kube_wait_ready(node, SKUS[rec.sku].gpu_count, s)
        report["pool"] = kube_set_pool(node, pool_name, s)
        report["uncordon"] = kube_lift_own_cordon(node, s)
        if last is not None:
            report["last"] = last()
    except DriverError as exc:
        out.report = report
        out.reason = f"kubernetes: {exc.message}"
        out.state = transition(node, moves.join_fail, out.reason[:500])
        return out
    out.report = report
    out.state = transition(node, moves.joined, f"in service in Kubernetes pool {pool_name} (Ready, "
                                               f"{report['ready']['gpus']} nvidia.com/gpu allocatable)")
    out.ok = True
    return out


def leave_body(node: str, deadline_s: float, why: str, s: KubeSettings, moves: Moves = SWAP) -> PoolOutcome:
    """Cordon (owned by this run) and drain a node in service in a Kubernetes pool (or lent to one)."""
    out = PoolOutcome(node, False, node_state(node))
    try:
        foreign = kube_holder(node, s)
    except DriverError as exc:
        out.reason = f"kubernetes: {exc.message}"
        return out
    if foreign:
        out.reason = foreign  # nothing recorded: the cordon is not racklife's
        return out
    if moves.left is not None and out.state == moves.left_state:
        out.ok, out.reason = True, f"already {out.state}"
        return out
    if out.state == moves.serving:
        transition(node, moves.leave, why)
    elif out.state != moves.leaving:
        out.reason = f"node is {out.state}; only a node {moves.serving} (or {moves.leaving}) can leave"
        return out
    try:
        cordon = kube_cordon(node, why, s)
        if cordon["action"] == "foreign":
            out.reason = f"Kubernetes: cordoned by {cordon['owner']} meanwhile; racklife leaves it"
            out.state = moves.leaving
            return out
        out.report = kube_drain(node, deadline_s, s)
    except DriverError as exc:
        out.reason = f"kubernetes: {exc.message}"
        out.state = moves.leaving
        return out
    if out.report.get("complete"):
        out.state = moves.leaving if moves.left is None else transition(
            node, moves.left, f"drained from Kubernetes; pods evicted: {len(out.report.get('evicted', []))}")
        out.ok = True
    else:
        out.state = moves.leaving
        out.reason = "not drained by the deadline: " + "; ".join(
            out.report.get("blockers") or [f"still terminating: {', '.join(out.report.get('terminating', []))}"])
    return out


# ------------------------------------------------------------------ one-node runs


@DBOS.workflow(name="join_kube_node")
def join_kube_node(node: str, s: KubeSettings) -> dict[str, Any]:
    """Join one node to its Kubernetes pool as a run that holds it (one run per node)."""
    held = take_leases([node], "join_kube_node")
    if held:
        return asdict(PoolOutcome(node, False, node_state(node), held[node]))
    try:
        return asdict(join_body(node, s))
    finally:
        release_leases()


@DBOS.workflow()
def leave_kube_node(node: str, deadline_s: float, why: str, s: KubeSettings) -> dict[str, Any]:
    """Cordon and drain one node out of its Kubernetes pool as a run that holds it (the Pulumi pool membership's
    delete; the role swap runs the same body inside its own run)."""
    held = take_leases([node], "leave_kube_node")
    if held:
        return asdict(PoolOutcome(node, False, node_state(node), held[node]))
    try:
        return asdict(leave_body(node, deadline_s, why, s))
    finally:
        release_leases()

"""Role swap: move a node between a Slurm pool and a Kubernetes pool as one durable transaction.

One run per node (its lease taken first), each phase a journaled step, so a
controller killed anywhere resumes the run and finishes it exactly once (one
drain, one move, one join). The phases:

1. pre-checks (:mod:`lifecycle.workflows.roleswap_checks`), fail closed:
   refused with the numbers, nothing changed; then the source pool's floor
   is checked again and this node's leave reserved in one store transaction
   (``leases.reserve_leave``), so two swaps out of one pool cannot both take
   its last spare node;
2. leave the source with the join/leave bodies every workflow shares
   (``slurm_pool._leave``: drain, wait or requeue, every job reported;
   ``kube_pool.leave_body``: owner-tagged cordon, Eviction API with
   PodDisruptionBudget backoff up to the deadline, blocking pods named);
3. move the node to the target pool in the store and switch its role (the
   site's hook, as elastic capacity uses);
4. re-test: acceptance of the node at the target pool's ``retest_level``, so a
   node that broke while serving is quarantined rather than joined;
5. join the target (``slurm_pool._join`` or ``kube_pool.join_body``).

On failure the node goes back to its source pool if it is healthy (the leave
did not finish: racklife's own drain or cordon is lifted; the join failed
after a passing re-test: back, rejoined), else it is quarantined with the
reason, and a quarantined node is held in the target scheduler with
racklife's drain or cordon. It is never left in neither pool silently. Each
run records the time of each phase in the node's history (a ``role-swap``
row) and in its output.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any

from dbos import DBOS

from lifecycle.drivers.errors import DriverError
from lifecycle.drivers.slurm.driver import SlurmDriver
from lifecycle.drivers.slurm.role import CommandRoleSwitch, Role
from lifecycle.drivers.slurm.runner import CommandRunner
from lifecycle.model.states import Actor
from lifecycle.store import leases, shared_store
from lifecycle.workflows import accept, kube_pool, slurm_pool
from lifecycle.workflows.elastic import slurm_registered
from lifecycle.workflows.leasing import release_leases, take_leases
from lifecycle.workflows.node_ops import current_run_id, node_pool, node_state, transition
from lifecycle.workflows.retry import step
from lifecycle.workflows.roleswap_checks import Checked, SwapSettings, prechecks


@dataclass
class SwapOutcome:
    node: str
    source: str
    target: str
    ok: bool = False
    state: str = ""
    pool: str = ""
    reason: str = ""
    checks: list[dict[str, Any]] = field(default_factory=list)
    leave: dict[str, Any] = field(default_factory=dict)
    retest: dict[str, Any] = field(default_factory=dict)
    join: dict[str, Any] = field(default_factory=dict)
    rollback: dict[str, Any] = field(default_factory=dict)
    phases: dict[str, float] = field(default_factory=dict)
    """Seconds per phase: drain_wait, switch, retest, join (and rollback when there was one)."""


# ------------------------------------------------------------------ steps


@step(idempotent=True)
def now() -> float:
    """Wall time, journaled: a replayed run measures its phases with the times it first saw."""
    return time.time()


@step(idempotent=True)  # reads only
def swap_checks(node: str, s: SwapSettings) -> dict[str, Any]:
    return prechecks(shared_store(), node, s).to_dict()


@step(idempotent=True)  # a re-run finds its own reservation and counts the same
def reserve_floor(node: str, source: str, batch: list[str]) -> dict[str, Any]:
    """Check the source pool's floor and reserve this node's leave, atomically (concurrent swaps)."""
    count = leases.reserve_leave(shared_store(), node, current_run_id(), source, batch)
    return {"ok": count.ok, "detail": count.describe()}


@step(idempotent=True)  # the same pool again records nothing
def move_pool(node: str, pool: str, why: str) -> str:
    shared_store().set_pool(node, pool, Actor.WORKFLOW, f"{why} (run {current_run_id()})")
    return pool


@step(idempotent=False)  # reboots the node into another role
def swap_role(node: str, scheduler: str, s: SwapSettings) -> str:
    role: Role = "slurm" if scheduler == "slurm" else "kubernetes"
    return CommandRoleSwitch(s.role_cmd).switch(node, role)


@step(idempotent=True)  # resume_if_ours reads first
def lift_own_drain(node: str) -> list[dict[str, str]]:
    """Lift this run's drain in Slurm (a leave that did not finish); someone else's raises NotOurs."""
    results = SlurmDriver(CommandRunner()).resume_if_ours([node], current_run_id())
    return [{"node": r.node, "action": r.action} for r in results]


@step(idempotent=True)
def record_swap(node: str, source: str, target: str, summary: str) -> None:
    shared_store().record_change(node, "role-swap", source, target, Actor.WORKFLOW,
                                 f"run {current_run_id()}: {summary}")


# ------------------------------------------------------------------ phases


def _scheduler(pool: str) -> str:
    return shared_store().pool(pool).scheduler


def _leave(node: str, source: str, s: SwapSettings) -> slurm_pool.PoolOutcome:
    why = f"role swap to {s.target}"
    if _scheduler(source) == "slurm":
        return slurm_pool.PoolOutcome(**slurm_pool._leave(node, s.policy, s.deadline_s, why))
    pool = shared_store().pool(source)
    return kube_pool.leave_body(node, pool.drain_deadline_s if s.deadline_s is None else s.deadline_s, why, s.kube)


def _join(node: str, s: SwapSettings) -> slurm_pool.PoolOutcome:
    if _scheduler(node_pool(node)) == "slurm":
        return slurm_pool.PoolOutcome(**slurm_pool._join(node))
    return kube_pool.join_body(node, s.kube)


def _switch(node: str, scheduler: str, s: SwapSettings) -> dict[str, Any]:
    out: dict[str, Any] = {"hook": swap_role(node, scheduler, s)}
    if scheduler == "slurm":
        out["slurm"] = slurm_registered(node, s.register_timeout_s)
    return out


def _undo_leave(node: str, source: str, s: SwapSettings, out: SwapOutcome) -> None:
    """The leave did not finish: lift racklife's own drain or cordon; the node serves its source again."""
    try:
        if _scheduler(source) == "slurm":
            out.rollback["resume"] = lift_own_drain(node)
        else:
            out.rollback["uncordon"] = kube_pool.kube_lift_own_cordon(node, s.kube)
    except DriverError as exc:
        out.rollback["error"] = exc.message
        out.reason += f"; racklife's own hold could not be lifted ({exc.message}): the node stays draining"
        return
    if node_state(node) == "draining":
        out.state = transition(node, "drain_abort", f"role swap to {s.target} rolled back: {out.reason}"[:500])


def _back_to_source(node: str, source: str, s: SwapSettings, out: SwapOutcome) -> None:
    """After the node left: put it back in its source pool and rejoin it, or quarantine it."""
    try:
        move_pool(node, source, f"role swap to {s.target} rolled back")
        if _scheduler(source) != _scheduler(s.target):
            out.rollback["switch"] = _switch(node, _scheduler(source), s)
        back = _join(node, s)
        out.rollback["join"] = asdict(back)
        if back.ok:
            out.state = back.state
            out.reason += f"; rolled back: in service in pool {source} again"
            return
        why = back.reason
    except DriverError as exc:
        why = exc.message
    out.reason += f"; the rollback to {source} failed too ({why})"
    _quarantine(node, out, f"role swap to {s.target} failed and could not be rolled back: {why}", s)


def _quarantine(node: str, out: SwapOutcome, why: str, s: SwapSettings) -> None:
    state = node_state(node)
    if state in ("drained", "join_failed", "in_service"):
        state = transition(node, "quarantine", why[:500])
    out.state = state
    _hold_quarantined(node, s, why, out)


def _hold_quarantined(node: str, s: SwapSettings, why: str, out: SwapOutcome) -> None:
    """A quarantined node must take no work in its current pool's scheduler: racklife's drain or cordon."""
    try:
        if _scheduler(node_pool(node)) == "kubernetes":
            out.rollback["held"] = kube_pool.kube_cordon(node, f"quarantined: {why}"[:200], s.kube)
        else:
            out.rollback["held"] = accept.quarantine_in_slurm(node, why[:200])
    except DriverError as exc:
        out.rollback["held"] = {"error": exc.message}


# ------------------------------------------------------------------ the workflow


@DBOS.workflow(name="role_swap")
def role_swap(node: str, s: SwapSettings) -> dict[str, Any]:
    """Move one node to ``s.target`` as a run that holds it (one run per node)."""
    held = take_leases([node], "role_swap")
    if held:
        return asdict(SwapOutcome(node, "", s.target, state=node_state(node), reason=held[node]))
    try:
        out = _swap(node, s)
        out.pool = node_pool(node)
        return asdict(out)
    finally:
        release_leases()


def _swap(node: str, s: SwapSettings) -> SwapOutcome:
    checked = Checked.from_dict(swap_checks(node, s))
    out = SwapOutcome(node, checked.source, s.target, state=node_state(node), checks=checked.to_dict()["checks"])
    if not checked.ok:
        out.reason = f"refused, nothing changed: {checked.refusal()}"
        return out
    source = checked.source
    floor = reserve_floor(node, source, list(s.batch))
    out.checks.append({"name": "pool floor (reserved)", "ok": floor["ok"], "detail": floor["detail"]})
    if not floor["ok"]:
        out.reason = f"refused, nothing changed: pool floor: {floor['detail']}"
        return out
    t0 = now()
    left = _leave(node, source, s)
    out.leave = asdict(left)
    t1 = now()
    out.phases["drain_wait"] = round(t1 - t0, 3)
    if not left.ok:
        out.reason = f"leaving {source} failed: {left.reason}"
        _undo_leave(node, source, s, out)
        _finish(node, out, t1)
        return out
    try:
        move_pool(node, s.target, f"role swap from {source}")
        if _scheduler(source) != _scheduler(s.target):
            out.leave["switch"] = _switch(node, _scheduler(s.target), s)
    except DriverError as exc:
        out.reason = f"the role switch to {s.target} failed: {exc.message}"
        _back_to_source(node, source, s, out)
        _finish(node, out, t1)
        return out
    t2 = now()
    out.phases["switch"] = round(t2 - t1, 3)
    verdicts = accept._accept([node], s.accept)
    out.retest = verdicts[0] if verdicts else {}
    t3 = now()
    out.phases["retest"] = round(t3 - t2, 3)
    if not out.retest.get("passed"):
        why = "; ".join(out.retest.get("reasons") or []) or "no verdict"
        out.reason = f"re-test at level {s.accept.level} failed: {why}"
        out.state = node_state(node)
        if out.state != "quarantined":
            _quarantine(node, out, out.reason, s)
        else:
            _hold_quarantined(node, s, out.reason, out)
        _finish(node, out, t3)
        return out
    joined = _join(node, s)
    out.join = asdict(joined)
    t4 = now()
    out.phases["join"] = round(t4 - t3, 3)
    out.state = joined.state
    if not joined.ok:
        out.reason = f"joining {s.target} failed: {joined.reason}"
        _back_to_source(node, source, s, out)
        _finish(node, out, t4)
        return out
    out.ok = True
    out.reason = f"in service in pool {s.target}"
    _finish(node, out, t4)
    return out


def _finish(node: str, out: SwapOutcome, since: float) -> None:
    if out.rollback:
        out.phases["rollback"] = round(now() - since, 3)
    times = ", ".join(f"{k.replace('_', ' ')} {v:.1f} s" for k, v in out.phases.items())
    verdict = "done" if out.ok else f"failed, node {out.state}"
    record_swap(node, out.source, out.target, f"{verdict}; {times}; {out.reason}"[:500])

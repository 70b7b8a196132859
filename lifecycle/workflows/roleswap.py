"""Role swap: move a node between a Slurm pool and a Kubernetes pool as one durable transaction.

One run per node (its lease taken first), each phase a journaled step, so a
controller killed anywhere resumes the run and finishes it exactly once (one
drain, one move, one join). Phases 2 to 5 are the one per-node path every
change of a serving node takes (:mod:`lifecycle.workflows.node_cycle`); the
swap's own changes are the pool move and the role switch (:class:`PoolMove`,
:class:`RoleSwitch`), with, under ``--reimage``, a reimage with the target
pool's image between them (:mod:`lifecycle.workflows.changes`). Elastic
capacity's lend and reclaim are the same cycle with only the role switch
(:mod:`lifecycle.workflows.elastic`). The phases:

1. pre-checks (:mod:`lifecycle.workflows.roleswap_checks`), fail closed:
   refused with the numbers, nothing changed; then the source pool's floor
   is checked again and this node's leave reserved in one store transaction
   (``leases.reserve_leave``), so two swaps out of one pool cannot both take
   its last spare node;
2. leave the source with the join/leave bodies every workflow shares
   (``slurm_pool._leave``: drain, wait or requeue, every job reported;
   ``kube_pool.leave_body``: owner-tagged cordon, Eviction API with
   PodDisruptionBudget backoff up to the deadline, blocking pods named);
3. move the node to the target pool in the store; with ``reimage``,
   reprovision it with the target pool's image; switch its role (the site's
   hook, as elastic capacity uses);
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

from dataclasses import asdict, dataclass, field
from typing import Any

from dbos import DBOS

from lifecycle.model.states import Actor
from lifecycle.store import shared_store
from lifecycle.workflows import changes as change_kinds
from lifecycle.workflows.leasing import release_leases, reserve_floor, take_leases
from lifecycle.workflows.node_cycle import (
    Change,
    ChangeResult,
    CycleOutcome,
    LeaveSpec,
    cycle,
    lift_own_drain,
    now,
    scheduler_of,
    summary,
)
from lifecycle.workflows.node_ops import current_run_id, node_pool, node_state
from lifecycle.workflows.retry import step
from lifecycle.workflows.role_switch import RoleSwitch
from lifecycle.workflows.roleswap_checks import Checked, SwapSettings, prechecks

__all__ = ["PoolMove", "RoleSwitch", "SwapOutcome", "lift_own_drain", "now", "role_swap", "swap_changes"]


@dataclass
class SwapOutcome(CycleOutcome):
    source: str = ""
    target: str = ""
    pool: str = ""
    checks: list[dict[str, Any]] = field(default_factory=list)


# ------------------------------------------------------------------ steps


@step(idempotent=True)  # reads only
def swap_checks(node: str, s: SwapSettings) -> dict[str, Any]:
    return prechecks(shared_store(), node, s).to_dict()


@step(idempotent=True)  # the same pool again records nothing
def move_pool(node: str, pool: str, why: str) -> str:
    shared_store().set_pool(node, pool, Actor.WORKFLOW, f"{why} (run {current_run_id()})", run_id=current_run_id())
    return pool


@step(idempotent=True)
def record_swap(node: str, source: str, target: str, summary: str) -> None:
    shared_store().record_change(node, "role-swap", source, target, Actor.WORKFLOW,
                                 f"run {current_run_id()}: {summary}", run_id=current_run_id())


# ------------------------------------------------------------------ the swap's change


@dataclass(frozen=True)
class PoolMove:
    """The node's pool in the store: the target's, or back to the source on a rollback."""

    source: str
    target: str
    name: str = "move"

    def precheck(self) -> str:
        return ""

    def apply(self, node: str) -> ChangeResult:
        return ChangeResult(True, detail={"pool": move_pool(node, self.target, f"role swap from {self.source}")})

    def undo(self, node: str) -> ChangeResult | None:
        return ChangeResult(True, detail={"pool": move_pool(node, self.source,
                                                            f"role swap to {self.target} rolled back")})


def swap_changes(source: str, s: SwapSettings) -> list[Change]:
    """The swap's changes in order: the pool; the target pool's image (``--reimage``); the role.

    The reimage comes before the role switch: a node boots its new image, then its role is set.
    """
    out: list[Change] = [PoolMove(source, s.target)]
    if s.reimage is not None and s.provision is not None:
        out.append(change_kinds.ImageChange(s.reimage, s.provision))
    if scheduler_of(source) != scheduler_of(s.target):
        out.append(RoleSwitch(scheduler_of(source), scheduler_of(s.target), s.role_cmd, s.register_timeout_s))
    return out


# ------------------------------------------------------------------ the workflow


@DBOS.workflow(name="role_swap")
def role_swap(node: str, s: SwapSettings) -> dict[str, Any]:
    """Move one node to ``s.target`` as a run that holds it (one run per node)."""
    held = take_leases([node], "role_swap")
    if held:
        return asdict(SwapOutcome(node, state=node_state(node), reason=held[node], target=s.target))
    try:
        out = _swap(node, s)
        out.pool = node_pool(node)
        return asdict(out)
    finally:
        release_leases()


def _swap(node: str, s: SwapSettings) -> SwapOutcome:
    checked = Checked.from_dict(swap_checks(node, s))
    out = SwapOutcome(node, state=node_state(node), source=checked.source, target=s.target,
                      checks=checked.to_dict()["checks"])
    if not checked.ok:
        out.reason = f"refused, nothing changed: {checked.refusal()}"
        return out
    if s.reimage is not None and s.provision is None:
        out.reason = "refused, nothing changed: a reimage needs the boot server (no built images given)"
        return out
    floor = reserve_floor(node, checked.source, list(s.batch))
    out.checks.append({"name": "pool floor (reserved)", "ok": floor["ok"], "detail": floor["detail"]})
    if not floor["ok"]:
        out.reason = f"refused, nothing changed: pool floor: {floor['detail']}"
        return out
    cycle(node, LeaveSpec(f"role swap to {s.target}", s.policy, s.deadline_s), swap_changes(checked.source, s),
          s.accept, s.kube, out)
    record_swap(node, out.source, out.target, summary(out))
    return out

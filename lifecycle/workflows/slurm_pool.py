"""Join and leave a Slurm pool, durably, with ownership of every drain.

``join``: a node with a passing, unexpired acceptance record is put in its
pool's partition and resumed — but only if the drain on it is racklife's
(or there is none); a node drained by an admin or a health checker is
reported and left alone. ``leave``: drain with racklife's reason prefix,
wait for running jobs up to the pool's deadline, then requeue or cancel as
the pool's policy says; the report names every job touched.

Both read Slurm's own view of the node first (``slurm_holder``), because the
store's state is only what racklife last did: a node the store has in service
may since have been drained by an admin. Such a node is reported with its
owner and reason, nothing on it changes (no resume, no drain, no job
requeued or cancelled, no transition recorded) and the outcome is a refusal.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from dbos import DBOS

from lifecycle.drivers.errors import DriverError
from lifecycle.drivers.slurm.driver import HeldByOther, NotOurs, SlurmDriver, foreign_hold, held_by_other
from lifecycle.drivers.slurm.leave import LEAVE_ALONE
from lifecycle.drivers.slurm.leave import leave as slurm_leave
from lifecycle.drivers.slurm.runner import CommandRunner
from lifecycle.model.inventory import Pool
from lifecycle.store import shared_store
from lifecycle.workflows.leasing import release_leases, take_leases
from lifecycle.workflows.node_ops import current_run_id, node_pool, node_state, transition
from lifecycle.workflows.retry import step


@dataclass
class PoolOutcome:
    node: str
    ok: bool
    state: str
    reason: str = ""
    report: dict[str, Any] = field(default_factory=dict)


def _driver() -> SlurmDriver:
    return SlurmDriver(CommandRunner())


def _pool_of(node: str) -> tuple[str, Pool]:
    name = node_pool(node)  # journaled: workflow bodies must not branch on a bare store read
    return name, shared_store().pool(name)


@step(idempotent=True)
def valid_acceptance(node: str) -> str | None:
    store = shared_store()
    rec = store.valid_acceptance(node)
    return rec.id if rec else None


@step(idempotent=True)
def slurm_holder(node: str, action: str) -> str:
    """Why the node is not racklife's to change ("" when it is free or held by racklife)."""
    current = _driver().node(node)
    return held_by_other(current, action) if foreign_hold(current) is not None else ""


@step(idempotent=True)  # partition membership and resume read first
def slurm_join(node: str, partition: str) -> dict[str, Any]:
    """Put the node in its partition, then resume it if (and only if) the drain is ours."""
    driver = _driver()
    driver.add_to_partition(partition, [node])
    results = driver.resume_if_ours([node])
    return {"partition": partition, "resume": [{"node": r.node, "action": r.action} for r in results]}


@step(idempotent=False)  # requeues and cancels jobs: never twice
def drain_and_empty(node: str, policy: str, deadline_s: float, reason: str) -> dict[str, Any]:
    if policy not in ("wait", "requeue", "cancel"):
        raise ValueError(f"unknown leave policy {policy!r}")
    report = slurm_leave(_driver(), [node], run_id=current_run_id(), reason=reason,
                         policy=policy,  # type: ignore[arg-type]
                         deadline_s=deadline_s)
    return report.to_dict()


@DBOS.workflow(name="join_node")
def join_node(node: str) -> dict[str, Any]:
    """Join one node as a run that holds it (one run per node)."""
    return _leased(node, "join_node", lambda: _join(node))


@DBOS.workflow(name="leave_node")
def leave_node(node: str, policy: str | None, deadline_s: float | None, why: str) -> dict[str, Any]:
    """Drain one node out of Slurm as a run that holds it (one run per node)."""
    return _leased(node, "leave_node", lambda: _leave(node, policy, deadline_s, why))


def _leased(node: str, workflow: str, body: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    held = take_leases([node], workflow)
    if held:
        return asdict(PoolOutcome(node, False, node_state(node), held[node]))
    try:
        return body()
    finally:
        release_leases()


def _join(node: str) -> dict[str, Any]:
    out = PoolOutcome(node, False, node_state(node))
    pool_name, pool = _pool_of(node)
    if pool.scheduler != "slurm" or not pool.partition:
        out.reason = f"pool '{pool_name}' is not a Slurm pool (scheduler: {pool.scheduler})"
        return asdict(out)
    try:
        foreign = slurm_holder(node, "not lifted")
    except DriverError as exc:
        out.reason = f"slurm: {exc.message}"
        return asdict(out)
    if out.state == "in_service":
        if foreign:
            out.reason = foreign  # the store's "in service" is stale: say what Slurm says
        else:
            out.ok, out.reason = True, "already in service"
        return asdict(out)
    record = valid_acceptance(node)
    if record is None:
        out.reason = "no passing, unexpired acceptance record: run `racklife accept` first (fail closed)"
        return asdict(out)
    if out.state != "joining":
        try:
            transition(node, "join", f"join Slurm partition {pool.partition}", acceptance_record=record)
        except Exception as exc:  # IllegalTransition or StoreError, already journaled by DBOS
            out.reason = str(exc)
            return asdict(out)
    if foreign:
        out.reason = foreign
        out.state = transition(node, "join_fail", foreign)
        return asdict(out)
    try:
        out.report = slurm_join(node, pool.partition)
    except NotOurs as exc:
        out.reason = exc.message
        out.state = transition(node, "join_fail", exc.message)
        return asdict(out)
    except DriverError as exc:
        out.reason = f"slurm: {exc.message}"
        out.state = transition(node, "join_fail", out.reason)
        return asdict(out)
    out.state = transition(node, "join_done", f"in service in partition {pool.partition}")
    out.ok = True
    return asdict(out)


def _leave(node: str, policy: str | None, deadline_s: float | None, why: str) -> dict[str, Any]:
    out = PoolOutcome(node, False, node_state(node))
    pool_name, pool = _pool_of(node)
    if pool.scheduler != "slurm":
        out.reason = f"pool '{pool_name}' is not a Slurm pool (scheduler: {pool.scheduler})"
        return asdict(out)
    try:
        foreign = slurm_holder(node, LEAVE_ALONE)
    except DriverError as exc:
        out.reason = f"slurm: {exc.message}"
        return asdict(out)
    if foreign:
        out.reason = foreign  # nothing recorded: the drain is not racklife's
        return asdict(out)
    if out.state == "drained":
        out.ok, out.reason = True, "already drained"
        return asdict(out)
    if out.state == "in_service":
        transition(node, "drain", why)
    elif out.state != "draining":
        out.reason = f"node is {out.state}; only a node in service (or draining) can leave"
        return asdict(out)
    try:
        out.report = drain_and_empty(node, policy or pool.leave_policy,
                                 pool.drain_deadline_s if deadline_s is None else deadline_s, why)
    except HeldByOther as exc:
        # Someone else drained it between our read and our drain: their drain, their jobs.
        out.reason = exc.message
        out.state = "draining"
        return asdict(out)
    except DriverError as exc:
        out.reason = f"slurm: {exc.message}"
        out.state = "draining"
        return asdict(out)
    if out.report.get("complete"):
        out.state = transition(node, "drain_done", f"drained ({out.report.get('policy')}); jobs touched: "
                               f"{len(out.report.get('jobs', []))}")
        out.ok = True
    else:
        out.state = "draining"
        out.reason = "jobs still running at the deadline; the node stays draining (run leave again)"
    return asdict(out)


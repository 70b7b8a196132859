"""Join and leave a Slurm pool, durably, with ownership of every drain.

``join``: a node with a passing, unexpired acceptance record is put in its
pool's partition and resumed — but only if the drain on it is racklife's
(or there is none); a node drained by an admin or a health checker is
reported and left alone. ``leave``: drain with racklife's reason prefix,
wait for running jobs up to the pool's deadline, then requeue or cancel as
the pool's policy says; the report names every job touched.

A join ends only when Slurm would start a job on the node (up, responding,
not drained: ``slurm_await_serving``), as a Kubernetes join ends on Ready: a
node resumed while its slurmd has not registered shows ``idle*`` and serves
nothing, and a rolling upgrade that counted it back would take the next batch
out with it still missing. A node that does not serve within the pool's
``join_deadline_s`` fails its join and is drained again with racklife's
reason, so a failed join never leaves a node Slurm may schedule on.

Both read Slurm's own view of the node first (``slurm_holder``), because the
store's state is only what racklife last did: a node the store has in service
may since have been drained by an admin. Such a node is reported with its
owner and reason, nothing on it changes (no resume, no drain, no job
requeued or cancelled, no transition recorded) and the outcome is a refusal.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from dbos import DBOS

from lifecycle.drivers.errors import DriverError
from lifecycle.drivers.slurm.driver import HeldByOther, NotOurs, SlurmDriver, foreign_hold, held_by_other
from lifecycle.drivers.slurm.leave import LEAVE_ALONE
from lifecycle.drivers.slurm.leave import leave as slurm_leave
from lifecycle.drivers.slurm.runner import CommandRunner
from lifecycle.drivers.slurm.types import NodeState
from lifecycle.model.inventory import Pool
from lifecycle.model.vocab import LeavePolicy
from lifecycle.store import shared_store
from lifecycle.workflows.leasing import release_leases, take_leases
from lifecycle.workflows.node_ops import SWAP, Moves, current_run_id, node_pool, node_state, transition
from lifecycle.workflows.retry import step
from lifecycle.workflows.waiting import waiting


@dataclass
class PoolOutcome:
    node: str
    ok: bool
    state: str
    reason: str = ""
    report: dict[str, Any] = field(default_factory=dict)


SERVING_POLL_S = 0.5


def _driver() -> SlurmDriver:
    return SlurmDriver(CommandRunner())


def _pool_of(node: str, pool: str | None = None) -> tuple[str, Pool]:
    name = pool or node_pool(node)  # journaled: workflow bodies must not branch on a bare store read
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


def wait_for_slurm(node: str, wait_s: float, phase: str, what: str, ok: Callable[[NodeState], bool]) -> str:
    """Poll Slurm's state of the node until ``ok``; "" when it was, else what Slurm said last at ``wait_s``."""
    driver = _driver()
    deadline = time.monotonic() + wait_s
    last = "unknown"
    with waiting(node, phase, what) as say:
        while True:
            try:
                st = driver.node(node).state
                last = str(st)
                if ok(st):
                    return ""
            except DriverError as exc:
                last = exc.message
            if time.monotonic() >= deadline:
                return last
            say(f"{what} (Slurm says {last})")
            time.sleep(SERVING_POLL_S)


@step(idempotent=False)  # a wait to a deadline: a retry would extend it
def slurm_await_serving(node: str, wait_s: float) -> str:
    """Wait until Slurm would start a job on the node; "" when it would, else why not (what Slurm said last)."""
    last = wait_for_slurm(node, wait_s, "join", "Slurm to have the node serving (up, responding, not drained)",
                          lambda st: st.serving)
    return f"Slurm did not have the node serving within {wait_s:.0f} s of its resume (last: {last})" if last else ""


@step(idempotent=True)  # a node held already keeps its holder's reason
def slurm_hold_again(node: str, why: str) -> str:
    """Drain a node whose join failed after its resume, with racklife's reason: Slurm schedules nothing on it."""
    owner = _driver().drain([node], current_run_id(), f"join failed: {why}")[node]
    return owner.describe()


@step(idempotent=False)  # requeues and cancels jobs: never twice
def drain_and_empty(node: str, policy: LeavePolicy, deadline_s: float, reason: str) -> dict[str, Any]:
    with waiting(node, "leave", "Slurm to drain the node") as say:
        report = slurm_leave(_driver(), [node], run_id=current_run_id(), reason=reason, policy=policy,
                             deadline_s=deadline_s, on_wait=say)
    return report.to_dict()


@DBOS.workflow(name="join_node")
def join_node(node: str) -> dict[str, Any]:
    """Join one node as a run that holds it (one run per node)."""
    return _leased(node, "join_node", lambda: _join(node))


@DBOS.workflow(name="leave_node")
def leave_node(node: str, policy: LeavePolicy | None, deadline_s: float | None, why: str) -> dict[str, Any]:
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


def _join(node: str, moves: Moves = SWAP, pool_name: str | None = None,
          last: Callable[[], Any] | None = None) -> dict[str, Any]:
    """Join the node's pool (or ``pool_name``) recording ``moves``' events; ``last`` runs before the node is in
    service (a lend lifts its Slurm drain there), its DriverError a failed join."""
    out = PoolOutcome(node, False, node_state(node))
    pool_name, pool = _pool_of(node, pool_name)
    if pool.scheduler != "slurm" or not pool.partition:
        out.reason = f"pool '{pool_name}' is not a Slurm pool (scheduler: {pool.scheduler})"
        return asdict(out)
    try:
        foreign = slurm_holder(node, "not lifted")
    except DriverError as exc:
        out.reason = f"slurm: {exc.message}"
        return asdict(out)
    if out.state == moves.served:
        if foreign:
            out.reason = foreign  # the store's "in service" is stale: say what Slurm says
        else:
            out.ok, out.reason = True, "already in service"
        return asdict(out)
    record = valid_acceptance(node)
    if record is None:
        out.reason = "no passing, unexpired acceptance record: run `racklife accept` first (fail closed)"
        return asdict(out)
    if moves.join is None:
        if out.state != moves.joining:
            out.reason = f"node is {out.state}; only a node {moves.joining} joins here"
            return asdict(out)
    elif out.state != moves.joining:
        try:
            transition(node, moves.join, f"join Slurm partition {pool.partition}", acceptance_record=record)
        except Exception as exc:  # IllegalTransition or StoreError, already journaled by DBOS
            out.reason = str(exc)
            return asdict(out)
    if foreign:
        out.reason = foreign
        out.state = transition(node, moves.join_fail, foreign)
        return asdict(out)
    try:
        out.report = slurm_join(node, pool.partition)
        if last is not None:
            out.report["last"] = last()
    except NotOurs as exc:
        out.reason = exc.message
        out.state = transition(node, moves.join_fail, exc.message)
        return asdict(out)
    except DriverError as exc:
        out.reason = f"slurm: {exc.message}"
        out.state = transition(node, moves.join_fail, out.reason)
        return asdict(out)
    why = slurm_await_serving(node, float(pool.join_deadline_s))
    if why:
        out.reason = f"slurm: {why}"
        try:
            out.report["held_by"] = slurm_hold_again(node, why)
        except DriverError as exc:
            out.reason += f"; racklife's drain could not be set again ({exc.message})"
        out.state = transition(node, moves.join_fail, out.reason[:500])
        return asdict(out)
    out.state = transition(node, moves.joined, f"in service in partition {pool.partition}")
    out.ok = True
    return asdict(out)


def _leave(node: str, policy: LeavePolicy | None, deadline_s: float | None, why: str,
           moves: Moves = SWAP) -> dict[str, Any]:
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
    if moves.left is not None and out.state == moves.left_state:
        out.ok, out.reason = True, f"already {out.state}"
        return asdict(out)
    if out.state == moves.serving:
        transition(node, moves.leave, why)
    elif out.state != moves.leaving:
        out.reason = f"node is {out.state}; only a node {moves.serving} (or {moves.leaving}) can leave"
        return asdict(out)
    try:
        out.report = drain_and_empty(node, policy or pool.leave_policy,
                                 pool.drain_deadline_s if deadline_s is None else deadline_s, why)
    except HeldByOther as exc:
        # Someone else drained it between our read and our drain: their drain, their jobs.
        out.reason = exc.message
        out.state = moves.leaving
        return asdict(out)
    except DriverError as exc:
        out.reason = f"slurm: {exc.message}"
        out.state = moves.leaving
        return asdict(out)
    if out.report.get("complete"):
        out.state = moves.leaving if moves.left is None else transition(
            node, moves.left, f"drained ({out.report.get('policy')}); jobs touched: {len(out.report.get('jobs', []))}")
        out.ok = True
    else:
        out.state = moves.leaving
        out.reason = "jobs still running at the deadline; the node stays draining (run leave again)"
    return asdict(out)


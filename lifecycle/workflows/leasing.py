"""One run per node, as workflow steps, and what happens to the runs no one can finish.

A workflow takes its nodes' leases as its first step (:func:`take_leases`)
and gives them back as its last act (:func:`release_leases`, in a ``finally`` so an
error ends the run without keeping its nodes). A run that moves a node out of
a pool reserves that leave on the lease with the pool's floor check
(:func:`reserve_floor`: role swap, lend, reclaim). A run that ends without that
step (cancelled, or out of recovery attempts) is terminal in the engine, and
any controller releases its leases (:func:`sweep`).

A run whose process died and that this code cannot replay (started under
another application version, or out of recovery attempts) would otherwise
stay PENDING forever with its nodes in a "-ing" state no one finishes.
:func:`sweep` cancels it, moves each of its nodes the way the state machine
says a failed attempt lands (``states.ABANDON``), and releases its leases.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Any

from dbos import DBOS

from lifecycle.model.states import ABANDON, Actor
from lifecycle.store import Store, leases, shared_store
from lifecycle.workflows import engine
from lifecycle.workflows.node_ops import current_run_id
from lifecycle.workflows.retry import step

LIVE = frozenset({"PENDING", "ENQUEUED"})
TERMINAL = frozenset({"SUCCESS", "ERROR", "CANCELLED", "MAX_RECOVERY_ATTEMPTS_EXCEEDED"})


def statuses(run_ids: Collection[str]) -> dict[str, str]:
    """Each run's engine status; a run the engine does not know is absent."""
    if not run_ids:
        return {}
    found = DBOS.list_workflows(workflow_ids=list(run_ids), load_input=False, load_output=False)
    return {s.workflow_id: s.status for s in found}


def holder_message(node: str, lease: leases.Lease) -> str:
    return (f"node {node} is held by run {lease.run_id} ({lease.workflow}, since "
            f"{lease.taken_at:%Y-%m-%d %H:%M:%S}Z): one run per node")


@step(idempotent=True)
def take_leases(nodes: list[str], workflow: str) -> dict[str, str]:
    """Lease every node to this run, or none; return ``{}`` or, per held node, why not.

    A lease held by a run the engine says is over (or never knew) is taken over.
    """
    return lease_nodes(nodes, workflow)


def lease_nodes(nodes: list[str], workflow: str) -> dict[str, str]:
    """:func:`take_leases`'s work, for a step that takes the leases as its first act (provisioning's
    ``begin_run``: one journaled step, not two); idempotent, as a step re-run after a crash needs."""
    store = shared_store()
    run_id = current_run_id()
    out = leases.take(store, nodes, run_id, workflow)
    if out.held:  # the engine is asked about other holders only when there are some: one transaction, usually
        others = {le.run_id for le in out.held.values()}
        known = statuses(others)
        over = {r for r in others if known.get(r, "SUCCESS") not in LIVE}
        if over:
            out = leases.take(store, nodes, run_id, workflow, replaceable=over)
    return {n: holder_message(n, le) for n, le in out.held.items()}


@step(idempotent=True)  # a re-run finds its own reservation and counts the same
def reserve_floor(node: str, source: str, batch: list[str]) -> dict[str, Any]:
    """Check ``source``'s floor and reserve this node's leave on its lease, atomically (concurrent moves).

    The one floor check of every move out of a pool: a role swap's, a lend's and a reclaim's.
    ``{"ok": …, "detail": the numbers}``; the reservation goes with the lease (:func:`release_leases`).
    """
    count = leases.reserve_leave(shared_store(), node, current_run_id(), source, batch)
    return {"ok": count.ok, "detail": count.describe()}


def release_leases() -> list[str]:
    """Give back every lease this run holds; return the nodes released.

    Called by the workflow itself, not journaled as a step: it is the run's last act and
    idempotent (it deletes the run's own rows), so a replay after a crash releases again
    harmlessly, and a cancelled run, whose steps would refuse to run, still gives its nodes
    back. One journal write fewer per run (a node's provisioning pays for each).
    """
    return leases.release(shared_store(), current_run_id())


@dataclass
class Abandoned:
    """A run no one can finish, and what was done about it."""

    run_id: str
    why: str
    moved: dict[str, str] = field(default_factory=dict)  # node -> state it was put in
    released: list[str] = field(default_factory=list)
    left: dict[str, str] = field(default_factory=dict)  # node -> why it was left as it is

    def describe(self) -> str:
        parts = [f"run {self.run_id} cannot be recovered ({self.why}): cancelled"]
        parts += [f"{n} -> {s}" for n, s in sorted(self.moved.items())]
        parts += [f"{n} left: {w}" for n, w in sorted(self.left.items())]
        return "; ".join(parts)


@dataclass
class Sweep:
    abandoned: list[Abandoned] = field(default_factory=list)
    released: dict[str, list[str]] = field(default_factory=dict)  # terminal run -> nodes released


def abandon(store: Store, run_id: str, why: str, cancel: Callable[[str], None]) -> Abandoned:
    """Cancel ``run_id``, put its nodes where a failed attempt lands, release its leases."""
    cancel(run_id)
    out = Abandoned(run_id, why)
    nodes = set(leases.leased_to(store, run_id)) | {r.name for r in store.last_moved_by(run_id)}
    for n in sorted(nodes):
        state = store.get(n).state
        event = ABANDON.get(state)
        if event is None:
            if state.value.endswith("ing"):
                out.left[n] = f"{state}: no failure move from here; an operator decides"
            continue
        t = store.transition(n, event, Actor.WORKFLOW, f"run {run_id} cannot be recovered ({why})"[:500],
                             run_id=run_id)
        out.moved[n] = t.target.value
    out.released = leases.release(store, run_id)
    return out


def sweep(store: Store, pending: list[Any], dead: Callable[[str], bool]) -> Sweep:
    """Abandon the dead executors' runs this code cannot replay; release terminal runs' leases.

    ``pending``: the engine's PENDING and MAX_RECOVERY_ATTEMPTS_EXCEEDED runs (WorkflowStatus);
    ``dead``: whether an executor id is a process that is gone.
    """
    out = Sweep()
    for s in pending:
        if s.status == "MAX_RECOVERY_ATTEMPTS_EXCEEDED":
            done = abandon(store, s.workflow_id, "it failed every recovery attempt", lambda _r: None)
            if done.moved or done.released or done.left:  # else: swept before
                out.abandoned.append(done)
        elif s.app_version != engine.APP_VERSION and s.executor_id and dead(s.executor_id):
            out.abandoned.append(abandon(
                store, s.workflow_id,
                f"started by racklife version {s.app_version}, this is {engine.APP_VERSION}",
                lambda r: DBOS.cancel_workflow(r)))
        elif isinstance(s.input, str) and s.executor_id and dead(s.executor_id):
            # DBOS hands back the recorded arguments as text when it cannot decode them (a class this code
            # lacks): the run cannot be replayed here, and adopting it broke every recovery after it.
            out.abandoned.append(abandon(
                store, s.workflow_id, "its recorded arguments cannot be decoded by this racklife",
                lambda r: DBOS.cancel_workflow(r)))
    held = {le.run_id for le in leases.holders(store).values()}
    known = statuses(held)
    for run_id in sorted(held):
        if known.get(run_id, "SUCCESS") in TERMINAL:
            out.released[run_id] = leases.release(store, run_id)
    return out

"""One node out of service and back: leave → change → re-test → rejoin, with a rollback or a quarantine.

Every workflow that takes a serving node away to change it — a role swap, a
reimage that ``racklife apply`` plans, each node of a rolling upgrade — runs
this one body inside a run that holds the node's lease, so the leave policy,
the re-test and the failure handling exist once:

1. leave the node's scheduler with the join/leave bodies every workflow
   shares (``slurm_pool._leave``: owner-tagged drain, wait or requeue, every
   job reported, never through someone else's drain; ``kube_pool.leave_body``:
   owner-tagged cordon, Eviction API with PodDisruptionBudget backoff);
2. the changes, in order, each a :class:`Change` (the role swap's pool move
   and role switch, a reimage: ``lifecycle.workflows.changes``);
3. re-test: acceptance of the node at the level its settings name (the
   pool's ``retest_level``), so a node that broke is quarantined, not joined;
   a change that leaves the kernel log as it was (a GPU reset) says from when
   (``ChangeResult.kernel_log_since``, the node's clock) and the re-test
   judges only the kernel log lines from then on; a change that installs a
   GPU driver names the version the node must report
   (``ChangeResult.expect_driver``) and the re-test fails a node that
   reports another or none;
4. join the node's pool as it is now (``slurm_pool._join`` or
   ``kube_pool.join_body``).

Elastic capacity's lend and reclaim are this cycle too: the same leave and
join bodies, the role switch as the one change, no re-test, and the events
of :data:`~lifecycle.workflows.node_ops.LEND` or ``RECLAIM`` instead of a
role swap's (``LeaveSpec.moves``): a lend leaves Slurm (a drain, no job
touched) and joins the lend pool in Kubernetes, then lifts its drain so that
Slurm's power saving can call the node back; a reclaim leaves Kubernetes
(``LeaveSpec.at``: the pool it was lent to) and joins its own Slurm pool.
Neither rolls back (``Moves.roll_back``): a failed lend leaves the node
drained with racklife's drain, a failed reclaim leaves it lent.

On failure: a leave that did not finish lifts racklife's own drain or cordon
(the node serves as before); a change or a join that failed undoes the
changes made, newest first, and rejoins the node where it was — when every
change can be undone; otherwise (a reimage cannot be taken back) the node is
quarantined with the reason and held by racklife's drain or cordon. A node
is never left out of every pool silently. Phase times are returned (seconds
per phase: drain_wait, each change's name, retest, join, rollback).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Protocol

from lifecycle.drivers.errors import DriverError
from lifecycle.drivers.kube.base import NotOurs as KubeNotOurs
from lifecycle.drivers.slurm.driver import NotOurs, SlurmDriver
from lifecycle.drivers.slurm.runner import CommandRunner
from lifecycle.model.vocab import LeavePolicy
from lifecycle.store import shared_store
from lifecycle.workflows import accept, kube_pool, slurm_pool
from lifecycle.workflows.node_ops import SWAP, Moves, current_run_id, node_pool, node_state, transition
from lifecycle.workflows.retry import step


@dataclass(frozen=True)
class ChangeResult:
    ok: bool
    reason: str = ""
    detail: dict[str, Any] = field(default_factory=dict)
    kernel_log_since: str | None = None
    """The node's clock (ISO 8601) just before a change that leaves the node's kernel log as it was (a GPU
    reset): the re-test judges only the log's lines from then on. None: the re-test's own window."""
    expect_driver: str | None = None
    """The GPU driver version the node must report in its re-test (a driver upgrade): a node that reports
    another, or none, fails the re-test. None: whichever driver it runs."""


class Change(Protocol):
    """One change made to a node while it is out of service; built inside the run from its settings."""

    @property
    def name(self) -> str:
        """The phase's name in the outcome and the phase times (``switch``, ``reimage``)."""
        ...

    def precheck(self) -> str:
        """Why the change cannot be made ("" when it can), checked before the node leaves (reads only)."""
        ...

    def apply(self, node: str) -> ChangeResult:
        """Make the change (journaled steps); a DriverError is a failed change."""
        ...

    def undo(self, node: str) -> ChangeResult | None:
        """Take the change back so the node can rejoin as it was; None: it cannot be taken back."""
        ...


@dataclass(frozen=True)
class LeaveSpec:
    why: str
    """The human part of racklife's drain or cordon reason."""
    policy: LeavePolicy | None = None
    """Slurm leave policy (default: the pool's)."""
    deadline_s: float | None = None
    """How long the leave waits for jobs or PodDisruptionBudgets (default: the pool's drain deadline)."""
    moves: Moves = SWAP
    """The events the trip records (a role swap's drain and join, or a lend's, or a reclaim's)."""
    at: str | None = None
    """The pool the node serves now, when it is not its own (a lent node serves the pool it was lent to)."""


@dataclass
class CycleOutcome:
    node: str
    ok: bool = False
    state: str = ""
    reason: str = ""
    leave: dict[str, Any] = field(default_factory=dict)
    changes: dict[str, dict[str, Any]] = field(default_factory=dict)
    retest: dict[str, Any] = field(default_factory=dict)
    join: dict[str, Any] = field(default_factory=dict)
    rollback: dict[str, Any] = field(default_factory=dict)
    phases: dict[str, float] = field(default_factory=dict)
    """Seconds per phase: drain_wait, each change, retest, join (and rollback when there was one)."""


# ------------------------------------------------------------------ steps


@step(idempotent=True)
def now() -> float:
    """Wall time, journaled: a replayed run measures its phases with the times it first saw."""
    return time.time()


@step(idempotent=True)  # resume_if_ours reads first
def lift_own_drain(node: str) -> list[dict[str, str]]:
    """Lift this run's drain in Slurm (a leave that did not finish); someone else's raises NotOurs."""
    results = SlurmDriver(CommandRunner()).resume_if_ours([node], current_run_id())
    return [{"node": r.node, "action": r.action} for r in results]


# ------------------------------------------------------------------ scheduler sides


def scheduler_of(pool: str) -> str:
    return shared_store().pool(pool).scheduler


def _kube(kube: kube_pool.KubeSettings | None) -> kube_pool.KubeSettings:
    if kube is None:
        raise DriverError("kubernetes", "no kubeconfig: set RACKLIFE_KUBECONFIG or KUBECONFIG")
    return kube


def leave(node: str, spec: LeaveSpec, kube: kube_pool.KubeSettings | None) -> slurm_pool.PoolOutcome:
    """Leave the scheduler of the node's pool now (its policy, its deadline, every job or pod reported)."""
    pool_name = spec.at or node_pool(node)
    if scheduler_of(pool_name) == "slurm":
        return slurm_pool.PoolOutcome(**slurm_pool._leave(node, spec.policy, spec.deadline_s, spec.why, spec.moves))
    pool = shared_store().pool(pool_name)
    try:
        s = _kube(kube)
    except DriverError as exc:
        return slurm_pool.PoolOutcome(node, False, node_state(node), exc.message)
    return kube_pool.leave_body(node, pool.drain_deadline_s if spec.deadline_s is None else spec.deadline_s,
                                spec.why, s, spec.moves)


def join(node: str, kube: kube_pool.KubeSettings | None, moves: Moves = SWAP,
         pool: str | None = None) -> slurm_pool.PoolOutcome:
    """Join the scheduler of the node's pool now (or of ``pool``: a lend joins the pool it is lent to)."""
    pool_name = pool or node_pool(node)
    last = (lambda: lift_own_drain(node)) if moves.release_left else None
    if scheduler_of(pool_name) == "slurm":
        return slurm_pool.PoolOutcome(**slurm_pool._join(node, moves, pool_name, last))
    return kube_pool.join_body(node, _kube(kube), moves, pool_name, last)


def undo_leave(node: str, kube: kube_pool.KubeSettings | None, out: CycleOutcome, spec: LeaveSpec) -> None:
    """The leave did not finish: lift racklife's own drain or cordon (the node serves as before), unless the
    trip keeps it held (``Moves.lift_on_abort``); record the abort."""
    m = spec.moves
    if m.lift_on_abort:
        try:
            if scheduler_of(spec.at or node_pool(node)) == "slurm":
                out.rollback["resume"] = lift_own_drain(node)
            else:
                out.rollback["uncordon"] = kube_pool.kube_lift_own_cordon(node, _kube(kube))
        except (NotOurs, KubeNotOurs) as exc:
            out.rollback["foreign"] = exc.message  # someone else's drain or cordon: theirs to lift, left
        except DriverError as exc:
            out.rollback["error"] = exc.message
            out.reason += f"; racklife's own hold could not be lifted ({exc.message}): the node stays {m.leaving}"
            return
    out.state = node_state(node)
    if out.state == m.leaving:
        out.state = transition(node, m.abort, f"{spec.why} rolled back: {out.reason}"[:500])


def stay_out(node: str, out: CycleOutcome, spec: LeaveSpec) -> None:
    """A failed trip that does not roll back (a lend, a reclaim): the node stays held where it failed."""
    out.state = node_state(node)
    if out.state == spec.moves.leaving:  # a change failed; a failed join has recorded its own join_fail
        out.state = transition(node, spec.moves.join_fail, f"{spec.why} failed: {out.reason}"[:500])


# States from which a node that failed mid-cycle is quarantined (the state machine allows it there).
QUARANTINABLE = frozenset({"drained", "join_failed", "in_service", "provision_failed", "upgrade_failed",
                           "repairing"})


def quarantine(node: str, out: CycleOutcome, why: str, kube: kube_pool.KubeSettings | None) -> None:
    state = node_state(node)
    if state in QUARANTINABLE:
        state = transition(node, "quarantine", why[:500])
    out.state = state
    hold_quarantined(node, kube, why, out)


def hold_quarantined(node: str, kube: kube_pool.KubeSettings | None, why: str, out: CycleOutcome) -> None:
    """A quarantined node must take no work in its current pool's scheduler: racklife's drain or cordon."""
    try:
        if scheduler_of(node_pool(node)) == "kubernetes":
            out.rollback["held"] = kube_pool.kube_cordon(node, f"quarantined: {why}"[:200], _kube(kube))
        else:
            out.rollback["held"] = accept.quarantine_in_slurm(node, why[:200])
    except DriverError as exc:
        out.rollback["held"] = {"error": exc.message}


def roll_back(node: str, made: Sequence[Change], kube: kube_pool.KubeSettings | None, out: CycleOutcome,
              why: str) -> None:
    """After the node left: undo ``made`` newest first and rejoin it, or quarantine it."""
    problem = ""
    for c in reversed(made):
        try:
            undone = c.undo(node)
        except DriverError as exc:
            undone = ChangeResult(False, exc.message)
        if undone is None:
            problem = f"{c.name} cannot be undone"
            break
        out.rollback[c.name] = asdict(undone)
        if not undone.ok:
            problem = f"undoing {c.name} failed ({undone.reason})"
            break
    if not problem:
        try:
            back = join(node, kube)
            out.rollback["join"] = asdict(back)
            if back.ok:
                out.state = back.state
                out.reason += f"; rolled back: in service in pool {node_pool(node)} again"
                return
            problem = f"rejoining failed ({back.reason})"
        except DriverError as exc:
            problem = f"rejoining failed ({exc.message})"
    out.reason += f"; not rolled back: {problem}"
    quarantine(node, out, f"{why} failed and was not rolled back: {problem}; {out.reason}", kube)


# ------------------------------------------------------------------ the cycle


def cycle(node: str, spec: LeaveSpec, changes: Sequence[Change], retest: accept.AcceptSettings | None,
          kube: kube_pool.KubeSettings | None, out: CycleOutcome, to: str | None = None, *,
          leave_first: bool = True) -> CycleOutcome:
    """Leave, change, re-test and rejoin ``node`` (inside a run that holds it); fill and return ``out``.

    ``retest`` None: no re-test (a lend or a reclaim, which Slurm's ResumeTimeout bounds); ``to``: the pool to
    join when it is not the node's own (a lend). A change that says it cannot be made refuses the cycle before
    the node leaves: nothing changes. ``leave_first=False``: the node is already out of service (quarantined,
    held by racklife's drain or cordon), so there is nothing to leave; the changes, the re-test and the join
    run as for any node.
    """
    problems = [f"{c.name}: {why}" for c in changes if (why := c.precheck())]
    if problems:
        out.reason = "refused, nothing changed: " + "; ".join(problems)
        return out
    t = now()
    if leave_first:
        left = leave(node, spec, kube)
        out.leave = asdict(left)
        t0, t = t, now()
        out.phases["drain_wait"] = round(t - t0, 3)
        if not left.ok:
            out.reason = f"leaving pool {spec.at or node_pool(node)} failed: {left.reason}"
            undo_leave(node, kube, out, spec)
            return _finish(out, t)
    made: list[Change] = []
    since: str | None = None
    driver: str | None = None
    for c in changes:
        made.append(c)  # a change that failed half-way is undone too
        try:
            result = c.apply(node)
        except DriverError as exc:
            result = ChangeResult(False, exc.message)
        out.changes[c.name] = asdict(result)
        since = result.kernel_log_since or since
        driver = result.expect_driver or driver
        t_next = now()
        out.phases[c.name] = round(t_next - t, 3)
        t = t_next
        if not result.ok:
            out.reason = f"{c.name} failed: {result.reason}"
            _failed(node, made, kube, out, spec)
            return _finish(out, t)
    if retest is not None:
        if since is not None:  # the log keeps what the change repaired: judge what came after it
            retest = replace(retest, kernel_log_since=since)
        if driver is not None:  # the change is done only when the node itself reports the driver
            retest = replace(retest, expect_driver=driver)
        passed, t = _retest(node, retest, kube, out, t)
        if not passed:
            return _finish(out, t)
    try:
        joined = join(node, kube, spec.moves, to)
    except DriverError as exc:
        joined = slurm_pool.PoolOutcome(node, False, node_state(node), exc.message)
    out.join = asdict(joined)
    t_next = now()
    out.phases["join"] = round(t_next - t, 3)
    t = t_next
    out.state = joined.state
    if not joined.ok:
        out.reason = f"joining pool {to or node_pool(node)} failed: {joined.reason}"
        _failed(node, made, kube, out, spec)
        return _finish(out, t)
    out.ok = True
    out.reason = f"in service in pool {to or node_pool(node)}"
    return _finish(out, t)


def _failed(node: str, made: Sequence[Change], kube: kube_pool.KubeSettings | None, out: CycleOutcome,
            spec: LeaveSpec) -> None:
    if spec.moves.roll_back:
        roll_back(node, made, kube, out, spec.why)
    else:
        stay_out(node, out, spec)


def _retest(node: str, retest: accept.AcceptSettings, kube: kube_pool.KubeSettings | None, out: CycleOutcome,
            since: float) -> tuple[bool, float]:
    """Acceptance of the node at ``retest.level`` (passed, and when it ended); a failure quarantines it, held."""
    verdicts = accept._accept([node], retest)
    out.retest = verdicts[0] if verdicts else {}
    t_next = now()
    out.phases["retest"] = round(t_next - since, 3)
    if not out.retest.get("passed"):
        why = "; ".join(out.retest.get("reasons") or []) or "no verdict"
        out.reason = f"re-test at level {retest.level} failed: {why}"
        out.state = node_state(node)
        if out.state != "quarantined":
            quarantine(node, out, out.reason, kube)
        else:
            hold_quarantined(node, kube, out.reason, out)
        return False, t_next
    return True, t_next


def _finish(out: CycleOutcome, since: float) -> CycleOutcome:
    if out.rollback:
        out.phases["rollback"] = round(now() - since, 3)
    return out


def summary(out: CycleOutcome) -> str:
    """One line for the node's history: the verdict, the phase times, the reason."""
    times = ", ".join(f"{k.replace('_', ' ')} {v:.1f} s" for k, v in out.phases.items())
    verdict = "done" if out.ok else f"failed, node {out.state}"
    return f"{verdict}; {times}; {out.reason}"[:500]

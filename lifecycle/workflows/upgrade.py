"""Rolling upgrade: one durable run that changes a set of nodes, batch by batch, canary first.

Each node goes through the one per-node path (``changes.change_node``: leave
under the policy, the change, re-test at its pool's level, rejoin; quarantine
when it cannot come back), run as a child workflow of the upgrade, so a
controller killed mid-batch recovers the upgrade and its children and the
batch finishes where it stopped. Before each batch the run reads the pools
as they are (``pools_now``) and takes the next batch within every pool's
``max_unavailable`` and floor (``upgrade_batches.take_batch``): a node
quarantined earlier leaves less room, and the batch is smaller.

Control is by DBOS messages on topic ``control`` (``pause``, ``resume``,
``abort``), read at batch boundaries (and once more after the last batch, so
an abort taken during it ends the run aborted, not done); the run publishes
its report as the event ``status`` after every change of it. A message sent
mid-batch waits in the database until the run reads it: ``requested`` says
what it will do then (``racklife upgrade status`` shows it). After the
canary batch the run holds for a verdict (``resume`` or ``abort``) unless
``auto_continue``. It halts when failures pass the threshold. ``abort``
starts no further node: nodes in flight finish their cycle (new and in
service, or quarantined with the reason), nodes not started stay as they
were (old and in service); so every node is fully old or fully new. A
``window`` (``HH:MM-HH:MM``, UTC) keeps batches from starting outside it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from dbos import DBOS

from lifecycle.model.limits import Unavailable
from lifecycle.model.vocab import Level
from lifecycle.store import shared_store
from lifecycle.workflows import changes
from lifecycle.workflows.node_cycle import now
from lifecycle.workflows.retry import step
from lifecycle.workflows.upgrade_batches import Member, PoolNow, Threshold, pool_now, take_batch

TOPIC = "control"
STATUS = "status"
HOLD_POLL_S = 3600.0


class Command(StrEnum):
    PAUSE = "pause"
    RESUME = "resume"
    ABORT = "abort"


class Phase(StrEnum):
    RUNNING = "running"
    HELD = "held"  # after the canary, waiting for a verdict
    PAUSED = "paused"
    WAITING = "waiting"  # for the maintenance window
    HALTED = "halted"  # failures passed the threshold, or no room left
    ABORTED = "aborted"
    DONE = "done"


_WINDOW = re.compile(r"^([01]\d|2[0-3]):([0-5]\d)-([01]\d|2[0-3]):([0-5]\d)$")


@dataclass(frozen=True)
class Window:
    """Batches start only between ``start`` and ``end`` (minutes after midnight, UTC; may wrap midnight)."""

    start: int
    end: int

    @staticmethod
    def parse(text: str) -> Window:
        m = _WINDOW.match(text.strip())
        if m is None or m.group(1, 2) == m.group(3, 4):
            raise ValueError(f"--window must be HH:MM-HH:MM (UTC, start and end differ), not {text!r}")
        return Window(int(m[1]) * 60 + int(m[2]), int(m[3]) * 60 + int(m[4]))

    def wait_s(self, epoch: float) -> float:
        """Seconds from ``epoch`` until the window opens (0 inside it)."""
        t = datetime.fromtimestamp(epoch, UTC)
        minute = t.hour * 60 + t.minute + t.second / 60
        inside = self.start <= minute < self.end if self.start < self.end else minute >= self.start or \
            minute < self.end
        return 0.0 if inside else ((self.start - minute) % 1440) * 60

    def describe(self) -> str:
        return f"{self.start // 60:02d}:{self.start % 60:02d}-{self.end // 60:02d}:{self.end % 60:02d} UTC"


@dataclass(frozen=True)
class UpgradeSettings:
    """One rollout; an argument of the run, so a recovered run has exactly what it started with."""

    change: changes.ChangeSpec
    members: tuple[Member, ...]
    """The nodes to change, in order (nodes already changed or not in service left out by the front end)."""
    limit: Unavailable
    node: changes.ChangeSettings
    """Each node's change settings; its re-test's level and work directory are set per node."""
    retest_levels: dict[str, Level]
    """pool -> its ``retest_level``."""
    canary: int = 1
    auto_continue: bool = False
    threshold: Threshold = field(default_factory=Threshold)
    window: Window | None = None
    per_node: str = "change_node"
    """The workflow each node runs, a key of ``NODE_RUNS``."""


# The per-node workflows an upgrade can run (the benchmark adds its simulated one).
NODE_RUNS: dict[str, Any] = {"change_node": changes.change_node}


@dataclass
class NodeResult:
    node: str
    pool: str
    batch: int
    ok: bool
    skipped: bool
    state: str
    reason: str
    run_id: str
    touched: list[str] = field(default_factory=list)
    phases: dict[str, float] = field(default_factory=dict)


@dataclass
class UpgradeReport:
    run: str
    change: str
    phase: str = Phase.RUNNING.value
    message: str = ""
    batches: list[list[str]] = field(default_factory=list)
    nodes: list[NodeResult] = field(default_factory=list)
    pending: list[str] = field(default_factory=list)
    control_plane: list[dict[str, Any]] = field(default_factory=list)
    """What the change did once before the first batch, in order (a Slurm upgrade: slurmdbd, slurmctld)."""
    peak_out_of_service: dict[str, int] = field(default_factory=dict)
    """pool -> the most of its nodes that could be out of service at once: those out before a batch
    began plus the batch's own."""

    @property
    def touched(self) -> list[str]:
        return [t for n in self.nodes for t in n.touched]

    def to_json(self) -> dict[str, Any]:
        return asdict(self) | {"touched": self.touched,
                               "failed": [n.node for n in self.nodes if not n.ok and not n.skipped],
                               "upgraded": [n.node for n in self.nodes if n.ok]}


# ------------------------------------------------------------------ steps


@step(idempotent=True)  # reads only
def pools_now(pools: list[str]) -> dict[str, dict[str, Any]]:
    """Each pool as it is now (``upgrade_batches.pool_now``): its size, the nodes serving it, its floor."""
    store = shared_store()
    return {p: asdict(pool_now(store, p)) for p in pools}


def _pools(pools: list[str]) -> dict[str, PoolNow]:
    return {k: PoolNow(**v) for k, v in pools_now(pools).items()}


def touched_by(outcome: dict[str, Any]) -> list[str]:
    """Every job or pod a node's leave touched, as one line each."""
    report = (outcome.get("leave") or {}).get("report") or {}
    node = outcome.get("node", "")
    lines = [f"{node}: Slurm job {j.get('job_id')} ({j.get('name', '')}, {j.get('user', '')}): "
             f"{j.get('action', j.get('outcome', 'touched'))}" for j in report.get("jobs", [])]
    lines += [f"{node}: pod {p} evicted" for p in report.get("evicted", [])]
    return lines


# ------------------------------------------------------------------ control


class _Control:
    """The run's view of its control messages: the last verdict seen, read at batch boundaries."""

    def __init__(self) -> None:
        self.paused = False
        self.aborted = False

    def take(self, timeout_s: float = 0.0) -> str | None:
        msg = DBOS.recv(TOPIC, timeout_seconds=timeout_s)
        if msg == Command.ABORT.value:
            self.aborted = True
        elif msg == Command.PAUSE.value:
            self.paused = True
        elif msg == Command.RESUME.value:
            self.paused = False
        return str(msg) if msg is not None else None

    def drain(self) -> None:
        while self.take() is not None:
            pass

    def hold(self, report: UpgradeReport, phase: Phase, message: str) -> None:
        """Wait for ``resume`` (or ``abort``), publishing ``phase`` while waiting."""
        _publish(report, phase, message)
        while not self.aborted:
            if self.take(HOLD_POLL_S) == Command.RESUME.value:
                return


# What a control message does once the run reads it (before its next batch, or in a hold).
WHEN_READ: dict[Command, str] = {
    Command.ABORT: "no further node starts; the nodes in flight finish their cycle (new, or quarantined)",
    Command.PAUSE: "no new batch until `racklife upgrade resume`; the nodes in flight finish their cycle",
    Command.RESUME: "the run goes on (past the canary's hold, or out of a pause)",
}


def requested(pending: Sequence[object]) -> Command | None:
    """What messages sent but not read yet will do when the run reads them, as ``_Control`` reads them:
    an abort wins; else the last of pause and resume."""
    known = {c.value: c for c in Command}
    commands = [known[m] for m in pending if isinstance(m, str) and m in known]
    if Command.ABORT in commands:
        return Command.ABORT
    return commands[-1] if commands else None


def _publish(report: UpgradeReport, phase: Phase, message: str) -> None:
    report.phase, report.message = phase.value, message
    DBOS.set_event(STATUS, report.to_json())


# ------------------------------------------------------------------ the workflow


def node_settings(s: UpgradeSettings, m: Member) -> changes.ChangeSettings:
    base = s.node.accept
    work = f"{base.work_dir}/{m.node}"
    return replace(s.node, accept=replace(base, level=s.retest_levels.get(m.pool, base.level), work_dir=work,
                                          report_dir=f"{work}/reports", multi_node=False, max_in_flight=1))


@DBOS.workflow(name="upgrade")
def upgrade(s: UpgradeSettings) -> dict[str, Any]:
    """Change ``s.members`` batch by batch; return the report (also published as event ``status``)."""
    run = str(DBOS.workflow_id)
    report = UpgradeReport(run, s.change.describe(), pending=[m.node for m in s.members])
    control = _Control()
    pools = sorted({m.pool for m in s.members})
    pending = list(s.members)
    canary = s.canary > 0
    failed_canary = failed_after = 0
    after_total = max(0, len(s.members) - s.canary) if canary else len(s.members)
    _publish(report, Phase.RUNNING, "starting")
    before = changes.KINDS[s.change.kind].before
    if before is not None and pending:
        ok, why, report.control_plane = before(s.change)
        if not ok:
            _publish(report, Phase.HALTED, why)
            return report.to_json()
        _publish(report, Phase.RUNNING, f"control plane done: {', '.join(r['daemon'] for r in report.control_plane)}")
    while pending:
        control.drain()
        if control.paused and not control.aborted:
            control.hold(report, Phase.PAUSED, "paused: `racklife upgrade resume` continues")
        if control.aborted:
            _publish(report, Phase.ABORTED, f"aborted: {len(pending)} node(s) not started, left as they were")
            return report.to_json()
        if s.window is not None:
            wait = s.window.wait_s(now())
            if wait > 0:
                _publish(report, Phase.WAITING, f"outside the window {s.window.describe()}: {wait:.0f} s to go")
                control.take(min(wait, HOLD_POLL_S))
                continue
        state = _pools(pools)
        first = not report.batches
        batch = take_batch(pending, state, s.limit, s.canary if first and canary else None)
        if not batch:
            _publish(report, Phase.HALTED, "; ".join(state[p].why_no_room(s.limit)
                                                      for p in sorted({m.pool for m in pending})))
            return report.to_json()
        index = len(report.batches)
        report.batches.append([m.node for m in batch])
        _note_peak(report, state, batch)
        _publish(report, Phase.RUNNING, f"batch {index + 1}{' (canary)' if first and canary else ''}: "
                                        f"{', '.join(m.node for m in batch)}")
        func = NODE_RUNS[s.per_node]
        handles = [(m, DBOS.start_workflow(func, m.node, node_settings(s, m))) for m in batch]
        for m, h in handles:
            out: dict[str, Any] = h.get_result()
            skipped = not out.get("ok") and not out.get("phases")
            report.nodes.append(NodeResult(m.node, m.pool, index, bool(out.get("ok")), skipped,
                                           str(out.get("state", "")), str(out.get("reason", "")),
                                           h.get_workflow_id(), touched_by(out), dict(out.get("phases") or {})))
            if not out.get("ok") and not skipped:
                if first and canary:
                    failed_canary += 1
                else:
                    failed_after += 1
        taken = {m.node for m in batch}
        pending = [m for m in pending if m.node not in taken]
        report.pending = [m.node for m in pending]
        if first and canary and failed_canary > s.threshold.canary:
            _publish(report, Phase.HALTED, f"the canary failed ({failed_canary} node(s)): halted")
            return report.to_json()
        if failed_after > s.threshold.allowed_after(after_total):
            _publish(report, Phase.HALTED, f"{failed_after} node(s) failed after the canary, more than "
                                           f"{s.threshold.after_percent:g}% of {after_total}: halted")
            return report.to_json()
        if first and canary and pending and not s.auto_continue:
            # What was sent during the canary batch is read first: a resume sent before its nodes finished is
            # not a verdict on them (it was read as one the moment the hold began, skipping the hold).
            control.drain()
            control.hold(report, Phase.HELD, "the canary is done: `racklife upgrade resume` continues, "
                                             "`racklife upgrade abort` stops")
    control.drain()  # an abort taken during the last batch: its nodes finished, and the run ends aborted
    if control.aborted:
        _publish(report, Phase.ABORTED, f"aborted during the last batch: its nodes finished their cycle; "
                                        f"{sum(n.ok for n in report.nodes)} of {len(s.members)} node(s) changed")
        return report.to_json()
    _publish(report, Phase.DONE, f"{sum(n.ok for n in report.nodes)} of {len(s.members)} node(s) changed")
    return report.to_json()


def _note_peak(report: UpgradeReport, state: dict[str, PoolNow], batch: list[Member]) -> None:
    for name, p in state.items():
        peak = p.size - p.in_service + sum(m.pool == name for m in batch)
        report.peak_out_of_service[name] = max(report.peak_out_of_service.get(name, 0), peak)

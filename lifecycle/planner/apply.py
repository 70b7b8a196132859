"""Apply: carry the plan out as durable workflow runs, in waves, re-planning from fresh observations.

Each wave re-observes the chosen nodes and re-plans them (``fleet.plan_fleet``),
takes the earliest action in ``ORDER`` that some node has as its next step,
and runs it for those nodes: one run per node (``join``, ``power-on``,
``leave``, ``reimage``: leave, reprovision, re-test and rejoin in one run),
or one run for the group where the action needs them together
(``accept``: multi-node checks pair nodes of one run). Fan-out is bounded
(``max_in_flight``); a wave that takes nodes out of service (``leave``, ``reimage``, ``update-firmware``,
``update-driver``, ``set-bios``, …)
respects each pool's ``max_unavailable``. A node whose step failed is not
tried again in this apply; a blocker is never acted through (blocked nodes
have no steps); a step with no workflow yet stops that node and is reported.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from lifecycle.model.inventory import Inventory
from lifecycle.model.limits import Unavailable as Unavailable  # re-exported: front ends import it from here
from lifecycle.model.states import Actor, State
from lifecycle.planner import observe
from lifecycle.planner.fleet import plan_fleet
from lifecycle.planner.plan import Action, NodePlan, Plan, Step
from lifecycle.store import Store
from lifecycle.store import observations as stored

# The order waves take actions in: a node's later steps wait for its earlier ones.
ORDER: tuple[Action, ...] = (Action.ENROLL, Action.PROVISION, Action.POWER_ON, Action.MOVE_POOL, Action.REIMAGE,
                             Action.UPDATE_FIRMWARE, Action.UPDATE_DRIVER, Action.SET_BIOS, Action.LEAVE, Action.ACCEPT,
                             Action.JOIN, Action.JOIN_KUBE, Action.DECOMMISSION)
TAKES_OUT_OF_SERVICE = frozenset({Action.LEAVE, Action.MOVE_POOL, Action.REIMAGE, Action.UPDATE_FIRMWARE,
                                  Action.UPDATE_DRIVER, Action.SET_BIOS, Action.DECOMMISSION})
MAX_WAVES = 12
# A wave that finds nothing to do while a chosen node is blocked only because a source could not be read
# (a BMC or Slurm that timed out under load) observes again after each of these pauses before the apply
# stops: one failed read is not the fleet's state. A source that stays unreadable still blocks.
UNREADABLE_PAUSES_S: tuple[float, ...] = (1.0, 3.0, 6.0)
UNREADABLE_PATIENCE_S = 60.0
"""No pause starts once a wave has spent this long deciding: a source that is dead, not busy, already took
its retries (a dead slurmctld: 50 s for the first read), and the reads after it are single tries
(``observe.UNANSWERED_HOLD_S``); a dead slurmctld held an apply 261 s without these bounds (69 s with)."""
SLURMD_SETTLE_S = 60.0
"""How long a wave with nothing else to do looks again at a node that Slurm has down while it is powered
(its slurmd may still be registering after a power cycle) before the down blocks it (fail closed)."""
SLURMD_SETTLE_POLL_S = 2.0


def _registering(n: NodePlan) -> bool:
    """Blocked only by a down in Slurm that its slurmd's registration may yet end (``down-powered-on``)."""
    return (any(x.kind == "down-powered-on" for x in n.drift)
            and all(b.kind in ("foreign-drain", "unreadable") for b in n.blockers))


@dataclass(frozen=True)
class ApplySettings:
    operator: str
    max_in_flight: int = 8
    max_unavailable: Unavailable = field(default_factory=lambda: Unavailable(count=1))


@dataclass(frozen=True)
class Done:
    """One step carried out (or attempted) for one node, by which run."""

    node: str
    action: Action
    ok: bool
    run_id: str
    detail: str


class Runner(Protocol):
    """Runs one action for a group of nodes as durable workflows; one Done per node."""

    def run(self, action: Action, nodes: Sequence[str], reasons: Mapping[str, str],
            targets: Mapping[str, str] | None = None, planned: Mapping[str, Step] | None = None) -> list[Done]:
        """``targets``: node -> what its step goes to (a reimage's ``NAME[:VERSION]``), from the plan;
        ``planned``: node -> the whole planned step (an update-firmware step's components)."""
        ...


@dataclass
class ApplyReport:
    done: list[Done] = field(default_factory=list)
    final: Plan | None = None
    skipped: dict[str, str] = field(default_factory=dict)  # node -> why apply left it
    blocked: dict[str, str] = field(default_factory=dict)  # node -> what blocked it when the waves stopped

    @property
    def converged(self) -> bool:
        """Nothing left to change and nothing blocked: a blocked node is not where the inventory wants it."""
        return self.final is not None and not self.final.changes and not self.final.blocked

    def to_json(self) -> dict[str, Any]:
        return {"converged": self.converged,
                "done": [{"node": d.node, "action": d.action.value, "ok": d.ok, "run_id": d.run_id,
                          "detail": d.detail} for d in self.done],
                "skipped": self.skipped,
                "remaining": self.final.to_json() if self.final else None}


def _unavailable(store: Store, pool: str) -> tuple[int, int]:
    """(nodes of the pool out of service now, nodes of the pool); a decommissioned node is neither.

    Out: what the store does not have in service, and a node it has in service that its own pool's
    scheduler, as last observed since it entered that state, does not (``observations.scheduler_out``;
    the rolling upgrade counts the same way)."""
    nodes = [r for r in store.nodes(pool=pool) if r.state is not State.DECOMMISSIONED]
    serving = [r for r in nodes if r.state is State.IN_SERVICE]
    return len(nodes) - len(serving) + len(stored.scheduler_out(store, serving)), len(nodes)


def _within_limits(store: Store, action: Action, nodes: list[str], cfg: ApplySettings,
                   skipped: dict[str, str]) -> list[str]:
    if action not in TAKES_OUT_OF_SERVICE:
        return nodes
    chosen: list[str] = []
    by_pool: dict[str, list[str]] = {}
    for n in nodes:
        by_pool.setdefault(store.get(n).pool, []).append(n)
    for pool, members in sorted(by_pool.items()):
        out, size = _unavailable(store, pool)
        room = max(0, cfg.max_unavailable.of(size) - out)
        for n in members:
            if store.get(n).state is not State.IN_SERVICE:
                chosen.append(n)  # out of service already (counted in `out`): taking it makes no one else leave
            elif room > 0:
                chosen.append(n)
                room -= 1
            else:
                skipped[n] = f"pool {pool}: {out} of {size} out of service already (max unavailable " \
                             f"{cfg.max_unavailable.of(size)}); a later apply takes it"
    return chosen


@dataclass(frozen=True)
class Wave:
    """What one wave does, decided from fresh observations: ``action`` for ``group``, or nothing (None)."""

    action: Action | None
    group: tuple[str, ...] = ()
    reasons: dict[str, str] = field(default_factory=dict)
    targets: dict[str, str] = field(default_factory=dict)
    planned: dict[str, Step] = field(default_factory=dict)
    done: tuple[Done, ...] = ()  # carried out while deciding (an enrolment is an import, no run)
    skipped: dict[str, str] = field(default_factory=dict)  # node -> why this wave leaves it (max unavailable)
    blocked: dict[str, str] = field(default_factory=dict)  # a wave of nothing: node -> its blockers


def decide(store: Store, inv: Inventory | None, names: Sequence[str] | None, sources: observe.Sources,
           cfg: ApplySettings, failed: frozenset[str], skipped: frozenset[str],
           only: frozenset[Action] | None = None) -> Wave:
    """Re-observe and re-plan the chosen nodes; the next wave (an enrolment is done here, at once).

    ``failed``: nodes whose step failed earlier in this apply; ``skipped``: nodes it left for later.
    """
    pauses = iter(UNREADABLE_PAUSES_S)
    started = time.monotonic()
    settle_until = started + SLURMD_SETTLE_S
    while True:
        p = plan_fleet(store, inv, names, sources)
        ready = {n.node: n.steps[0].action for n in p.nodes if n.node not in failed and n.node not in skipped
                 and n.steps and n.steps[0].implemented and n.steps[0].action in ORDER
                 and (only is None or n.steps[0].action in only)}
        if ready:
            break
        open_ = [n for n in p.nodes if n.blockers and n.node not in failed and n.node not in skipped]
        blocked = {n.node: "; ".join(f"{b.kind}: {b.message}" for b in n.blockers) for n in open_}
        unreadable = [n for n in open_ if all(b.kind == "unreadable" for b in n.blockers)]
        pause = next(pauses, None) if unreadable and time.monotonic() - started < UNREADABLE_PATIENCE_S else None
        if pause is None and any(_registering(n) for n in open_) and time.monotonic() < settle_until:
            pause = SLURMD_SETTLE_POLL_S
        if pause is None:
            return Wave(None, blocked=blocked)
        time.sleep(pause)
    action = min(ready.values(), key=ORDER.index)
    group = sorted(n for n, a in ready.items() if a is action)
    if action is Action.ENROLL:
        if inv is None:
            return Wave(None)
        store.import_inventory(inv, Actor.OPERATOR, f"racklife apply, by {cfg.operator}")
        return Wave(action, tuple(group), done=tuple(Done(n, action, True, "", "imported from the inventory")
                                                     for n in group))
    left: dict[str, str] = {}
    group = _within_limits(store, action, group, cfg, left)
    if not group:
        return Wave(None, skipped=left)
    steps = {n.node: n.steps[0] for n in p.nodes if n.node in group}
    return Wave(action, tuple(group), {n: s.reason for n, s in steps.items()},
                {n: s.target for n, s in steps.items() if s.target}, steps, skipped=left)


class Planning(Protocol):
    """How the loop decides each wave and plans at the end: here, or as journaled steps of a durable run."""

    def wave(self, failed: frozenset[str], skipped: frozenset[str]) -> Wave: ...

    def final(self) -> Plan: ...


@dataclass(frozen=True)
class PlanHere:
    store: Store
    inv: Inventory | None
    names: Sequence[str] | None
    sources: observe.Sources
    cfg: ApplySettings
    only: frozenset[Action] | None = None

    def wave(self, failed: frozenset[str], skipped: frozenset[str]) -> Wave:
        return decide(self.store, self.inv, self.names, self.sources, self.cfg, failed, skipped, self.only)

    def final(self) -> Plan:
        return plan_fleet(self.store, self.inv, self.names, self.sources)


def waves(planning: Planning, runner: Runner, say: Callable[[str], None] = lambda _m: None) -> ApplyReport:
    """The wave loop: decide a wave, run it, until nothing is left that may be done now; plan once more."""
    report = ApplyReport()
    failed: set[str] = set()
    for _wave in range(MAX_WAVES):
        w = planning.wave(frozenset(failed), frozenset(report.skipped))
        report.skipped.update(w.skipped)
        report.done += w.done
        if w.action is None:
            report.blocked = dict(w.blocked)
            break
        if w.done:
            continue
        say(f"{w.action.value}: {', '.join(w.group)}")
        results = runner.run(w.action, list(w.group), w.reasons, w.targets, w.planned)
        report.done += results
        failed |= {d.node for d in results if not d.ok}
    report.final = planning.final()
    return report


def apply(store: Store, inv: Inventory | None, names: Sequence[str] | None, sources: observe.Sources,
          runner: Runner, cfg: ApplySettings, say: Callable[[str], None] = lambda _m: None,
          only: frozenset[Action] | None = None) -> ApplyReport:
    """Converge the chosen nodes as far as the implemented workflows and the blockers allow.

    ``only``: carry out just these actions; a node whose next step is another stops there (the
    stacks' resources each own a part of a node's plan: a node resource stops at accepted, its pool
    membership joins it).
    """
    return waves(PlanHere(store, inv, names, sources, cfg, only), runner, say)

"""Apply: carry the plan out as durable workflow runs, in waves, re-planning from fresh observations.

Each wave re-observes the chosen nodes and re-plans them (``fleet.plan_fleet``),
takes the earliest action in ``ORDER`` that some node has as its next step,
and runs it for those nodes: one run per node (``join``, ``power-on``,
``leave``, ``reimage``: leave, reprovision, re-test and rejoin in one run),
or one run for the group where the action needs them together
(``accept``: multi-node checks pair nodes of one run). Fan-out is bounded
(``max_in_flight``); a wave that takes nodes out of service (``leave``)
respects each pool's ``max_unavailable``. A node whose step failed is not
tried again in this apply; a blocker is never acted through (blocked nodes
have no steps); a step with no workflow yet stops that node and is reported.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from lifecycle.model.inventory import Inventory
from lifecycle.model.limits import Unavailable as Unavailable  # re-exported: front ends import it from here
from lifecycle.model.states import Actor, State
from lifecycle.planner import observe
from lifecycle.planner.fleet import plan_fleet
from lifecycle.planner.plan import Action, Plan
from lifecycle.store import Store

# The order waves take actions in: a node's later steps wait for its earlier ones.
ORDER: tuple[Action, ...] = (Action.ENROLL, Action.PROVISION, Action.POWER_ON, Action.MOVE_POOL, Action.REIMAGE,
                             Action.LEAVE, Action.ACCEPT, Action.JOIN, Action.JOIN_KUBE, Action.DECOMMISSION)
TAKES_OUT_OF_SERVICE = frozenset({Action.LEAVE, Action.MOVE_POOL, Action.REIMAGE, Action.DECOMMISSION})
MAX_WAVES = 12


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
            targets: Mapping[str, str] | None = None) -> list[Done]:
        """``targets``: node -> what its step goes to (a reimage's ``NAME[:VERSION]``), from the plan."""
        ...


@dataclass
class ApplyReport:
    done: list[Done] = field(default_factory=list)
    final: Plan | None = None
    skipped: dict[str, str] = field(default_factory=dict)  # node -> why apply left it

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
    """(nodes of the pool out of service now, nodes of the pool); a decommissioned node is neither."""
    nodes = [r for r in store.nodes(pool=pool) if r.state is not State.DECOMMISSIONED]
    return sum(r.state is not State.IN_SERVICE for r in nodes), len(nodes)


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


def apply(store: Store, inv: Inventory | None, names: Sequence[str] | None, sources: observe.Sources,
          runner: Runner, cfg: ApplySettings, say: Callable[[str], None] = lambda _m: None,
          only: frozenset[Action] | None = None) -> ApplyReport:
    """Converge the chosen nodes as far as the implemented workflows and the blockers allow.

    ``only``: carry out just these actions; a node whose next step is another stops there (the
    stacks' resources each own a part of a node's plan: a node resource stops at accepted, its pool
    membership joins it).
    """
    report = ApplyReport()
    failed: set[str] = set()
    for _wave in range(MAX_WAVES):
        p = plan_fleet(store, inv, names, sources)
        ready = {n.node: n.steps[0].action for n in p.nodes if n.node not in failed and n.node not in report.skipped
                 and n.steps and n.steps[0].implemented and n.steps[0].action in ORDER
                 and (only is None or n.steps[0].action in only)}
        if not ready:
            break
        action = min(ready.values(), key=ORDER.index)
        group = sorted(n for n, a in ready.items() if a is action)
        reasons = {n.node: n.steps[0].reason for n in p.nodes if n.node in group}
        targets = {n.node: n.steps[0].target for n in p.nodes if n.node in group and n.steps[0].target}
        if action is Action.ENROLL:
            if inv is None:
                break
            store.import_inventory(inv, Actor.OPERATOR, f"racklife apply, by {cfg.operator}")
            report.done += [Done(n, action, True, "", "imported from the inventory") for n in group]
            continue
        group = _within_limits(store, action, group, cfg, report.skipped)
        if not group:
            break
        say(f"{action.value}: {', '.join(group)}")
        results = runner.run(action, group, reasons, targets)
        report.done += results
        failed |= {d.node for d in results if not d.ok}
    report.final = plan_fleet(store, inv, names, sources)
    return report

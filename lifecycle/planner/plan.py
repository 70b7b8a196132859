"""The plan: per node, the ordered actions that converge it on the inventory, and what blocks them.

One function, :func:`plan_node`, turns (racklife's state, what the sources
said, what the inventory wants, who holds the node) into steps; ``plan`` and
(later) ``apply`` both call it, so what is shown is what would be done. The
mapping is tables: ``BY_STATE`` for where the lifecycle says a node goes
next, ``BY_DRIFT`` for what undoes each kind of drift. A blocker (a foreign
drain or cordon, a quarantined node, jobs under a ``wait`` policy, a node
held by another run, a move out of a pool beyond what its floor spares)
stops that node's steps: they are not planned through
it. An action with no workflow yet is planned and marked as such, never
dropped.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any

from lifecycle.drivers.bmc.bios_text import as_text
from lifecycle.model.states import State
from lifecycle.planner.observed import (
    Desired,
    Drift,
    Observation,
    Source,
    bios_behind,
    drift,
    driver_seen,
    firmware_behind,
    seen_version,
)


class Action(StrEnum):
    ENROLL = "enroll"
    PROVISION = "provision"
    POWER_ON = "power-on"
    LEAVE = "leave"  # drain out of the scheduler before work that takes the node away
    REIMAGE = "reimage"
    ACCEPT = "accept"
    JOIN = "join"  # a Slurm pool
    JOIN_KUBE = "join-kubernetes"
    SET_LABELS = "set-pool-labels"
    MOVE_POOL = "move-pool"
    UPDATE_FIRMWARE = "update-firmware"
    UPDATE_DRIVER = "update-driver"
    SET_BIOS = "set-bios"
    DECOMMISSION = "decommission"


# The actions racklife has no workflow for yet, and the name the plan shows them with.
NOT_YET: dict[Action, str] = {
    Action.SET_LABELS: "set a Kubernetes pool's labels",
}


@dataclass(frozen=True)
class FirmwareUpdate:
    """One component of a firmware step: from the version the BMC reports to the baseline's, with its image."""

    component: str
    current: str
    version: str
    file: str

    def describe(self) -> str:
        return f"{self.component} {self.current} -> {self.version} from {self.file}"


@dataclass(frozen=True)
class Step:
    action: Action
    reason: str
    detail: str = ""  # e.g. the scheduler or pool the step is about
    target: str = ""  # what the step goes to, for the runner: a reimage's NAME[:VERSION]
    firmware: tuple[FirmwareUpdate, ...] = ()  # an update-firmware step's components
    bios: tuple[tuple[str, str], ...] = ()  # a set-bios step's attributes, as KEY=VALUE text

    @property
    def implemented(self) -> bool:
        return self.action not in NOT_YET

    def describe(self) -> str:
        what = self.action.value + (f" ({self.detail})" if self.detail else "")
        return what if self.implemented else f"{what}: not yet implemented: {NOT_YET[self.action]}"


@dataclass(frozen=True)
class Blocker:
    kind: str  # foreign-drain | foreign-cordon | quarantined | jobs-under-wait | jobs-running | held | unreadable
    #            | pool-floor | no-firmware-interface | firmware-unknown | no-bios-interface | bios-unknown
    #            | driver-unknown
    message: str


@dataclass(frozen=True)
class Floor:
    """A pool's floor as the store counts it now (``leases.floor_count``): what a move-pool may take."""

    pool: str
    serving: int  # in service in the pool
    leaving: int  # of those: reserved by role swaps under way
    min_nodes: int

    @property
    def spare(self) -> int:
        return max(0, self.serving - self.leaving - self.min_nodes)


@dataclass
class NodePlan:
    node: str
    state: str
    steps: list[Step] = field(default_factory=list)
    blockers: list[Blocker] = field(default_factory=list)
    drift: list[Drift] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"node": self.node, "state": self.state,
                "steps": [{"action": s.action.value, "reason": s.reason, "detail": s.detail, "target": s.target,
                           "firmware": [asdict(f) for f in s.firmware], "bios": dict(s.bios),
                           "implemented": s.implemented,
                           "describe": s.describe()} for s in self.steps],
                "blockers": [asdict(b) for b in self.blockers],
                "drift": [d.to_json() for d in self.drift]}


@dataclass
class Plan:
    nodes: list[NodePlan]

    @property
    def changes(self) -> bool:
        return any(n.steps for n in self.nodes)

    @property
    def blocked(self) -> bool:
        return any(n.blockers for n in self.nodes)

    def to_json(self) -> dict[str, Any]:
        return {"changes": self.changes, "nodes": [n.to_json() for n in self.nodes]}


def _join(d: Desired) -> Step | None:
    if d.pool.scheduler == "kubernetes":
        return Step(Action.JOIN_KUBE, "accepted; its pool is served by Kubernetes", "Kubernetes")
    if d.pool.scheduler == "slurm":
        return Step(Action.JOIN, "accepted; its pool is served by Slurm", f"Slurm partition {d.pool.partition}")
    return None


# Where the lifecycle takes a node next, from racklife's state (before any drift is considered).
BY_STATE: dict[State, tuple[Action, ...]] = {
    State.ENROLLED: (Action.PROVISION, Action.ACCEPT, Action.JOIN),
    State.AVAILABLE: (Action.PROVISION, Action.ACCEPT, Action.JOIN),
    State.INSPECT_FAILED: (Action.PROVISION, Action.ACCEPT, Action.JOIN),
    State.PROVISION_FAILED: (Action.PROVISION, Action.ACCEPT, Action.JOIN),
    State.PROVISIONED: (Action.ACCEPT, Action.JOIN),
    State.ACCEPTED: (Action.JOIN,),
    State.DRAINED: (Action.ACCEPT, Action.JOIN),
    State.JOIN_FAILED: (Action.JOIN,),
}
_STATE_REASON: dict[State, str] = {
    State.ENROLLED: "enrolled, never provisioned",
    State.AVAILABLE: "inspected, not provisioned",
    State.INSPECT_FAILED: "inspection failed: provisioning inspects again",
    State.PROVISION_FAILED: "provisioning failed: try again",
    State.PROVISIONED: "provisioned, not accepted",
    State.DRAINED: "drained: accept again before it serves",
}
# States in which work of a run is under way: nothing is planned, the run finishes it.
IN_FLIGHT = frozenset({State.INSPECTING, State.PROVISIONING, State.BURNING_IN, State.JOINING, State.DRAINING,
                       State.LENDING, State.RECLAIMING, State.REPROVISIONING, State.UPGRADING, State.REPAIRING,
                       State.DECOMMISSIONING})
# Drift kinds a plan works around by these steps (for a node racklife believes in service).
BY_DRIFT: dict[str, tuple[Action, ...]] = {
    "power": (Action.POWER_ON,),
    "down-powered-off": (Action.POWER_ON,),
    # One run does all three: leave under the pool's policy, reprovision, re-test, rejoin (node_cycle).
    "image": (Action.REIMAGE, Action.ACCEPT, Action.JOIN),
    "acceptance": (Action.LEAVE, Action.ACCEPT, Action.JOIN),
    "partition": (Action.JOIN,),
    "own-drain": (Action.JOIN,),
    "labels": (Action.SET_LABELS,),
    "taints": (Action.SET_LABELS,),
    "node": (Action.JOIN,),
    # One run: leave, update through the BMC's UpdateService, read the version back, re-test, rejoin.
    "firmware": (Action.UPDATE_FIRMWARE,),
    # One run each: leave, the site's install hook and a power cycle (driver) or Bios/Settings and the reboot
    # that applies them (BIOS), read back (the re-test's GPUs; the live Bios), re-test, rejoin.
    "driver": (Action.UPDATE_DRIVER,),
    "bios": (Action.SET_BIOS,),
}
BLOCKING_DRIFT: dict[str, str] = {"foreign-drain": "foreign-drain", "foreign-cordon": "foreign-cordon",
                                  "unreadable": "unreadable", "firmware-unsupported": "no-firmware-interface",
                                  "firmware-unknown": "firmware-unknown", "bios-unsupported": "no-bios-interface",
                                  "bios-unknown": "bios-unknown", "driver-unknown": "driver-unknown",
                                  "slurm-working": "jobs-running"}


# Why a step follows the one before it, when the first step's reason is not its own.
_FOLLOWS: dict[Action, str] = {
    Action.ACCEPT: "a node serves only with a passing acceptance record newer than its provisioning",
    Action.REIMAGE: "the image must change, and a node is reimaged only out of service",
}
# Actions that take a serving node out of its scheduler first (a pool's leave policy applies).
LEAVES = frozenset({Action.LEAVE, Action.REIMAGE, Action.UPDATE_FIRMWARE, Action.UPDATE_DRIVER, Action.SET_BIOS})


def _firmware_step(o: Observation, d: Desired, why: str) -> Step:
    parts = tuple(FirmwareUpdate(f.component, seen_version(o, f.component) or "", f.version, f.file)
                  for f in firmware_behind(o, d))
    return Step(Action.UPDATE_FIRMWARE, why, "; ".join(p.describe() for p in parts) + (
        f": leave ({d.pool.leave_policy}), update, read back, re-test at {d.pool.retest_level}, rejoin"),
        firmware=parts)


def _driver_step(o: Observation, d: Desired, why: str) -> Step:
    seen, _ = driver_seen(o)
    return Step(Action.UPDATE_DRIVER, why, f"{seen} -> {d.driver}: leave ({d.pool.leave_policy}), the site's install "
                                           f"hook, power cycle, re-test at {d.pool.retest_level} reading "
                                           f"{d.driver} from its GPUs, rejoin", str(d.driver))


def _bios_step(o: Observation, d: Desired, why: str) -> Step:
    behind = bios_behind(o, d)
    items = list(behind.items()) if isinstance(behind, dict) else []
    pairs = tuple((k, as_text(want)) for k, (_now, want) in items)
    changes = ", ".join(f"{k} {as_text(now)} -> {as_text(want)}" for k, (now, want) in items)
    return Step(Action.SET_BIOS, why, f"{changes}: leave ({d.pool.leave_policy}), stage, reboot, read back, "
                                      f"re-test at {d.pool.retest_level}, rejoin",
                ",".join(f"{k}={v}" for k, v in pairs), bios=pairs)


def _steps_for(actions: Sequence[Action], reason: str, d: Desired, o: Observation) -> list[Step]:
    """The steps for ``actions``: the first carries ``reason``, the rest why they follow it."""
    out: list[Step] = []
    for a in actions:
        why = reason if not out else _FOLLOWS.get(a, reason)
        if a is Action.REIMAGE:
            target = f"{d.image}:{d.image_version}" if d.image_version else str(d.image)
            out.append(Step(a, why, f"to {target}: leave ({d.pool.leave_policy}), reprovision, re-test at "
                                    f"{d.pool.retest_level}, rejoin", target))
        elif a is Action.UPDATE_FIRMWARE:
            out.append(_firmware_step(o, d, why))
        elif a is Action.UPDATE_DRIVER:
            out.append(_driver_step(o, d, why))
        elif a is Action.SET_BIOS:
            out.append(_bios_step(o, d, why))
        elif a is Action.JOIN:
            step = _join(d)
            if step is not None:
                out.append(Step(step.action, (why or step.reason) if not out else step.reason, step.detail))
        else:
            out.append(Step(a, why))
    return out


def _dedupe(steps: list[Step]) -> list[Step]:
    """One step per action, in the order of first appearance (a reimage already re-accepts)."""
    seen: dict[Action, Step] = {}
    for s in steps:
        seen.setdefault(s.action, s)
    return list(seen.values())


def plan_node(o: Observation, d: Desired, held_by: str | None = None) -> NodePlan:
    """The steps that converge one observed node, or the blockers that stop them."""
    found = drift(o, d)
    out = NodePlan(o.node, o.state.value, drift=found)
    if held_by is not None:
        out.blockers.append(Blocker("held", f"held by run {held_by}: it finishes first"))
    for x in found:
        kind = BLOCKING_DRIFT.get(x.kind)
        if kind is not None:
            out.blockers.append(Blocker(kind, f"{x.source.value}: {x.message}"))
    if o.state is State.QUARANTINED:
        out.blockers.append(Blocker("quarantined", "quarantined after acceptance: awaiting an operator"))
    if o.state in IN_FLIGHT and held_by is None:
        out.blockers.append(Blocker("held", f"{o.state} with no run holding it: see `racklife workflows list`"))
    steps: list[Step] = []
    if o.pool != d.node.pool:
        steps.append(Step(Action.MOVE_POOL, f"in pool {o.pool}; the inventory says {d.node.pool}", d.node.pool))
    if o.state in BY_STATE:
        steps += _steps_for(BY_STATE[o.state], _STATE_REASON.get(o.state, ""), d, o)
    elif o.state is State.IN_SERVICE:
        for x in found:
            steps += _steps_for(BY_DRIFT.get(x.kind, ()), f"{x.source.value}: {x.message}", d, o)
    steps = _dedupe(steps)
    leave_first = any(s.action in LEAVES for s in steps)
    if leave_first and o.slurm is not None and o.slurm.jobs and d.pool.leave_policy == "wait":
        out.blockers.append(Blocker("jobs-under-wait", f"jobs {', '.join(o.slurm.jobs)} are running and the "
                                                       "pool's leave policy is wait"))
    if not out.blockers:
        out.steps = steps
    return out


def plan(observations: Sequence[Observation], wants: Mapping[str, Desired],
         holders: Mapping[str, str] | None = None, missing: Sequence[str] = (),
         removed: Sequence[str] = (), floors: Mapping[str, Floor] | None = None) -> Plan:
    """The fleet's plan; ``missing``: inventory nodes not in the store; ``removed``: the reverse;
    ``floors``: each source pool's floor, so moves out of a pool beyond its spare nodes are blocked."""
    holders = holders or {}
    nodes = [plan_node(o, wants[o.node], holders.get(o.node)) for o in observations if o.node not in removed]
    _keep_floors(nodes, {o.node: o for o in observations}, floors or {})
    for n in missing:
        nodes.append(NodePlan(n, "absent", [Step(Action.ENROLL, "in the inventory, not in the store"),
                                            Step(Action.PROVISION, "new node"), Step(Action.ACCEPT, "new node"),
                                            *([s] if (s := _join(wants[n])) else [])]))
    for n in removed:
        o = next((x for x in observations if x.node == n), None)
        if o is not None and o.state is State.DECOMMISSIONED:
            continue  # done: its history stays, nothing is left to plan
        blockers = [Blocker("held", f"held by run {holders[n]}: it finishes first")] if n in holders else []
        nodes.append(NodePlan(n, o.state.value if o else "unknown",
                              [] if blockers else [Step(Action.DECOMMISSION, "in the store, no longer in the "
                                                                            "inventory")], blockers))
    return Plan(sorted(nodes, key=lambda p: p.node))


def _keep_floors(nodes: Sequence[NodePlan], seen: Mapping[str, Observation], floors: Mapping[str, Floor]) -> None:
    """Block the in-service nodes that would move out of a pool beyond its spare ones (by name, first kept)."""
    moving: dict[str, list[NodePlan]] = {}
    for p in nodes:
        o = seen[p.node]
        if o.state is State.IN_SERVICE and any(s.action is Action.MOVE_POOL for s in p.steps):
            moving.setdefault(o.pool, []).append(p)
    for pool, out in sorted(moving.items()):
        f = floors.get(pool)
        if f is None:
            continue
        for p in sorted(out, key=lambda p: p.node)[f.spare:]:
            under_way = f", {f.leaving} leaving in role swaps under way" if f.leaving else ""
            p.blockers.append(Blocker("pool-floor", (
                f"pool {pool}: {f.serving} in service{under_way}, {len(out)} planned to move out; min_nodes is "
                f"{f.min_nodes}, so {f.spare} may move now")))
            p.steps = []


__all__ = ["Action", "Blocker", "FirmwareUpdate", "Floor", "NodePlan", "Plan", "Source", "Step", "plan", "plan_node"]

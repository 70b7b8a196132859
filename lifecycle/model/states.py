"""The node lifecycle: the one place that knows which state follows which.

States follow Ironic's verb pattern: an ``-ing`` state while work runs, a
``*_failed`` state when it stops, and a stable target. Every legal move is a
row of ``TRANSITIONS``: (from, event) -> to, plus who may ask for it. Code
elsewhere asks :func:`next_state`; it never assigns a state itself. Illegal
requests raise :class:`IllegalTransition`; nothing is "fixed up".

Gates: ``join`` and ``reclaim`` need an acceptance record id, so a node
cannot reach ``in_service`` without evidence.

Elastic capacity: a node of a lendable Slurm pool that Slurm powers down
(``SuspendProgram``) is ``lent`` to Kubernetes; when Slurm needs it back
(``ResumeProgram``) it is ``reclaimed``. A lend that fails leaves the node
``drained`` with racklife's drain; a reclaim that fails leaves it ``lent``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum


class State(StrEnum):
    ENROLLED = "enrolled"
    INSPECTING = "inspecting"
    INSPECT_FAILED = "inspect_failed"
    AVAILABLE = "available"
    PROVISIONING = "provisioning"
    PROVISION_FAILED = "provision_failed"
    PROVISIONED = "provisioned"
    BURNING_IN = "burning_in"
    ACCEPTED = "accepted"
    QUARANTINED = "quarantined"
    JOINING = "joining"
    JOIN_FAILED = "join_failed"
    IN_SERVICE = "in_service"
    DRAINING = "draining"
    DRAINED = "drained"
    LENDING = "lending"
    LENT = "lent"
    RECLAIMING = "reclaiming"
    REPROVISIONING = "reprovisioning"
    UPGRADING = "upgrading"
    UPGRADE_FAILED = "upgrade_failed"
    REPAIRING = "repairing"
    DECOMMISSIONING = "decommissioning"
    DECOMMISSION_FAILED = "decommission_failed"
    DECOMMISSIONED = "decommissioned"


class Actor(StrEnum):
    """Who asks for a transition."""

    OPERATOR = "operator"  # a person, through the CLI or a stack
    WORKFLOW = "workflow"  # a racklife workflow step
    HEALTH = "health"  # a health check that found a fault


S, A = State, Actor
_ANY = frozenset({A.OPERATOR, A.WORKFLOW})
_WF = frozenset({A.WORKFLOW})
_QUAR = frozenset({A.OPERATOR, A.WORKFLOW, A.HEALTH})


@dataclass(frozen=True)
class Rule:
    source: State
    event: str
    target: State
    actors: frozenset[Actor]
    needs_acceptance: bool = False


def _rules() -> list[Rule]:
    r: list[Rule] = []

    def add(src: State | tuple[State, ...], event: str, dst: State, actors: frozenset[Actor] = _ANY,
            gate: bool = False) -> None:
        for s in src if isinstance(src, tuple) else (src,):
            r.append(Rule(s, event, dst, actors, gate))

    add((S.ENROLLED, S.INSPECT_FAILED, S.AVAILABLE), "inspect", S.INSPECTING)
    add(S.INSPECTING, "inspect_done", S.AVAILABLE, _WF)
    add(S.INSPECTING, "inspect_fail", S.INSPECT_FAILED, _WF)
    add((S.AVAILABLE, S.PROVISION_FAILED, S.PROVISIONED), "provision", S.PROVISIONING)
    add(S.PROVISIONING, "provision_done", S.PROVISIONED, _WF)
    add(S.PROVISIONING, "provision_fail", S.PROVISION_FAILED, _WF)
    # A repair action racklife performed (a reboot, a GPU reset) is followed by the re-test straight from
    # `repairing`; hands-on work (`repair_done`) is inspected again first.
    add((S.PROVISIONED, S.ACCEPTED, S.QUARANTINED, S.DRAINED, S.REPAIRING), "burn_in", S.BURNING_IN)
    add(S.BURNING_IN, "accept", S.ACCEPTED)
    add(S.BURNING_IN, "quarantine", S.QUARANTINED, _QUAR)
    add((S.ACCEPTED, S.DRAINED, S.JOIN_FAILED), "join", S.JOINING, gate=True)
    add(S.JOINING, "join_done", S.IN_SERVICE, _WF)
    add(S.JOINING, "join_fail", S.JOIN_FAILED, _WF)
    # A drained node found unfit (a role swap that cannot be rolled back) is quarantined, not left drained;
    # so is a node whose reimage or upgrade failed while it was out of service (it cannot be taken back),
    # and one whose repair action failed.
    add((S.IN_SERVICE, S.JOIN_FAILED, S.DRAINED, S.PROVISION_FAILED, S.UPGRADE_FAILED, S.REPAIRING), "quarantine",
        S.QUARANTINED, _QUAR)
    add(S.IN_SERVICE, "drain", S.DRAINING)
    add(S.DRAINING, "drain_done", S.DRAINED, _WF)
    add(S.DRAINING, "drain_abort", S.IN_SERVICE)
    add(S.IN_SERVICE, "lend", S.LENDING)
    add(S.LENDING, "lend_done", S.LENT, _WF)
    add(S.LENDING, "lend_fail", S.DRAINED, _WF)
    add(S.LENT, "reclaim", S.RECLAIMING, gate=True)
    add(S.RECLAIMING, "reclaim_done", S.IN_SERVICE, _WF)
    add(S.RECLAIMING, "reclaim_fail", S.LENT, _WF)
    add(S.LENT, "quarantine", S.QUARANTINED, _QUAR)
    add((S.DRAINED, S.QUARANTINED), "reprovision", S.REPROVISIONING)
    add(S.REPROVISIONING, "reprovision_done", S.PROVISIONED, _WF)
    add(S.REPROVISIONING, "reprovision_fail", S.PROVISION_FAILED, _WF)
    add((S.DRAINED, S.UPGRADE_FAILED), "upgrade", S.UPGRADING)
    add(S.UPGRADING, "upgrade_done", S.PROVISIONED, _WF)
    add(S.UPGRADING, "upgrade_fail", S.UPGRADE_FAILED, _WF)
    add((S.DRAINED, S.QUARANTINED, S.UPGRADE_FAILED), "repair", S.REPAIRING)
    # Repaired hardware may have new serials or MACs: inspect it again.
    add(S.REPAIRING, "repair_done", S.INSPECTING, _WF)
    add(
        (S.ENROLLED, S.INSPECT_FAILED, S.AVAILABLE, S.PROVISION_FAILED, S.PROVISIONED, S.ACCEPTED,
         S.QUARANTINED, S.DRAINED, S.JOIN_FAILED, S.UPGRADE_FAILED, S.DECOMMISSION_FAILED),
        "decommission",
        S.DECOMMISSIONING,
    )
    add(S.DECOMMISSIONING, "decommission_done", S.DECOMMISSIONED, _WF)
    add(S.DECOMMISSIONING, "decommission_fail", S.DECOMMISSION_FAILED, _WF)
    return r


RULES: tuple[Rule, ...] = tuple(_rules())
TRANSITIONS: dict[tuple[State, str], Rule] = {(r.source, r.event): r for r in RULES}
EVENTS: tuple[str, ...] = tuple(dict.fromkeys(r.event for r in RULES))
TERMINAL: frozenset[State] = frozenset({S.DECOMMISSIONED})

# A run that died and cannot be recovered leaves its nodes in a "-ing" state that no
# one will finish. This is the move that puts each such node where the state machine
# says a failed attempt lands: the verb's failed state, or back where it came from.
# A state absent here (repairing: hands on hardware) is left for an operator.
ABANDON: dict[State, str] = {
    S.INSPECTING: "inspect_fail",
    S.PROVISIONING: "provision_fail",
    S.BURNING_IN: "quarantine",
    S.JOINING: "join_fail",
    S.DRAINING: "drain_abort",
    S.LENDING: "lend_fail",
    S.RECLAIMING: "reclaim_fail",
    S.REPROVISIONING: "reprovision_fail",
    S.UPGRADING: "upgrade_fail",
    S.DECOMMISSIONING: "decommission_fail",
}


class IllegalTransition(Exception):
    """The request is not allowed from the node's current state or by this actor."""

    def __init__(self, node: str, state: State, event: str, why: str) -> None:
        self.node, self.state, self.event = node, state, event
        super().__init__(f"node {node}: cannot '{event}' from state '{state}': {why}")


def next_state(node: str, current: State, event: str, actor: Actor,
               acceptance_record: str | None = None) -> State:
    """The state after ``event``; raises IllegalTransition when the table does not allow it."""
    rule = TRANSITIONS.get((current, event))
    if rule is None:
        legal = sorted(e for (s, e) in TRANSITIONS if s == current)
        raise IllegalTransition(
            node, current, event,
            f"allowed from here: {', '.join(legal) if legal else 'nothing (terminal state)'}",
        )
    if actor not in rule.actors:
        raise IllegalTransition(
            node, current, event,
            f"'{actor}' may not request it (only {', '.join(sorted(rule.actors))})",
        )
    if rule.needs_acceptance and not acceptance_record:
        raise IllegalTransition(node, current, event, "no passing acceptance record (fail closed)")
    return rule.target


def allowed_events(current: State) -> list[str]:
    return sorted(e for (s, e) in TRANSITIONS if s == current)


@dataclass(frozen=True)
class Transition:
    """One recorded move: what, when, who, why, and which workflow run did it."""

    node: str
    source: State | None  # None for enrolment
    target: State
    event: str
    actor: Actor
    reason: str
    run_id: str | None
    at: datetime
    operator: str | None = None  # who asked (the run's starter, or the process's operator); None: before 0008


def mermaid() -> str:
    """The state diagram as Mermaid, generated from the table (docs/state-machine.md)."""
    lines = ["stateDiagram-v2", f"    [*] --> {S.ENROLLED.value}"]
    for rule in RULES:
        who = "/".join(sorted(a.value for a in rule.actors))
        gate = " [acceptance]" if rule.needs_acceptance else ""
        lines.append(f"    {rule.source.value} --> {rule.target.value}: {rule.event} ({who}){gate}")
    lines.append(f"    {S.DECOMMISSIONED.value} --> [*]")
    return "\n".join(lines) + "\n"

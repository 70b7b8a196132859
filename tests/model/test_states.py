"""The node state machine: the table is the law, and random request sequences keep its invariants."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lifecycle.model.states import (
    EVENTS,
    RULES,
    TRANSITIONS,
    Actor,
    IllegalTransition,
    State,
    allowed_events,
    mermaid,
    next_state,
)


@pytest.mark.parametrize("rule", RULES, ids=[f"{r.source}-{r.event}" for r in RULES])
def test_every_legal_transition_succeeds(rule) -> None:  # type: ignore[no-untyped-def]
    for actor in rule.actors:
        target = next_state("n1", rule.source, rule.event, actor, acceptance_record="acc-1")
        assert target == rule.target


def test_every_illegal_transition_raises() -> None:
    illegal = 0
    for state, event, actor in itertools.product(State, EVENTS, Actor):
        rule = TRANSITIONS.get((state, event))
        if rule is not None and actor in rule.actors:
            continue
        illegal += 1
        with pytest.raises(IllegalTransition) as info:
            next_state("n1", state, event, actor, acceptance_record="acc-1")
        assert info.value.state == state and info.value.event == event
    assert illegal > len(RULES)


def test_join_needs_acceptance_record() -> None:
    with pytest.raises(IllegalTransition, match="acceptance"):
        next_state("n1", State.ACCEPTED, "join", Actor.WORKFLOW, acceptance_record=None)


def test_health_checks_may_quarantine_but_not_join() -> None:
    assert next_state("n1", State.IN_SERVICE, "quarantine", Actor.HEALTH) == State.QUARANTINED
    with pytest.raises(IllegalTransition, match="may not request"):
        next_state("n1", State.ACCEPTED, "join", Actor.HEALTH, acceptance_record="a")


def test_decommissioned_is_terminal() -> None:
    assert allowed_events(State.DECOMMISSIONED) == []
    with pytest.raises(IllegalTransition, match="terminal"):
        next_state("n1", State.DECOMMISSIONED, "inspect", Actor.OPERATOR)


def test_every_state_is_reachable_and_can_leave_except_terminal() -> None:
    reachable = {State.ENROLLED}
    frontier = [State.ENROLLED]
    while frontier:
        s = frontier.pop()
        for r in RULES:
            if r.source == s and r.target not in reachable:
                reachable.add(r.target)
                frontier.append(r.target)
    assert reachable == set(State)
    for s in State:
        assert allowed_events(s) or s == State.DECOMMISSIONED


def test_mermaid_is_generated_from_the_table() -> None:
    text = mermaid()
    assert text.startswith("stateDiagram-v2")
    assert text.count("-->") == len(RULES) + 2


class Fleet:
    """A model of nodes driven only through next_state, recording history."""

    def __init__(self, n: int) -> None:
        self.state = {f"n{i}": State.ENROLLED for i in range(n)}
        self.history: dict[str, list[tuple[State, str, State]]] = {k: [] for k in self.state}

    def request(self, node: str, event: str, actor: Actor, with_record: bool) -> None:
        before = self.state[node]
        try:
            after = next_state(node, before, event, actor, "acc" if with_record else None)
        except IllegalTransition:
            assert self.state[node] == before
            return
        self.history[node].append((before, event, after))
        self.state[node] = after


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.sampled_from(EVENTS), st.sampled_from(list(Actor)),
                          st.booleans()), max_size=120))
def test_random_requests_keep_invariants(requests: list[tuple[int, str, Actor, bool]]) -> None:
    fleet = Fleet(4)
    snapshots: dict[str, list[tuple[State, str, State]]] = {}
    for idx, event, actor, rec in requests:
        node = f"n{idx}"
        snapshots[node] = list(fleet.history[node])
        fleet.request(node, event, actor, rec)
        # history is append-only: what was there stays there
        assert fleet.history[node][: len(snapshots[node])] == snapshots[node]
    for node, hist in fleet.history.items():
        # one state per node, and it is where its history ends
        assert fleet.state[node] == (hist[-1][2] if hist else State.ENROLLED)
        # history is a chain: each move starts where the last ended
        for (_, _, a), (b, _, _) in itertools.pairwise(hist):
            assert a == b
        # no skipped gates: in_service only through joining, and every join after
        # the node's last (re)build was preceded by an acceptance since that build
        accepted_since_build = False
        for src, event, dst in hist:
            if dst == State.PROVISIONED:
                accepted_since_build = False
            if dst == State.ACCEPTED:
                accepted_since_build = True
            if dst == State.IN_SERVICE:
                assert src == State.JOINING
            if event == "join":
                assert accepted_since_build, hist

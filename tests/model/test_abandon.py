"""Every move for an abandoned run's node is a legal one, by a workflow, out of an "-ing" state."""

from __future__ import annotations

from lifecycle.model.states import ABANDON, Actor, State, next_state


def test_each_abandon_move_is_legal_and_leaves_the_ing_state() -> None:
    for state, event in ABANDON.items():
        target = next_state("n", state, event, Actor.WORKFLOW)
        assert target != state and not target.value.endswith("ing"), (state, event, target)


def test_every_workflow_ing_state_but_repairing_has_a_move() -> None:
    ing = {s for s in State if s.value.endswith("ing")}
    assert ing - set(ABANDON) == {State.REPAIRING}

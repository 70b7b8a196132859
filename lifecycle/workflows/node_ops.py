"""Steps every workflow shares: moving a node through the state machine, durably.

A transition is a DBOS step that carries the workflow id as its run id; the
store treats a replay of the same (event, run id) as already done, so a step
cut off after its commit is harmless when it runs again.
"""

from __future__ import annotations

from dbos import DBOS

from lifecycle.model.states import Actor
from lifecycle.store import shared_store
from lifecycle.workflows.retry import step


def current_run_id() -> str:
    wid = DBOS.workflow_id
    if wid is None:
        raise RuntimeError("not inside a workflow")
    return wid


@step(idempotent=True)  # a replay of (event, run id) is already done
def transition(node: str, event: str, reason: str, actor: str = Actor.WORKFLOW.value,
               acceptance_record: str | None = None) -> str:
    """Apply ``event`` to ``node`` as part of the current run; return the new state."""
    store = shared_store()
    t = store.transition(node, event, Actor(actor), reason, run_id=current_run_id(),
                         acceptance_record=acceptance_record)
    return t.target.value


@step(idempotent=True)
def node_state(node: str) -> str:
    store = shared_store()
    return store.get(node).state.value


@step(idempotent=True)
def node_pool(node: str) -> str:
    """The node's pool as this run saw it, journaled: a recovered run replays what it saw, not what is now.

    A role swap moves the node's pool mid-run; a body that read the store directly took another branch on
    replay than on the first run (DBOS: "transition was recorded when release_leases was expected").
    """
    return shared_store().get(node).pool

"""Steps every workflow shares: moving a node through the state machine, durably.

A transition is a DBOS step that carries the workflow id as its run id; the
store treats a replay of the same (event, run id) as already done, so a step
cut off after its commit is harmless when it runs again.

:class:`Moves` names the events one leave-and-join records, so the one leave
and join logic (``slurm_pool``, ``kube_pool``, ``node_cycle``) serves a role
swap (``drain … join_done``) and elastic capacity's lend (``lend …
lend_done``) and reclaim (``reclaim … reclaim_done``) alike.
"""

from __future__ import annotations

from dataclasses import dataclass

from dbos import DBOS

from lifecycle.model.states import TRANSITIONS, Actor, State
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


@dataclass(frozen=True)
class Moves:
    """The state machine's events of one trip out of a scheduler and into one (checked against its table)."""

    serving: str
    """The state a node leaves from."""
    leave: str
    """serving -> leaving (the workflow may have recorded it already: Slurm's call is the event itself)."""
    left: str | None
    """leaving -> left; None: the node stays ``leaving`` until it joins."""
    abort: str
    """A leave that did not finish, from ``leaving``."""
    join: str | None
    """left -> joining (gated by the acceptance record); None: the join goes on from ``leaving``."""
    joined: str
    join_fail: str
    lift_on_abort: bool = True
    """A leave that did not finish lifts racklife's own drain or cordon (else the node stays held)."""
    roll_back: bool = True
    """A failed change or join is undone and the node rejoins where it was; else ``join_fail``, held."""
    release_left: bool = False
    """Once joined, racklife's drain in the Slurm pool it left is lifted (a lent node is Slurm's to call back)."""

    def _after(self, state: str, event: str) -> str:
        return TRANSITIONS[(State(state), event)].target.value

    @property
    def leaving(self) -> str:
        return self._after(self.serving, self.leave)

    @property
    def left_state(self) -> str:
        return self.leaving if self.left is None else self._after(self.leaving, self.left)

    @property
    def joining(self) -> str:
        return self.left_state if self.join is None else self._after(self.left_state, self.join)

    @property
    def served(self) -> str:
        """The state once joined (in_service, or lent)."""
        return self._after(self.joining, self.joined)


SWAP = Moves("in_service", "drain", "drain_done", "drain_abort", "join", "join_done", "join_fail")
"""A role swap, reimage or upgrade: drained out of one pool, joined (gated) to one."""
LEND = Moves("in_service", "lend", None, "lend_fail", None, "lend_done", "lend_fail", lift_on_abort=False,
             roll_back=False, release_left=True)
"""Slurm's power saving lends an idle node to Kubernetes; a failed lend leaves it drained with racklife's drain."""
RECLAIM = Moves("lent", "reclaim", None, "reclaim_fail", None, "reclaim_done", "reclaim_fail", roll_back=False)
"""Slurm calls a lent node back; a failed reclaim leaves it lent (and Slurm is told at once)."""

"""One node's repair as a durable run: the node cycle whose change is the repair action.

A repair is what a role swap or an upgrade already is — leave the scheduler,
change the node, re-test it, rejoin or quarantine
(:mod:`lifecycle.workflows.node_cycle`) — with the change being the action
the repair table chose (:mod:`lifecycle.workflows.repair_table`) or the
operator named, built from :data:`lifecycle.workflows.repair_actions.ACTIONS`
(``reboot``, ``reset-gpu``, ``reimage``). ``rma`` quarantines the node for
hands-on work. The run's lease is taken through the repair circuit breaker
(:mod:`lifecycle.store.repair_breaker`) in one transaction, so an automatic
repair is refused while the pool already has its share under repair, and
every repair, automatic or not, is counted.

Where the node is decides the path: a node ``in_service`` leaves its
scheduler first; a ``quarantined`` node (an operator's repair of a node
racklife took out) has nothing to leave and goes straight to the action,
the re-test and the join. The re-test is acceptance at the pool's
``retest_level``, which runs the node's load checks (the GEMM soak, nccl-tests,
DCGM), so a node is judged busy, not idle. Automatic repairs
(``automatic=True``, started by ``racklife serve``: :mod:`lifecycle.service.health`) are only for
nodes in service.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from dbos import DBOS

from lifecycle.model.states import State
from lifecycle.store import repair_breaker, shared_store
from lifecycle.workflows import accept
from lifecycle.workflows.kube_pool import KubeSettings
from lifecycle.workflows.leasing import LIVE, release_leases, statuses
from lifecycle.workflows.node_cycle import CycleOutcome, LeaveSpec, cycle, quarantine
from lifecycle.workflows.node_ops import current_run_id, node_state
from lifecycle.workflows.provision import ProvisionSettings
from lifecycle.workflows.repair_actions import ACTIONS, ActionContext
from lifecycle.workflows.repair_table import RepairAction
from lifecycle.workflows.retry import step

WORKFLOW = "repair_node"
BUILT = (*ACTIONS, RepairAction.RMA)
REPAIRABLE = (State.IN_SERVICE.value, State.QUARANTINED.value)


@dataclass(frozen=True)
class RepairSettings:
    """One node's repair; an argument of the run, so a recovered run has what it started with."""

    action: RepairAction
    reason: str
    operator: str
    accept: accept.AcceptSettings
    """The re-test: acceptance of the one node at a level that loads the GPUs."""
    automatic: bool = False
    """Started from an event: refused while the pool's breaker is open, and only for a node in service."""
    kube: KubeSettings | None = None
    boot_wait_s: float = 900.0
    """How long a rebooted node has to answer over SSH before the repair fails (and quarantines it)."""
    image: str | None = None
    """``reimage``: NAME[:VERSION] (default: the node's image, else its pool's)."""
    provision: ProvisionSettings | None = None
    """``reimage``: the boot server's provisioning settings."""
    event: int | None = None
    """The health event that started an automatic repair (``lifecycle.store.health``)."""


@dataclass
class RepairOutcome(CycleOutcome):
    action: str = ""
    breaker: str = ""


@step(idempotent=True)  # a re-run finds its own lease
def take_repair_lease(node: str, automatic: bool) -> dict[str, Any]:
    """The node's lease for this run through the breaker: ``ok`` or why not, and the breaker's numbers."""
    store = shared_store()
    run_id = current_run_id()
    found = repair_breaker_holders(node)
    known = statuses(found)
    over = tuple(r for r in found if known.get(r, "SUCCESS") not in LIVE)
    took = repair_breaker.take(store, node, run_id, automatic=automatic, replaceable=over)
    why = ""
    if took.held is not None:
        why = f"node {node} is held by run {took.held.run_id} ({took.held.workflow})"
    elif not took.ok:
        why = took.count.describe()
    return {"ok": took.ok, "reason": why, "breaker": took.count.describe(), "open": took.count.open,
            "held": took.held is not None}


def repair_breaker_holders(node: str) -> list[str]:
    from lifecycle.store import leases

    run_id = current_run_id()
    return [le.run_id for le in leases.holders(shared_store(), [node]).values() if le.run_id != run_id]


@step(idempotent=True)  # reads only
def node_facts(node: str) -> dict[str, str | None]:
    """The node's SKU and image, else its pool's image (what the actions are built from)."""
    store = shared_store()
    rec = store.get(node)
    return {"sku": rec.node().sku, "image": rec.node().image or store.pool(rec.pool).image}


@step(idempotent=True)  # one row per run: a re-run writes the same outcome again
def record_event_outcome(event: int | None, outcome: str, detail: str) -> None:
    """Say on the health event that started this run what became of it (automatic repairs only)."""
    if event is None:
        return
    from lifecycle.store import health

    health.set_outcome(shared_store(), event, outcome, detail[:500], current_run_id())


def _refused(out: RepairOutcome, why: str, s: RepairSettings, outcome: str = "refused") -> dict[str, Any]:
    out.reason = f"refused, nothing changed: {why}"
    record_event_outcome(s.event, outcome, out.reason)
    return asdict(out)


@DBOS.workflow(name=WORKFLOW)
def repair_node(node: str, s: RepairSettings) -> dict[str, Any]:
    """Repair one node as a run that holds it: the breaker, then the action, re-test, rejoin or quarantine."""
    out = RepairOutcome(node, state=node_state(node), action=s.action.value)
    if s.action not in BUILT:
        return _refused(out, f"action {s.action.value} is not a repair racklife performs", s)
    took = take_repair_lease(node, s.automatic)
    out.breaker = took["breaker"]
    if not took["ok"]:
        return _refused(out, took["reason"], s, "breaker_open" if not took["held"] and took["open"] else "refused")
    try:
        out.state = node_state(node)
        allowed = (State.IN_SERVICE.value,) if s.automatic else REPAIRABLE
        if out.state not in allowed:
            return _refused(out, f"node is {out.state}; a repair here needs it "
                                 f"{' or '.join(allowed).replace('_', ' ')}", s)
        why = f"repair ({s.action.value}): {s.reason}"
        if s.action is RepairAction.RMA:
            if out.state == State.QUARANTINED.value:
                return _refused(out, "the node is quarantined already", s)
            quarantine(node, out, f"{why}; hands-on work needed", s.kube)
            out.reason = f"quarantined for hands-on work: {s.reason}"
            record_event_outcome(s.event, "quarantined", out.reason)
            return asdict(out)
        facts = node_facts(node)
        ctx = ActionContext(s.accept.ssh_config, str(facts["sku"]), s.boot_wait_s, s.image or facts["image"],
                            s.provision)
        try:
            change = ACTIONS[s.action](ctx)
        except ValueError as exc:
            return _refused(out, str(exc), s)
        cycle(node, LeaveSpec(why), [change], s.accept, s.kube, out,
              leave_first=out.state == State.IN_SERVICE.value)
        record_event_outcome(s.event, "repaired" if out.ok else "failed" if out.phases else "refused", out.reason)
        return asdict(out)
    finally:
        release_leases()

"""One node's repair as a durable run: the node cycle whose change is the repair action.

A repair is what a role swap or an upgrade already is — leave the scheduler,
change the node, re-test it, rejoin or quarantine
(:mod:`lifecycle.workflows.node_cycle`) — with the change being the action
the repair table chose (:mod:`lifecycle.workflows.repair_table`) or the
operator named. The run's lease is taken through the repair circuit breaker
(:mod:`lifecycle.store.repair_breaker`) in one transaction, so an automatic
repair is refused while the pool already has its share under repair, and
every repair, automatic or not, is counted.

Actions here: ``reboot`` (a BMC power cycle through the node's driver, a wait
for SSH to answer, then the re-test) and ``rma`` (quarantine, held by racklife's drain or cordon,
with the reason, for hands-on work). ``reset-gpu`` is not built (the lab's
fake ``nvidia-smi`` has no ``-r``, so it could not be tested) and
``reimage`` goes through ``racklife upgrade``/``role-swap --reimage`` for now
(docs/limits.md).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from dbos import DBOS

from lifecycle.drivers.bmc.base import PowerAction
from lifecycle.model.states import State
from lifecycle.store import repair_breaker, shared_store
from lifecycle.workflows import accept
from lifecycle.workflows.kube_pool import KubeSettings
from lifecycle.workflows.leasing import LIVE, release_leases, statuses
from lifecycle.workflows.node_cycle import ChangeResult, CycleOutcome, LeaveSpec, cycle, quarantine
from lifecycle.workflows.node_ops import current_run_id, node_state
from lifecycle.workflows.repair_table import RepairAction
from lifecycle.workflows.retry import step

WORKFLOW = "repair_node"
BUILT = (RepairAction.REBOOT, RepairAction.RMA)


@dataclass(frozen=True)
class RepairSettings:
    """One node's repair; an argument of the run, so a recovered run has what it started with."""

    action: RepairAction
    reason: str
    operator: str
    accept: accept.AcceptSettings
    """The re-test: acceptance of the one node at a level that loads the GPUs."""
    automatic: bool = False
    """Started from an event: refused while the pool's breaker is open."""
    kube: KubeSettings | None = None
    boot_wait_s: float = 900.0
    """How long a rebooted node has to answer over SSH before the repair fails (and quarantines it)."""


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
    return {"ok": took.ok, "reason": why, "breaker": took.count.describe()}


def repair_breaker_holders(node: str) -> list[str]:
    from lifecycle.store import leases

    run_id = current_run_id()
    return [le.run_id for le in leases.holders(shared_store(), [node]).values() if le.run_id != run_id]


@step(idempotent=False)  # a second power cycle is a second outage: never retried blindly
def bmc_power_cycle(node: str) -> str:
    """Power-cycle the node through its BMC; return the power state found first."""
    from lifecycle.drivers.bmc.factory import driver_for  # vendor SDKs only when a BMC is used

    bmc = driver_for(shared_store().get(node).node().bmc)
    try:
        was = bmc.power_state()
        bmc.power(PowerAction.CYCLE)
        return was.value
    finally:
        bmc.close()


@step(idempotent=True)  # reads only
def await_ssh(node: str, ssh_config: str, wait_s: float) -> str:
    """Wait until the node answers over SSH (``true``) as the re-test will reach it; "" when it does, else why not."""
    from acceptance.fanout import Target
    from acceptance.ssh_fabric import FabricSSH  # fabric and paramiko: only when SSH is used

    transport = FabricSSH(Path(ssh_config))
    deadline = time.monotonic() + wait_s
    last = "no answer"
    try:
        while True:
            target = Target(node, node)
            res = transport.run(target, ["true"], timeout_s=10.0)
            transport.release(target)
            if res.exit_code == 0:
                return ""
            last = res.stderr.strip()[-200:] or f"exit {res.exit_code}"
            if time.monotonic() >= deadline:
                return f"the node did not answer over SSH within {wait_s:.0f} s of the power cycle (last: {last})"
            time.sleep(2.0)
    finally:
        transport.close()


@dataclass(frozen=True)
class RebootChange:
    """A BMC power cycle of the drained node, then SSH answering; the re-test says whether it came back sound."""

    ssh_config: str
    wait_s: float = 900.0
    name: str = "reboot"

    def precheck(self) -> str:
        return ""

    def apply(self, node: str) -> ChangeResult:
        was = bmc_power_cycle(node)
        why = await_ssh(node, self.ssh_config, self.wait_s)
        if why:
            return ChangeResult(False, why, {"power_was": was})
        return ChangeResult(True, f"power cycled through the BMC (was {was}); answering over SSH",
                            {"power_was": was})

    def undo(self, node: str) -> ChangeResult | None:
        return None  # a node whose reboot failed is in no known state: quarantined, never rejoined as it was


@DBOS.workflow(name=WORKFLOW)
def repair_node(node: str, s: RepairSettings) -> dict[str, Any]:
    """Repair one node as a run that holds it: the breaker, then the action, re-test, rejoin or quarantine."""
    out = RepairOutcome(node, state=node_state(node), action=s.action.value)
    if s.action not in BUILT:
        out.reason = f"refused, nothing changed: action {s.action.value} is not built (docs/limits.md)"
        return asdict(out)
    took = take_repair_lease(node, s.automatic)
    out.breaker = took["breaker"]
    if not took["ok"]:
        out.reason = f"refused, nothing changed: {took['reason']}"
        return asdict(out)
    try:
        if out.state != State.IN_SERVICE.value:
            out.reason = f"refused, nothing changed: node is {out.state}; a repair here needs it in service"
            return asdict(out)
        why = f"repair ({s.action.value}): {s.reason}"
        if s.action is RepairAction.RMA:
            quarantine(node, out, f"{why}; hands-on work needed", s.kube)
            out.reason = f"quarantined for hands-on work: {s.reason}"
        else:
            cycle(node, LeaveSpec(why), [RebootChange(s.accept.ssh_config, s.boot_wait_s)], s.accept, s.kube, out)
        return asdict(out)
    finally:
        release_leases()


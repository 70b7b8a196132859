"""Decommission: take a server out of the fleet for good, as one durable run per node.

The stable entry point is :func:`decommission_node` (a DBOS workflow) with a
:class:`~lifecycle.workflows.decommission_checks.DecommissionSettings`; the
CLI, the planner's apply (a node removed from the inventory) and the stacks'
delete all start it through the one Controller. The phases, each a journaled
step, so a controller killed anywhere resumes the run and does each side
effect once:

1. pre-checks (:mod:`lifecycle.workflows.decommission_checks`), fail closed:
   refused with the reason, nothing changed — jobs or pods running without
   ``force``, a drain or cordon someone else holds, an erase an IPMI BMC
   cannot do;
2. leave the scheduler with the bodies every workflow shares
   (``slurm_pool._leave`` under ``requeue`` when forced; ``kube_pool.leave_body``),
   so every job requeued and pod evicted is in the report;
3. ``decommissioning``; out of Slurm for good: down with racklife's reason,
   out of every partition and out of slurm.conf (the site's hook, or
   ``scontrol delete`` where Slurm allows it);
4. with ``erase``: sampled blocks of every drive read in a maintenance boot of
   the maintenance image, every drive erased through the BMC, then read back
   from the node itself in a second maintenance boot (each drive's NVMe
   Sanitize Status log and the same blocks over SSH,
   :mod:`lifecycle.workflows.erase_readback`, :mod:`lifecycle.workflows.sampled_read`),
   and a signed erase certificate (:mod:`lifecycle.workflows.erase_certificate`);
   an erase that is not verified stops here: ``decommission_failed``, with
   which drive and why;
5. power off, then the BMC's settings reset when asked (``ResetAll``: the last
   call, as the site's credentials go with it); then the Kubernetes Node
   object deleted (after power off: a running kubelet registers it again);
   ``decommissioned``.

History stays (transitions are append-only); the name is free for another
server once the node is decommissioned (``store.inventory_import``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from dbos import DBOS

from lifecycle.drivers.bmc.base import PowerAction, PowerState
from lifecycle.drivers.errors import DriverError, NotSupported
from lifecycle.store import shared_store
from lifecycle.workflows import kube_pool, slurm_pool
from lifecycle.workflows.decommission_checks import (
    LEAVE_FIRST,
    Checked,
    DecommissionSettings,
    kube_known,
    prechecks,
    slurm,
    slurm_known,
)
from lifecycle.workflows.erase_certificate import erase_node
from lifecycle.workflows.leasing import release_leases, take_leases
from lifecycle.workflows.node_ops import current_run_id, node_state, transition
from lifecycle.workflows.retry import step

__all__ = ["DecommissionOutcome", "DecommissionSettings", "decommission_node"]


@dataclass
class DecommissionOutcome:
    node: str
    ok: bool = False
    refused: bool = False
    state: str = ""
    reason: str = ""
    checks: list[dict[str, Any]] = field(default_factory=list)
    leave: dict[str, Any] = field(default_factory=dict)
    """What leaving the scheduler touched: every job requeued and pod evicted."""
    scheduler: dict[str, Any] = field(default_factory=dict)
    """How the node was taken out of its scheduler (partitions, slurm.conf, the Node object)."""
    erase: dict[str, Any] = field(default_factory=dict)
    """Per drive: method, task, read-back; and the certificate's directory and digest."""
    bmc: dict[str, Any] = field(default_factory=dict)


# ------------------------------------------------------------------ steps


@step(idempotent=True)  # reads only
def decommission_checks(node: str, s: DecommissionSettings) -> dict[str, Any]:
    return prechecks(shared_store(), node, s).to_dict()


@step(idempotent=True)  # each part reads first: down again, out of a partition again, gone again
def slurm_remove(node: str, s: DecommissionSettings) -> dict[str, Any]:
    """Out of Slurm for good: down with racklife's reason, out of every partition, out of its configuration."""
    import subprocess

    from lifecycle.drivers.slurm.driver import reason_for

    driver = slurm()
    out: dict[str, Any] = {"partitions_left": [], "config": ""}
    if not slurm_known(node):
        out["config"] = "not known to Slurm"
        return out
    driver.down([node], current_run_id(), reason_for(current_run_id(), "decommissioned")[:200])
    for partition, members in driver.partitions().items():
        if node in members and driver.remove_from_partition(partition, [node]):
            out["partitions_left"].append(partition)
    if s.slurm_conf_cmd:
        done = subprocess.run([*s.slurm_conf_cmd, node], capture_output=True, text=True, timeout=300,
                              check=False)
        if done.returncode != 0:
            out["config"] = f"the slurm.conf hook failed (exit {done.returncode}): {done.stderr.strip()[-300:]}"
            return out
    elif slurm_known(node):
        try:
            driver.delete_node(node)
        except DriverError as exc:
            out["config"] = (f"still in slurm.conf (down, in no partition): Slurm would not delete it "
                             f"({exc.message}); set RACKLIFE_SLURM_CONF_CMD or remove it from the inventory "
                             "and re-render slurm.conf")
            return out
    out["config"] = "removed" if not slurm_known(node) else "still known to Slurm after the hook"
    return out


@step(idempotent=True)  # a Node already gone is gone
def kube_remove(node: str, s: DecommissionSettings) -> dict[str, Any]:
    assert s.kube is not None
    kube = kube_pool.driver(s.kube)
    try:
        deleted = kube.delete_node(node)
    finally:
        getattr(kube, "close", lambda: None)()
    return {"node_object": "deleted" if deleted else "not registered",
            "gone": not kube_known(node, s.kube)}


@step(idempotent=True)  # reads first: a node already off is done
def bmc_power_off(node: str) -> dict[str, Any]:
    from lifecycle.workflows.bmc_calls import open_bmc

    bmc = open_bmc(node)
    try:
        was = bmc.power_state()
        if was not in (PowerState.OFF, PowerState.POWERING_OFF):
            bmc.power(PowerAction.OFF)
        return {"power_was": was.value, "power": "off"}
    finally:
        bmc.close()


@step(idempotent=False)  # after ResetAll the site's credentials are gone: asked once, as the last BMC call
def bmc_reset(node: str) -> str:
    from lifecycle.drivers.bmc.redfish import RedfishDriver
    from lifecycle.drivers.bmc.redfish_reset import reset_to_defaults
    from lifecycle.workflows.bmc_calls import open_bmc

    bmc = open_bmc(node)
    try:
        if not isinstance(bmc, RedfishDriver):
            raise NotSupported(bmc.target, "IPMI has no reset of the BMC's settings to defaults")
        return reset_to_defaults(bmc)
    finally:
        bmc.close()


# ------------------------------------------------------------------ the workflow


@DBOS.workflow(name="decommission_node")
def decommission_node(node: str, s: DecommissionSettings) -> dict[str, Any]:
    """Decommission one node as a run that holds it (one run per node)."""
    held = take_leases([node], "decommission_node")
    if held:
        return asdict(DecommissionOutcome(node, refused=True, state=node_state(node), reason=held[node]))
    try:
        return asdict(_decommission(node, s))
    finally:
        release_leases()


def _decommission(node: str, s: DecommissionSettings) -> DecommissionOutcome:
    checked = Checked.from_dict(decommission_checks(node, s))
    out = DecommissionOutcome(node, state=node_state(node), checks=checked.to_dict()["checks"])
    if checked.already:
        out.ok, out.reason = True, "decommissioned already"
        return out
    if not checked.ok:
        out.refused = True
        out.reason = f"refused, nothing changed: {checked.refusal()}"
        return out
    why = f"decommission ({s.operator}): {s.reason}"[:200]
    if not _leave(node, checked.scheduler, s, why, out):
        return out
    if out.state != "decommissioning":
        out.state = transition(node, "decommission", f"{why} (run {current_run_id()})"[:500])
    try:
        if checked.scheduler == "slurm":
            out.scheduler = slurm_remove(node, s)
    except DriverError as exc:
        return _fail(node, out, f"taking it out of Slurm failed: {exc.message}")
    if s.erase:
        out.erase = erase_node(node, s)
        if not out.erase.get("ok"):
            return _fail(node, out, f"not erased: {out.erase.get('reason')}")
    try:
        out.bmc = bmc_power_off(node)
        if s.reset_bmc:  # last: after it the site's credentials no longer open this BMC
            out.bmc["reset"] = bmc_reset(node)
    except DriverError as exc:
        return _fail(node, out, f"bmc: {exc.message}")
    try:
        # After power off: a kubelet still running would register the Node again.
        if checked.scheduler == "kubernetes":
            out.scheduler = kube_remove(node, s)
    except DriverError as exc:
        return _fail(node, out, f"deleting its Kubernetes Node failed: {exc.message}")
    note = ""
    if out.scheduler.get("config") not in (None, "", "removed", "not known to Slurm"):
        note = f"; Slurm: {out.scheduler['config']}"
    out.state = transition(node, "decommission_done", (
        f"decommissioned by {s.operator}" + (f"; erase certificate {out.erase.get('certificate')}" if s.erase
                                             else "; drives not erased (no --erase)") + note)[:500])
    out.ok = True
    out.reason = "decommissioned" + note
    return out


def _leave(node: str, scheduler: str, s: DecommissionSettings, why: str, out: DecommissionOutcome) -> bool:
    """Leave the scheduler (requeue or evict under force); False when it did not finish (reason set)."""
    state = out.state
    try:
        if scheduler == "slurm":
            if state in LEAVE_FIRST:
                left = slurm_pool._leave(node, "requeue" if s.force else "wait", 0.0 if s.force else None, why)
                out.leave = left
                if not left["ok"]:
                    out.reason = f"leaving Slurm did not finish: {left['reason']}"
                    out.state = left["state"]
                    return False
                out.state = left["state"]
            elif s.force and slurm_known(node):
                # Out of service yet busy (quarantined with jobs, say): drain it and requeue them.
                out.leave = {"report": slurm_pool.drain_and_empty(node, "requeue", 0.0, why)}
        elif scheduler == "kubernetes" and s.kube is not None and state in LEAVE_FIRST:
            pool = shared_store().pool(shared_store().get(node).pool)
            left_k = kube_pool.leave_body(node, pool.drain_deadline_s if s.deadline_s is None else s.deadline_s,
                                          why, s.kube)
            out.leave = asdict(left_k)
            out.state = left_k.state
            if not left_k.ok:
                out.reason = f"leaving Kubernetes did not finish: {left_k.reason}"
                return False
    except DriverError as exc:
        out.reason = f"leaving {scheduler} failed: {exc.message}"
        out.state = node_state(node)
        return False
    return True


def _fail(node: str, out: DecommissionOutcome, why: str) -> DecommissionOutcome:
    out.reason = why
    out.state = transition(node, "decommission_fail", why[:500])
    return out

"""What a decommission needs before it touches anything: its settings, its pre-checks, what it would touch.

A decommission takes a server out of the fleet for good, so the checks fail
closed: a node whose scheduler cannot be read, a drain or cordon someone else
holds, jobs or pods still running without ``--force``, an erase asked of a BMC
that cannot erase (IPMI) — each refuses with its reason, and nothing
changes. They are plain functions so that ``--dry-run`` runs exactly the
checks the workflow runs (as one journaled step), without the engine.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from lifecycle.drivers.bmc.base import Capability
from lifecycle.drivers.bmc.factory import unsupported_reason
from lifecycle.drivers.errors import DriverError, OperationFailed
from lifecycle.drivers.slurm.driver import SlurmDriver, foreign_hold, held_by_other
from lifecycle.drivers.slurm.leave import LEAVE_ALONE
from lifecycle.drivers.slurm.runner import CommandRunner
from lifecycle.model.inventory import Pool
from lifecycle.model.states import TRANSITIONS, State
from lifecycle.store import Store
from lifecycle.workflows.checks import Check, guard
from lifecycle.workflows.kube_pool import KubeSettings
from lifecycle.workflows.kube_pool import driver as kube_driver
from lifecycle.workflows.provision import ProvisionSettings

SLURM_CONF_CMD_ENV = "RACKLIFE_SLURM_CONF_CMD"
"""The site's hook that removes a node from slurm.conf and has slurmctld reread it (argv, node appended)."""

# States a node leaves its scheduler from first (drain, then decommission).
LEAVE_FIRST = frozenset({State.IN_SERVICE, State.DRAINING})


@dataclass(frozen=True)
class ReadbackSettings:
    """How a decommission reaches the node it erased to read its drives back: the boot server and SSH."""

    provision: ProvisionSettings
    """Where the boot server is and the images it serves."""
    ssh_config: str
    """ssh_config that reaches the booted node (key auth, pinned host keys), as acceptance uses."""
    image: str = "minimal"
    """The image booted to read the drives back (:func:`readback_image`)."""
    ssh_wait_s: float = 300.0


MAINTENANCE_IMAGE = "maintenance"
"""images/maintenance.yaml: busybox, dropbear and nvme-cli, the image a real node's drives are read back from."""


def readback_image(images_dir: Path, asked: str | None) -> str:
    """The image a read-back boots: the one asked for; else ``maintenance`` where it is built (the only image
    with an SSH server and nvme-cli); else ``minimal`` (which a real node cannot be read back from: no SSH
    server, no nvme; the lab's emulated nodes answer for it)."""
    if asked:
        return asked
    for manifest in images_dir.glob("*/manifest.json"):
        try:
            if json.loads(manifest.read_text()).get("name") == MAINTENANCE_IMAGE:
                return MAINTENANCE_IMAGE
        except (OSError, ValueError):
            continue
    return "minimal"


@dataclass(frozen=True)
class DecommissionSettings:
    """One decommission request; an argument of each run, so a recovered run has what it started with.

    This is the stable entry point's argument (``decommission.decommission_node``): the CLI,
    the planner's apply and the stacks' delete build one and start the workflow with it.
    """

    operator: str
    reason: str = "decommission"
    force: bool = False
    """Requeue Slurm jobs and evict pods rather than refuse while they run."""
    erase: bool = False
    """Secure-erase every drive through the BMC, verify, and write a signed erase certificate."""
    reset_bmc: bool = False
    """Reset the BMC's settings to defaults (Redfish ``Manager.ResetToDefaults`` ResetAll) after power off."""
    kube: KubeSettings | None = None
    """How to reach Kubernetes; None: no kubeconfig (a node of a Kubernetes pool is refused)."""
    deadline_s: float | None = None
    """How long a leave under --force may wait for PodDisruptionBudgets (default: the pool's)."""
    slurm_conf_cmd: tuple[str, ...] = ()
    """The site's hook that removes a node from slurm.conf (argv; the node name is appended)."""
    certificate_dir: str = ""
    """Where erase certificates are written (one directory per node and run)."""
    readback: ReadbackSettings | None = None
    """With ``erase``: the maintenance boot that reads each drive's own log back (None: none can be done)."""
    readback_unavailable: str = ""
    """Why there is no read-back (no built image, no SSH config): an ``erase`` is then refused."""


@dataclass
class Checked:
    state: str
    pool: str
    scheduler: str
    checks: list[Check] = field(default_factory=list)
    already: bool = False
    """The node is decommissioned already: nothing to do, and that is success."""

    @property
    def ok(self) -> bool:
        return self.already or (bool(self.checks) and all(c.ok for c in self.checks))

    def refusal(self) -> str:
        return "; ".join(f"{c.name}: {c.detail}" for c in self.checks if not c.ok)

    def to_dict(self) -> dict[str, Any]:
        return {"state": self.state, "pool": self.pool, "scheduler": self.scheduler, "ok": self.ok,
                "already": self.already, "checks": [asdict(c) for c in self.checks]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Checked:
        return cls(data["state"], data["pool"], data["scheduler"], [Check(**c) for c in data["checks"]],
                   bool(data.get("already")))


def slurm() -> SlurmDriver:
    return SlurmDriver(CommandRunner())


def slurm_known(node: str) -> bool:
    """Whether Slurm has the node at all (a node removed from its configuration is not found)."""
    try:
        slurm().node(node)
    except OperationFailed as exc:
        if "not found" in exc.message.lower() or "no such node" in exc.message.lower():
            return False
        raise
    return True


def kube_known(node: str, s: KubeSettings) -> bool:
    kube = kube_driver(s)
    try:
        try:
            kube.node(node)
        except OperationFailed:
            return False
        return True
    finally:
        getattr(kube, "close", lambda: None)()


def _foreign(node: str, pool: Pool, s: DecommissionSettings) -> str:
    if pool.scheduler == "slurm":
        if not slurm_known(node):
            return ""
        current = slurm().node(node)
        return held_by_other(current, LEAVE_ALONE) if foreign_hold(current) is not None else ""
    assert s.kube is not None
    kube = kube_driver(s.kube)
    try:
        try:
            current_k = kube.node(node)
        except OperationFailed:
            return ""  # not registered: nobody's cordon
        if current_k.unschedulable and current_k.owner.kind != "racklife":
            return f"Kubernetes: cordoned by {current_k.owner.describe()}; racklife leaves it"
        return ""
    finally:
        getattr(kube, "close", lambda: None)()


def _last_in_slurm(node: str) -> str:
    """The node is the only one Slurm has: taking it out of slurm.conf leaves a controller that does not
    start ("no nodes configured", slurmctld 22.05), so the decommission is refused before it drains."""
    names = [n.name for n in slurm().nodes()]  # one read: a node out of Slurm already (resumed) is not in it
    if names == [node]:
        return (f"{node} is the last node Slurm has: slurmctld does not start on a slurm.conf that defines "
                "no node; add another node first")
    return ""


def running(node: str, pool: Pool, s: DecommissionSettings) -> list[str]:
    """The jobs or pods holding the node now (a DaemonSet's or mirror pod is not work on it)."""
    if pool.scheduler == "slurm":
        if not slurm_known(node):
            return []
        return [f"job {j.job_id} ({j.name}, {j.user})" for j in slurm().jobs_on([node]) if j.active]
    if pool.scheduler == "kubernetes" and s.kube is not None:
        kube = kube_driver(s.kube)
        try:
            return [f"pod {p.key}" for p in kube.pods_on(node) if p.skip_reason is None and not p.terminating]
        finally:
            getattr(kube, "close", lambda: None)()
    return []


def prechecks(store: Store, node: str, s: DecommissionSettings) -> Checked:
    """Every pre-check of decommissioning ``node``, each with its result (reads only)."""
    rec = store.get(node)
    try:
        pool = store.pool(rec.pool)
    except Exception as exc:  # StoreError: an unknown pool
        out = Checked(rec.state.value, rec.pool, "unknown")
        out.checks.append(Check("pool", False, str(exc)))
        return out
    out = Checked(rec.state.value, rec.pool, pool.scheduler)
    if rec.state is State.DECOMMISSIONED:
        out.already = True
        out.checks.append(Check("state", True, "decommissioned already"))
        return out
    legal = rec.state in LEAVE_FIRST or (rec.state, "decommission") in TRANSITIONS
    out.checks.append(Check(
        "state", legal,
        f"{rec.state.value}: " + ("leaves its scheduler first" if rec.state in LEAVE_FIRST else "may be decommissioned")
        if legal else f"a node that is {rec.state.value} cannot be decommissioned (a run holds it, or it must "
                      "first come back: reclaim a lent node, let a running workflow end)"))
    if pool.scheduler == "kubernetes" and s.kube is None:
        out.checks.append(Check("kubeconfig", False, "the node's pool is served by Kubernetes and no kubeconfig "
                                                     "was given: set RACKLIFE_KUBECONFIG or KUBECONFIG"))
        return out
    if pool.scheduler in ("slurm", "kubernetes"):
        out.checks.append(guard("no foreign drain or cordon", lambda: _foreign(node, pool, s)))
        if pool.scheduler == "slurm":
            out.checks.append(guard("not the last node Slurm has", lambda: _last_in_slurm(node)))
        busy = guard("no jobs or pods running", lambda: _busy(node, pool, s))
        if s.force and not busy.ok and not busy.detail.startswith("could not be read"):
            busy = Check(busy.name, True, f"--force: {busy.detail} (requeued or evicted)")
        out.checks.append(busy)
    if s.erase:
        why = unsupported_reason(rec.node(), Capability.ERASE)
        out.checks.append(Check("BMC can erase", why is None, why or f"{rec.node().bmc.driver}: Drive.SecureErase"))
        back = s.readback
        out.checks.append(Check("erase can be read back", back is not None,
                                f"maintenance boot of {back.image}, then nvme sanitize-log over SSH" if back
                                else s.readback_unavailable or "no boot server and SSH to read the drives back"))
    if s.reset_bmc:
        out.checks.append(guard("BMC can reset to defaults", lambda: _reset_support(store, node)))
    return out


def _reset_support(store: Store, node: str) -> str:
    from lifecycle.drivers.bmc.redfish import RedfishDriver
    from lifecycle.drivers.bmc.redfish_reset import reset_support
    from lifecycle.workflows.bmc_calls import open_bmc

    bmc = open_bmc(node, store)
    try:
        if not isinstance(bmc, RedfishDriver):
            return "the node's BMC speaks IPMI, which has no reset of its settings to defaults"
        return reset_support(bmc)
    finally:
        bmc.close()


def _busy(node: str, pool: Pool, s: DecommissionSettings) -> str:
    found = running(node, pool, s)
    return f"running: {', '.join(found)}" if found else ""


def touched(store: Store, node: str, s: DecommissionSettings) -> list[str]:
    """The jobs or pods a decommission would touch now (for ``--dry-run``), or why they cannot be listed."""
    try:
        pool = store.pool(store.get(node).pool)
        verb = "requeued" if pool.scheduler == "slurm" else "evicted"
        return [f"{w}: {verb if s.force else 'blocks the decommission (no --force)'}"
                for w in running(node, pool, s)]
    except DriverError as exc:
        return [f"(could not be listed: {exc.message})"]
    except Exception as exc:  # the dry run says so rather than fail with a traceback
        return [f"(could not be listed: {type(exc).__name__}: {exc})"]


def plan_lines(store: Store, node: str, s: DecommissionSettings) -> list[str]:
    rec = store.get(node)
    pool = store.pool(rec.pool)
    lines = ["pre-checks"]
    if pool.scheduler == "slurm":
        lines += [f"leave Slurm: drain{', requeue its jobs' if s.force else ''}",
                  "remove it from Slurm: down with racklife's reason, out of every partition, out of slurm.conf "
                  + ("through the site hook" if s.slurm_conf_cmd else "(no hook set: only where Slurm allows it "
                                                                      "at run time)")]
    elif pool.scheduler == "kubernetes":
        lines.append(f"leave Kubernetes: cordon{', evict its pods' if s.force else ''}")
    if s.erase:
        image = s.readback.image if s.readback else "minimal"
        lines += [f"maintenance boot of the {image} image through the BMC and the boot server; read sampled "
                  "blocks of each drive over SSH (dd, sha256sum), with a seed chosen now",
                  "secure erase of every drive through the BMC, each Task followed to the end",
                  f"maintenance boot of the {image} image again; read each drive's NVMe Sanitize Status log "
                  "(nvme sanitize-log) and the same sampled blocks over SSH",
                  "write a signed erase certificate (an unverified erase stops here)"]
    lines.append("power off")
    if s.reset_bmc:
        lines.append("reset the BMC's settings to defaults (ResetAll: the last call to that BMC)")
    if pool.scheduler == "kubernetes":
        lines.append("delete its Kubernetes Node (after power off, so no kubelet registers it again)")
    lines.append("decommissioned (history kept; the name is free for another server)")
    return lines

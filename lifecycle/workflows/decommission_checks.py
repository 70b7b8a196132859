"""What a decommission needs before it touches anything: its settings, its pre-checks, what it would touch.

A decommission takes a server out of the fleet for good, so the checks fail
closed: a node whose scheduler cannot be read, a drain or cordon someone else
holds, jobs or pods still running without ``--force``, an erase asked of a BMC
that cannot erase (IPMI) — each refuses with its reason, and nothing
changes. They are plain functions so that ``--dry-run`` runs exactly the
checks the workflow runs (as one journaled step), without the engine.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
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
from lifecycle.workflows.kube_pool import KubeSettings
from lifecycle.workflows.kube_pool import driver as kube_driver

SLURM_CONF_CMD_ENV = "RACKLIFE_SLURM_CONF_CMD"
"""The site's hook that removes a node from slurm.conf and has slurmctld reread it (argv, node appended)."""

# States a node leaves its scheduler from first (drain, then decommission).
LEAVE_FIRST = frozenset({State.IN_SERVICE, State.DRAINING})


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


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str


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


def _guard(name: str, probe: Callable[[], str]) -> Check:
    """A check whose reading failed is a failed check (fail closed), never a pass."""
    try:
        problem = probe()
    except DriverError as exc:
        return Check(name, False, f"could not be read: {exc.message}")
    except Exception as exc:  # a broken kubeconfig, a client's own error: unknown is a failure
        return Check(name, False, f"could not be read: {type(exc).__name__}: {exc}")
    return Check(name, not problem, problem or "ok")


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
        out.checks.append(_guard("no foreign drain or cordon", lambda: _foreign(node, pool, s)))
        busy = _guard("no jobs or pods running", lambda: _busy(node, pool, s))
        if s.force and not busy.ok and not busy.detail.startswith("could not be read"):
            busy = Check(busy.name, True, f"--force: {busy.detail} (requeued or evicted)")
        out.checks.append(busy)
    if s.erase:
        why = unsupported_reason(rec.node(), Capability.ERASE)
        out.checks.append(Check("BMC can erase", why is None, why or f"{rec.node().bmc.driver}: Drive.SecureErase"))
    if s.reset_bmc:
        out.checks.append(_guard("BMC can reset to defaults", lambda: _reset_support(store, node)))
    return out


def _reset_support(store: Store, node: str) -> str:
    from lifecycle.drivers.bmc.factory import driver_for
    from lifecycle.drivers.bmc.redfish import RedfishDriver
    from lifecycle.drivers.bmc.redfish_reset import reset_support

    bmc = driver_for(store.get(node).node().bmc)
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
        lines += ["secure erase of every drive through the BMC, each Task followed to the end",
                  "read back each drive; write a signed erase certificate (an unverified erase stops here)"]
    lines.append("power off")
    if s.reset_bmc:
        lines.append("reset the BMC's settings to defaults (ResetAll: the last call to that BMC)")
    if pool.scheduler == "kubernetes":
        lines.append("delete its Kubernetes Node (after power off, so no kubelet registers it again)")
    lines.append("decommissioned (history kept; the name is free for another server)")
    return lines

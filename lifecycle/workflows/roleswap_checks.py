"""What a role swap needs before it touches anything: its settings, its pre-checks, what it would touch.

The checks fail closed: a source that cannot be read, a pool floor that would
be broken, a drain or cordon someone else holds, a target scheduler that does
not answer — each refuses the swap with its numbers, and nothing changes.
They are plain functions so that ``--dry-run`` runs exactly the checks the
workflow runs (as one journaled step), without the engine.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from lifecycle.drivers.errors import DriverError
from lifecycle.drivers.slurm.driver import SlurmDriver, foreign_hold, held_by_other
from lifecycle.drivers.slurm.leave import LEAVE_ALONE
from lifecycle.drivers.slurm.runner import CommandRunner
from lifecycle.model.inventory import Pool
from lifecycle.model.states import State
from lifecycle.model.vocab import KeepJobsPolicy
from lifecycle.store import Store, leases
from lifecycle.workflows.accept import AcceptSettings
from lifecycle.workflows.checks import Check, guard
from lifecycle.workflows.kube_pool import KubeSettings
from lifecycle.workflows.kube_pool import driver as kube_driver
from lifecycle.workflows.provision import ProvisionSettings

SCHEDULERS = ("slurm", "kubernetes")


@dataclass(frozen=True)
class SwapSettings:
    """One swap request; an argument of each run, so a recovered run has exactly what it started with."""

    target: str
    """The pool to move to (an inventory pool served by Slurm or Kubernetes)."""
    operator: str
    kube: KubeSettings
    accept: AcceptSettings
    """The re-test: acceptance of the one node, at the target pool's ``retest_level``."""
    role_cmd: tuple[str, ...] = ()
    """The site's role-switch hook (``RACKLIFE_NODE_ROLE_CMD``), when the schedulers differ."""
    policy: KeepJobsPolicy | None = None
    """Slurm leave policy (default: the source pool's)."""
    deadline_s: float | None = None
    """How long the leave may wait for jobs or PodDisruptionBudgets (default: the pool's drain deadline)."""
    batch: tuple[str, ...] = ()
    """Every node of this request: the floor counts them together."""
    register_timeout_s: float = 120.0
    reimage: str | None = None
    """With ``--reimage``: the target pool's image (``NAME`` or ``NAME:VERSION``), reprovisioned after the move."""
    provision: ProvisionSettings | None = None
    """The boot server's provisioning settings, when reimaging."""


@dataclass
class Checked:
    source: str
    checks: list[Check] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return bool(self.checks) and all(c.ok for c in self.checks)

    def refusal(self) -> str:
        return "; ".join(f"{c.name}: {c.detail}" for c in self.checks if not c.ok)

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "ok": self.ok, "checks": [asdict(c) for c in self.checks]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Checked:
        return cls(data["source"], [Check(**c) for c in data["checks"]])


def _slurm() -> SlurmDriver:
    return SlurmDriver(CommandRunner())


def _foreign(node: str, pool: Pool, s: SwapSettings) -> str:
    if pool.scheduler == "slurm":
        current = _slurm().node(node)
        return held_by_other(current, LEAVE_ALONE) if foreign_hold(current) is not None else ""
    kube = kube_driver(s.kube)
    try:
        current_k = kube.node(node)
        if current_k.unschedulable and current_k.owner.kind != "racklife":
            return f"Kubernetes: cordoned by {current_k.owner.describe()}; racklife leaves it"
        return ""
    finally:
        getattr(kube, "close", lambda: None)()


def _reachable(pool: Pool, s: SwapSettings) -> str:
    if pool.scheduler == "slurm":
        parts = _slurm().partitions()
        return "" if pool.partition in parts else f"Slurm has no partition {pool.partition!r}"
    kube = kube_driver(s.kube)
    try:
        kube.nodes()
        return ""
    finally:
        getattr(kube, "close", lambda: None)()


def prechecks(store: Store, node: str, s: SwapSettings) -> Checked:
    """Every pre-check of moving ``node`` to ``s.target``, each with its result (reads only)."""
    rec = store.get(node)
    out = Checked(rec.pool)
    try:
        source, target = store.pool(rec.pool), store.pool(s.target)
    except Exception as exc:  # StoreError: an unknown pool
        out.checks.append(Check("pools", False, str(exc)))
        return out
    in_other = rec.state is State.IN_SERVICE and rec.pool != s.target
    out.checks.append(Check(
        "in service in the other pool", in_other and source.scheduler in SCHEDULERS,
        f"in service in pool {rec.pool} ({source.scheduler})" if in_other and source.scheduler in SCHEDULERS
        else f"node is {rec.state.value} in pool {rec.pool}; a swap to {s.target} needs it in service in "
             "another scheduler's pool"))
    if target.scheduler not in SCHEDULERS:
        out.checks.append(Check("target pool", False, f"pool {s.target!r} has no scheduler ({target.scheduler})"))
        return out
    floor = leases.floor_count(store, rec.pool, {*s.batch, node})
    out.checks.append(Check("pool floor", floor.ok, floor.describe()))
    if source.scheduler in SCHEDULERS:
        out.checks.append(guard("no foreign drain or cordon", lambda: _foreign(node, source, s)))
    out.checks.append(guard(f"target scheduler reachable ({target.scheduler})", lambda: _reachable(target, s)))
    if source.scheduler != target.scheduler:
        out.checks.append(Check("role-switch hook", bool(s.role_cmd),
                                "set" if s.role_cmd else "no role-switch command: set $RACKLIFE_NODE_ROLE_CMD "
                                "(the node must stop serving one scheduler and start the other)"))
    return out


def touched(store: Store, node: str, s: SwapSettings) -> list[str]:
    """The jobs or pods the leave would touch now (for ``--dry-run``), or why they cannot be listed."""
    pool = store.pool(store.get(node).pool)
    try:
        if pool.scheduler == "slurm":
            policy = s.policy or pool.leave_policy
            return [f"job {j.job_id} ({j.name}, {j.user}): {'waited for' if policy == 'wait' else policy + 'd'}"
                    for j in _slurm().jobs_on([node]) if j.active]
        if pool.scheduler == "kubernetes":
            kube = kube_driver(s.kube)
            try:
                return [f"pod {p.key}: " + (f"left ({p.skip_reason})" if p.skip_reason else "evicted")
                        for p in kube.pods_on(node)]
            finally:
                getattr(kube, "close", lambda: None)()
    except DriverError as exc:
        return [f"(could not be listed: {exc.message})"]
    except Exception as exc:  # the dry run says so rather than fail with a traceback
        return [f"(could not be listed: {type(exc).__name__}: {exc})"]
    return []


PLAN = ("pre-checks", "leave the source ({source}: {leave})", "move the node to pool {target}",
        "switch role ({switch})", "reimage: {reimage}", "re-test: acceptance at level {level}",
        "join the target ({join})", "on failure: back to {source} if healthy (and not reimaged), else quarantined")


def plan_lines(store: Store, node: str, s: SwapSettings) -> list[str]:
    rec = store.get(node)
    source, target = store.pool(rec.pool), store.pool(s.target)
    leave = {"slurm": f"drain, policy {s.policy or source.leave_policy}",
             "kubernetes": "cordon, evict through the Eviction API"}.get(source.scheduler, "-")
    join = {"slurm": f"partition {target.partition}, resume racklife's drain",
            "kubernetes": "labels and taints, Ready with every GPU"}.get(target.scheduler, "-")
    switch = "none: same scheduler" if source.scheduler == target.scheduler else \
        f"{source.scheduler} -> {target.scheduler} through the role-switch hook"
    reimage = f"reprovision with {s.reimage}" if s.reimage else "none (no --reimage)"
    return [line.format(source=rec.pool, target=s.target, leave=leave, join=join, switch=switch,
                        level=s.accept.level, reimage=reimage) for line in PLAN]

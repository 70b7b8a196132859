"""The one door from a Pulumi resource to the fleet: the planner's plan and apply for one node.

A dynamic provider runs in Pulumi's provider host, a process of its own. It
reaches the fleet exactly as `racklife apply --nodes NODE` does: the store,
the planner's observation sources, one :class:`Controller` that runs the
workflows durably, and ``planner.apply`` restricted to the actions the
resource owns (a node resource stops at ``accepted``; its pool membership
joins it). So the CLI, Pulumi and Terraform can never disagree about what a
change does.

Before acting, the node is planned: if the resource's part of the plan holds
a step racklife has no workflow for yet (a pool's labels, a firmware update), or a
blocker (a foreign drain, a quarantine, running jobs under ``wait``), the
operation is refused with the planner's words and nothing is touched. A
half-done plan (a node drained for a reimage that cannot follow) would be
worse than a refusal.

The host serves up to four requests at once on threads; operations on
independent resources run side by side (at most ``racklife:parallel``), and
share the process's one workflow engine and one boot server
(:mod:`stacks.racklife_pulumi.shared`); the planner's leases keep two runs
off one node.
Settings come from the stack's provider configuration or the environment;
credentials never pass through here (BMC credentials are references the
drivers resolve from the environment; ``RACKLIFE_DB`` is read from the
environment only).
"""

from __future__ import annotations

import getpass
import os
import shlex
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from lifecycle.model import vocab
from lifecycle.model.inventory import Inventory
from lifecycle.model.redact import redact
from lifecycle.planner import observe
from lifecycle.planner.apply import ApplyReport, ApplySettings
from lifecycle.planner.assemble import RunnerSettings
from lifecycle.planner.durable import carry_out
from lifecycle.planner.fleet import UnknownNodes, plan_fleet, refresh
from lifecycle.planner.observed import Observation
from lifecycle.planner.plan import Action, NodePlan
from lifecycle.store import Store
from lifecycle.store.db import default_home
from stacks.racklife_pulumi.shared import SHARED


class FleetError(RuntimeError):
    """The fleet did not do what the resource asked; the message says why, in the planner's words.

    The engine shows it and may keep it in its logs, so it passes the redaction filter.
    """

    def __init__(self, message: str) -> None:
        super().__init__(redact(message))


@dataclass(frozen=True)
class EngineSettings:
    """How the provider host reaches the fleet: what `racklife apply` takes as options."""

    operator: str = field(default_factory=getpass.getuser)
    home: str | None = None  # RACKLIFE_HOME (the store and acceptance work dirs); None: the environment's
    level: vocab.Level = "quick"  # acceptance level of a node's first acceptance
    ssh_config: str = str(Path.home() / ".ssh" / "config")
    profile: str | None = None
    burnin_python: str = "python3"
    images_dir: str | None = None  # None: $RACKLIFE_HOME/images
    boot_listen: str = "127.0.0.1:8069"
    boot_url: str | None = None
    boot_timeout_s: float = 600.0
    kubeconfig: str | None = None
    role_cmd: str = ""  # the site's role-switch hook, for role swaps (shell words)
    slurm_conf_cmd: str = ""  # the site's slurm.conf hook, for decommissions (shell words)
    slurm_add_cmd: str = ""  # the site's registration hook: a node into slurm.conf (shell words)
    max_in_flight: int = 8
    parallel: int = 4  # operations at once in this provider host (the host serves four at a time)

    def runner(self, image: str | None) -> RunnerSettings:
        return RunnerSettings(operator=self.operator, home=default_home(),
                              images_dir=Path(self.images_dir) if self.images_dir else default_home() / "images",
                              level=self.level, ssh_config=Path(self.ssh_config), profile=self.profile,
                              burnin_python=self.burnin_python, max_in_flight=self.max_in_flight,
                              boot_listen=self.boot_listen, boot_url=self.boot_url, boot_timeout_s=self.boot_timeout_s,
                              image=image, kubeconfig=self.kubeconfig, role_cmd=tuple(shlex.split(self.role_cmd)),
                              slurm_conf_cmd=tuple(shlex.split(self.slurm_conf_cmd)),
                              actor=f"pulumi, by {self.operator}")


# setting -> (the provider configuration key, the environment variable, the parse). None: no such source.
SOURCES: dict[str, tuple[str | None, str | None, Callable[[str], object]]] = {
    "operator": ("operator", None, str),
    "home": ("home", "RACKLIFE_HOME", str),
    "level": ("level", None, vocab.level),
    "ssh_config": ("sshConfig", "RACKLIFE_SSH_CONFIG", str),
    "profile": ("profile", "RACKLIFE_BURNIN_PROFILE", str),
    "burnin_python": ("burninPython", "RACKLIFE_BURNIN_PYTHON", str),
    "images_dir": ("imagesDir", None, str),
    "boot_listen": ("bootListen", "RACKLIFE_BOOT_LISTEN", str),
    "boot_url": ("bootUrl", "RACKLIFE_BOOT_URL", str),
    "boot_timeout_s": ("bootTimeoutS", "RACKLIFE_BOOT_TIMEOUT_S", float),
    "kubeconfig": ("kubeconfig", "RACKLIFE_KUBECONFIG", str),
    "role_cmd": (None, "RACKLIFE_NODE_ROLE_CMD", str),
    "slurm_conf_cmd": (None, "RACKLIFE_SLURM_CONF_CMD", str),
    "slurm_add_cmd": (None, "RACKLIFE_SLURM_ADD_CMD", str),
    "max_in_flight": ("maxInFlight", None, int),
    "parallel": ("parallel", None, int),
}


def settings_from(config: Callable[[str], object | None], env: Mapping[str, str]) -> EngineSettings:
    """Settings from the provider configuration (``config(key)``) first, then the environment.

    Raises ``ValueError`` naming the key of a value that does not parse.
    """
    values: dict[str, object] = {}
    for name, (key, var, parse) in SOURCES.items():
        raw = config(key) if key is not None else None
        if raw is None and var is not None:
            raw = env.get(var)
        if name == "kubeconfig" and raw is None:
            raw = env.get("KUBECONFIG")
        if raw is None or raw == "":
            continue
        try:
            values[name] = parse(str(raw))
        except ValueError as exc:
            why = "not a number" if parse in (int, float) else str(exc)
            raise ValueError(f"{f'racklife:{key}' if key else var}: {why}: {raw!r}") from None
    got = EngineSettings(**values)  # type: ignore[arg-type]  # each value parsed for its field above
    if not 1 <= got.parallel <= 4:
        raise ValueError(f"racklife:parallel must be 1 to 4 (the provider host serves four at a time), "
                         f"not {got.parallel}")
    return got


@contextmanager
def _store(s: EngineSettings) -> Iterator[Store]:
    if s.home:
        os.environ["RACKLIFE_HOME"] = s.home  # the host process serves this stack only
    store = Store()
    try:
        yield store
    finally:
        store.close()


def _sources() -> observe.Sources:
    return observe.default_sources(firmware=False)


def observed(s: EngineSettings, node: str) -> Observation | None:
    """The node as every source sees it now (the planner's refresh), or None when the store lacks it."""
    with SHARED.slot(s.parallel), _store(s) as store:
        try:
            fresh = refresh(store, None, [node], _sources())
        except UnknownNodes:
            return None
    return next((o for o in fresh.observations if o.node == node), None)


def observed_in_slurm(s: EngineSettings, node: str) -> Observation | None:
    """The node as every source sees it now, Slurm read whatever its pool (a registration is Slurm's view
    of it, before or apart from its membership); not stored. None when the store lacks it."""
    with SHARED.slot(s.parallel), _store(s) as store:
        rec = next((r for r in store.nodes() if r.name == node), None)
        if rec is None:
            return None
        return observe.observe(store, [rec], _sources(), {node: "slurm"})[0]


def planned(s: EngineSettings, inv: Inventory, node: str) -> NodePlan:
    """The planner's plan for the node against ``inv`` (nothing changes)."""
    with SHARED.slot(s.parallel), _store(s) as store:
        return _node_plan(store, inv, node)


def _node_plan(store: Store, inv: Inventory, node: str) -> NodePlan:
    return next(n for n in plan_fleet(store, inv, [node], _sources()).nodes if n.node == node)


def _refusal(p: NodePlan, only: frozenset[Action]) -> str | None:
    """Why the resource's part of the plan cannot be carried out, or None."""
    if p.blockers:
        return "; ".join(f"blocked ({b.kind}): {b.message}" for b in p.blockers)
    missing = [s.describe() for s in p.steps if s.action in only and not s.implemented]
    if missing:
        return "racklife cannot carry this out yet: " + "; ".join(missing) + " (nothing was changed)"
    return None


def converge(s: EngineSettings, inv: Inventory, node: str, only: frozenset[Action],
             say: Callable[[str], None] = lambda _m: None) -> NodePlan:
    """Apply the plan's ``only`` actions for ``node``; the node's plan afterwards.

    Raises :class:`FleetError` when the plan refuses, a step fails, or a step of ``only`` remains.
    """
    with SHARED.slot(s.parallel), _store(s) as store:
        before = _node_plan(store, inv, node) if node in {r.name for r in store.nodes()} else None
        if before is not None and (why := _refusal(before, only)) is not None:
            raise FleetError(f"{node}: {why}")
        image = inv.node(node).image if node in {n.name for n in inv.nodes} else None
        with SHARED.controller(say, f"pulumi, by {s.operator}") as ctl:  # a live racklife serve runs the apply
            report = carry_out(ctl, store, inv, [node], _sources(), s.runner(image),
                               ApplySettings(s.operator, s.max_in_flight), say=say, only=only,
                               boot_server=SHARED.boot_server)
    return _outcome(node, report, only)


def _outcome(node: str, report: ApplyReport, only: frozenset[Action]) -> NodePlan:
    failed = [f"{d.action.value} failed (run {d.run_id or '-'}): {d.detail}" for d in report.done
              if d.node == node and not d.ok]
    if failed:
        raise FleetError(f"{node}: " + "; ".join(failed))
    if node in report.skipped:
        raise FleetError(f"{node}: {report.skipped[node]}")
    final = next((n for n in report.final.nodes if n.node == node), None) if report.final else None
    if final is None and Action.DECOMMISSION in only:
        return NodePlan(node, "decommissioned")  # the plan leaves out a decommissioned node: nothing left to do
    if final is None:
        raise FleetError(f"{node}: not in the plan after apply")
    why = _refusal(final, only)
    if why is not None:
        raise FleetError(f"{node}: {why}")
    left = [f"{s.describe()} ({s.reason})" for s in final.steps if s.action in only]
    if left:
        done = [f"{d.action.value} {'ok' if d.ok else 'failed'}" for d in report.done if d.node == node]
        stopped = f"; blocked when the apply stopped: {report.blocked[node]}" if node in report.blocked else ""
        raise FleetError(f"{node}: not converged ({final.state}); still to do: " + "; ".join(left)
                         + f"; this apply did: {', '.join(done) or 'nothing'}{stopped}")
    return final


def leave(s: EngineSettings, node: str, why: str) -> str:
    """Take the node out of its pool's scheduler with racklife's own drain or cordon (the pool's policy).

    The planner has no "member of no pool" state to plan towards, so this runs the same leave
    workflows `racklife slurm leave` and the role swap use, through the one Controller.
    """
    from lifecycle.workflows import kube_pool, slurm_pool

    with SHARED.slot(s.parallel), _store(s) as store:
        rec = store.get(node)
        pool = store.pool(rec.pool)
        if rec.state.value not in ("in_service", "draining"):
            return f"{node} is {rec.state.value}: not serving a scheduler, nothing to leave"
        with SHARED.controller(lambda _m: None, f"pulumi, by {s.operator}") as ctl:
            if pool.scheduler == "slurm":
                handle = ctl.start(slurm_pool.leave_node, node, None, None, why[:200], nodes=[node])
            elif pool.scheduler == "kubernetes":
                if not s.kubeconfig:
                    raise FleetError(f"{node}: no kubeconfig (racklife:kubeconfig, RACKLIFE_KUBECONFIG or "
                                     "KUBECONFIG): cannot leave Kubernetes")
                kube = kube_pool.KubeSettings(str(Path(s.kubeconfig).resolve()))
                handle = ctl.start(kube_pool.leave_kube_node, node, float(pool.drain_deadline_s), why[:200], kube,
                                   nodes=[node])
            else:
                return f"{node}: pool {rec.pool} has no scheduler"
            result = handle.get_result()
    if not result.get("ok"):
        raise FleetError(f"{node}: leave failed: {result.get('reason') or result.get('state')}")
    return str(result.get("reason") or result.get("state"))


def reimport(s: EngineSettings, inv: Inventory) -> None:
    """Import the one-node inventory (a changed BMC, NICs, labels …); the store refuses it while a scheduler
    uses the node."""
    from lifecycle.model.states import Actor
    from lifecycle.store.store import ImportRefused

    with SHARED.slot(s.parallel), _store(s) as store:
        try:
            store.import_inventory(inv, Actor.OPERATOR, f"pulumi up, by {s.operator}")
        except ImportRefused as exc:
            raise FleetError("; ".join(exc.problems)) from None


def register_slurm(s: EngineSettings, node: str, partition: str) -> str:
    """Slurm's configuration lists the node in the partition (the site's registration hook where it does not)."""
    from lifecycle.model.states import State
    from lifecycle.workflows import slurm_conf

    with SHARED.slot(s.parallel), _store(s) as store:
        rec = next((r for r in store.nodes() if r.name == node), None)
        if rec is None or rec.state is State.DECOMMISSIONED:
            why = "decommissioned" if rec is not None else "not in racklife's store"
            raise FleetError(f"{node}: {why}: racklife registers in Slurm only a node of its fleet")
        try:
            return slurm_conf.register(rec.node(), partition, tuple(shlex.split(s.slurm_add_cmd)))
        except slurm_conf.SlurmConfError as exc:
            raise FleetError(str(exc)) from None


def unregister_slurm(s: EngineSettings, node: str) -> str:
    """Out of Slurm's configuration (the decommission's hook), refused while jobs run on the node."""
    from lifecycle.workflows import slurm_conf

    with SHARED.slot(s.parallel):
        try:
            return slurm_conf.unregister(node, tuple(shlex.split(s.slurm_conf_cmd)))
        except slurm_conf.SlurmConfError as exc:
            raise FleetError(str(exc)) from None

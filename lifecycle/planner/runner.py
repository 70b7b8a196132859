"""The apply runner: each planned action as durable workflow runs, through the one Controller.

A table maps each action the runner can carry out to how: ``join`` (Slurm),
``join-kubernetes``, ``move-pool`` (a role swap), ``reimage`` (leave,
reprovision with the inventory's image and version, re-test at the pool's
``retest_level``, rejoin: ``changes.change_node``, with the embedded boot
server up), ``leave``, ``power-on`` and ``decommission`` (a node removed from
the inventory: no erase, no force, so running work refuses it) are one run
per node, started together (bounded by ``max_in_flight``) and
awaited; ``accept`` is one run for the wave's nodes, so its multi-node checks
can pair them; ``provision`` is one provisioning run (bounded by its queue)
with the embedded boot server up for its duration.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from lifecycle.planner.apply import Done
from lifecycle.planner.plan import Action
from lifecycle.store import Store
from lifecycle.workflows import accept, changes, decommission, kube_pool, power, roleswap, slurm_pool
from lifecycle.workflows.boot_run import BootSettings, BootSetupError, boot_server, provision_nodes
from lifecycle.workflows.controller import Controller
from lifecycle.workflows.decommission_checks import DecommissionSettings
from lifecycle.workflows.roleswap_checks import SwapSettings


@dataclass
class WorkflowRunner:
    ctl: Controller
    accept_settings: Callable[[str], accept.AcceptSettings]  # run id -> its settings (work dirs per run)
    store: Store
    boot: BootSettings | None  # None: apply does not provision (no images given)
    max_in_flight: int = 8
    power: power.PowerOnSettings = field(default_factory=power.PowerOnSettings)
    kube: kube_pool.KubeSettings | None = None  # None: no kubeconfig, so no Kubernetes join
    move_to: Mapping[str, str] = field(default_factory=dict)  # node -> the pool the inventory gives it
    role_cmd: tuple[str, ...] = ()  # the site's role-switch hook, for role swaps
    slurm_conf_cmd: tuple[str, ...] = ()  # the site's slurm.conf hook, for decommissions
    operator: str = "racklife apply"
    context: changes.ChangeContext = field(default_factory=changes.ChangeContext)  # set while the boot server runs
    targets: dict[str, str] = field(default_factory=dict)  # node -> NAME[:VERSION], set for a reimage wave
    say: Callable[[str], None] = lambda _m: None

    def run(self, action: Action, nodes: Sequence[str], reasons: Mapping[str, str],
            targets: Mapping[str, str] | None = None) -> list[Done]:
        if action in (Action.JOIN_KUBE, Action.MOVE_POOL) and self.kube is None:
            return [Done(n, action, False, "", "no kubeconfig: set RACKLIFE_KUBECONFIG or KUBECONFIG") for n in nodes]
        how = _PER_NODE.get(action)
        if how is not None:
            return self._per_node(action, nodes, reasons, how)
        if action is Action.ACCEPT:
            return self._accept(nodes)
        if action is Action.PROVISION and self.boot is not None:
            return self._provision(nodes)
        if action is Action.REIMAGE:
            return self._reimage(nodes, reasons, targets or {})
        return [Done(n, action, False, "", f"apply cannot carry out {action.value} yet: run "
                                           f"`racklife {action.value}` for it") for n in nodes]

    def _per_node(self, action: Action, nodes: Sequence[str], reasons: Mapping[str, str],
                  how: Callable[[WorkflowRunner, str, str], tuple[Callable[..., Any], tuple[Any, ...]]]) -> list[Done]:
        out: list[Done] = []
        for i in range(0, len(nodes), self.max_in_flight):
            started = []
            for n in nodes[i:i + self.max_in_flight]:
                func, args = how(self, n, reasons.get(n, ""))
                started.append((n, self.ctl.start(func, *args, nodes=[n])))
            for n, handle in started:
                result: dict[str, Any] = handle.get_result()
                out.append(Done(n, action, bool(result.get("ok")), handle.get_workflow_id(),
                                str(result.get("reason") or result.get("state") or "")))
        return out

    def _provision(self, nodes: Sequence[str]) -> list[Done]:
        assert self.boot is not None
        try:
            with boot_server(self.store, self.boot, here=self.ctl.service is None) as boot:
                run_id, outcomes = provision_nodes(self.ctl, boot, list(nodes), self.max_in_flight, self.say,
                                                   adopt=False)
        except BootSetupError as exc:
            return [Done(n, Action.PROVISION, False, "", str(exc)) for n in nodes]
        return [Done(o["node"], Action.PROVISION, bool(o["ok"]), run_id, o["reason"] or o["state"]) for o in outcomes]

    def _reimage(self, nodes: Sequence[str], reasons: Mapping[str, str], targets: Mapping[str, str]) -> list[Done]:
        if self.boot is None:
            return [Done(n, Action.REIMAGE, False, "", "no built images: give --images") for n in nodes]
        missing = [n for n in nodes if n not in targets]
        if missing:
            return [Done(n, Action.REIMAGE, False, "", "the plan names no image for it") for n in missing]
        try:
            with boot_server(self.store, self.boot) as boot:
                self.context = changes.ChangeContext(provision=boot.settings)
                self.targets = dict(targets)
                return self._per_node(Action.REIMAGE, nodes, reasons, _reimage)
        except BootSetupError as exc:
            return [Done(n, Action.REIMAGE, False, "", str(exc)) for n in nodes]
        finally:
            self.context = changes.ChangeContext()

    def _accept(self, nodes: Sequence[str]) -> list[Done]:
        run_id = f"accept-{os.urandom(6).hex()}"
        cfg = self.accept_settings(run_id)
        handle = self.ctl.start(accept.accept_nodes, list(nodes), cfg, workflow_id=run_id, nodes=nodes)
        verdicts: list[dict[str, Any]] = handle.get_result()
        return [Done(v["node"], Action.ACCEPT, bool(v["passed"]), run_id,
                     "; ".join(v["reasons"])[:300] or v["state"]) for v in verdicts]


def _join(r: WorkflowRunner, node: str, why: str) -> tuple[Callable[..., Any], tuple[Any, ...]]:
    return slurm_pool.join_node, (node,)


def _join_kube(r: WorkflowRunner, node: str, why: str) -> tuple[Callable[..., Any], tuple[Any, ...]]:
    return kube_pool.join_kube_node, (node, r.kube)


def _move_pool(r: WorkflowRunner, node: str, why: str) -> tuple[Callable[..., Any], tuple[Any, ...]]:
    """A changed pool is a role swap, with the target pool's re-test level."""
    assert r.kube is not None
    target = r.move_to[node]
    cfg = r.accept_settings(f"role-swap-{os.urandom(6).hex()}")
    cfg = replace(cfg, level=r.store.pool(target).retest_level, multi_node=False, max_in_flight=1)
    return roleswap.role_swap, (node, SwapSettings(target=target, operator=cfg.operator, kube=r.kube, accept=cfg,
                                                   role_cmd=r.role_cmd))


def retest_settings(r: WorkflowRunner, node: str, prefix: str) -> accept.AcceptSettings:
    """The one-node re-test of a node taken out of service: its pool's ``retest_level``, no pairing."""
    cfg = r.accept_settings(f"{prefix}-{os.urandom(6).hex()}")
    return replace(cfg, level=r.store.pool(r.store.get(node).pool).retest_level, multi_node=False, max_in_flight=1)


def _reimage(r: WorkflowRunner, node: str, why: str) -> tuple[Callable[..., Any], tuple[Any, ...]]:
    """A changed image is one change run: leave, reprovision, re-test, rejoin."""
    cfg = retest_settings(r, node, "reimage")
    spec = changes.ChangeSpec(changes.ChangeKind.IMAGE, r.targets[node])
    return changes.change_node, (node, changes.ChangeSettings(
        (spec,), cfg.operator, cfg, r.context, kube=r.kube, why=f"racklife apply: reimage with {spec.target}"))


def _leave(r: WorkflowRunner, node: str, why: str) -> tuple[Callable[..., Any], tuple[Any, ...]]:
    return slurm_pool.leave_node, (node, None, None, f"racklife apply: {why}"[:200])


def _decommission(r: WorkflowRunner, node: str, why: str) -> tuple[Callable[..., Any], tuple[Any, ...]]:
    """A node the inventory no longer lists: decommissioned without erase, never through running work."""
    return decommission.decommission_node, (node, DecommissionSettings(
        operator=r.operator, reason=f"racklife apply: {why}"[:200], kube=r.kube, slurm_conf_cmd=r.slurm_conf_cmd))


def _power_on(r: WorkflowRunner, node: str, why: str) -> tuple[Callable[..., Any], tuple[Any, ...]]:
    return power.power_on_node, (node, replace(r.power))


_PER_NODE: dict[Action, Callable[[WorkflowRunner, str, str], tuple[Callable[..., Any], tuple[Any, ...]]]] = {
    Action.JOIN: _join,
    Action.JOIN_KUBE: _join_kube,
    Action.MOVE_POOL: _move_pool,
    Action.LEAVE: _leave,
    Action.POWER_ON: _power_on,
    Action.DECOMMISSION: _decommission,
}

"""The apply runner: each planned action as durable workflow runs, through the one Controller.

A table maps each action the runner can carry out to how: ``join`` (Slurm),
``join-kubernetes``, ``move-pool`` (a role swap), ``reimage`` (leave,
reprovision with the inventory's image and version, re-test at the pool's
``retest_level``, rejoin: ``changes.change_node``, with the embedded boot
server up), ``update-firmware`` (the same run with a firmware change per
component below the baseline: the inventory's image through the BMC's
UpdateService, the version read back), ``update-driver`` (the same run with
the rolling upgrade's driver change: the site's install hook, a power cycle, the
re-test reading the version from the node's GPUs), ``set-bios`` (the same run
with its BIOS change: Bios/Settings, the reboot, the values read back),
``leave``, ``power-on`` and ``decommission`` (a node removed from the
inventory: no erase, no force, so running work refuses it) are one run per node,
started together (bounded by ``max_in_flight``) and
awaited; ``accept`` is one run for the wave's nodes, so its multi-node checks
can pair them; ``provision`` is one provisioning run (bounded by its queue)
with the embedded boot server up for its duration.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from typing import Any

from lifecycle.planner.apply import Done
from lifecycle.planner.plan import Action, Step
from lifecycle.store import Store
from lifecycle.workflows import accept, changes, decommission, kube_pool, power, roleswap, slurm_pool
from lifecycle.workflows.boot_run import Boot, BootSettings, BootSetupError, boot_server, provision_nodes
from lifecycle.workflows.controller import Starter
from lifecycle.workflows.decommission_checks import DecommissionSettings
from lifecycle.workflows.roleswap_checks import SwapSettings

# (store, settings, here) -> the boot server for a wave: ``here`` False when the runs go to ``racklife serve``.
BootServerFactory = Callable[[Store, BootSettings, bool], AbstractContextManager[Boot]]


@dataclass
class WorkflowRunner:
    ctl: Starter
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
    planned: dict[str, Step] = field(default_factory=dict)  # node -> its planned step, set for a change's wave
    bios_timeout_s: float = 900.0  # how long a set-bios waits for the live Bios to read the values back
    say: Callable[[str], None] = lambda _m: None
    new_id: Callable[[str], str] = lambda prefix: f"{prefix}-{os.urandom(6).hex()}"
    """A fresh run id (a journaled step inside a durable apply, so a recovered run names the same runs)."""
    boot_server: BootServerFactory = boot_server  # a process serving many applies at once shares one

    def run(self, action: Action, nodes: Sequence[str], reasons: Mapping[str, str],
            targets: Mapping[str, str] | None = None, planned: Mapping[str, Step] | None = None) -> list[Done]:
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
        if action in _CHANGES:
            has, what = _PLANNED[action]
            return self._planned_change(action, nodes, reasons, planned or {}, has, what)
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
            with self.boot_server(self.store, self.boot, self.ctl.service is None) as boot:
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
            with self.boot_server(self.store, self.boot, self.ctl.service is None) as boot:
                self.context = changes.ChangeContext(provision=boot.settings)
                self.targets = dict(targets)
                return self._per_node(Action.REIMAGE, nodes, reasons, _reimage)
        except BootSetupError as exc:
            return [Done(n, Action.REIMAGE, False, "", str(exc)) for n in nodes]
        finally:
            self.context = changes.ChangeContext()

    def _planned_change(self, action: Action, nodes: Sequence[str], reasons: Mapping[str, str],
                        planned: Mapping[str, Step], has: Callable[[Step], bool], what: str) -> list[Done]:
        """A change the plan spelled out (firmware components, a driver version, BIOS attributes) as one
        change run per node; a node whose planned step names none of it is refused, nothing started."""
        without = [n for n in nodes if n not in planned or not has(planned[n])]
        if without:
            return [Done(n, action, False, "", f"the plan names no {what} for it") for n in without]
        self.planned = {n: planned[n] for n in nodes}
        try:
            return self._per_node(action, nodes, reasons, _CHANGES[action])
        finally:
            self.planned = {}

    def _accept(self, nodes: Sequence[str]) -> list[Done]:
        run_id = self.new_id("accept")
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
    cfg = r.accept_settings(r.new_id("role-swap"))
    cfg = replace(cfg, level=r.store.pool(target).retest_level, multi_node=False, max_in_flight=1)
    return roleswap.role_swap, (node, SwapSettings(target=target, operator=cfg.operator, kube=r.kube, accept=cfg,
                                                   role_cmd=r.role_cmd))


def retest_settings(r: WorkflowRunner, node: str, prefix: str) -> accept.AcceptSettings:
    """The one-node re-test of a node taken out of service: its pool's ``retest_level``, no pairing."""
    cfg = r.accept_settings(r.new_id(prefix))
    return replace(cfg, level=r.store.pool(r.store.get(node).pool).retest_level, multi_node=False, max_in_flight=1)


def _reimage(r: WorkflowRunner, node: str, why: str) -> tuple[Callable[..., Any], tuple[Any, ...]]:
    """A changed image is one change run: leave, reprovision, re-test, rejoin."""
    cfg = retest_settings(r, node, "reimage")
    spec = changes.ChangeSpec(changes.ChangeKind.IMAGE, r.targets[node])
    return changes.change_node, (node, changes.ChangeSettings(
        (spec,), cfg.operator, cfg, r.context, kube=r.kube, why=f"racklife apply: reimage with {spec.target}"))


def _update_firmware(r: WorkflowRunner, node: str, why: str) -> tuple[Callable[..., Any], tuple[Any, ...]]:
    """A baseline the BMC does not match is one change run: leave, update each component, re-test, rejoin."""
    cfg = retest_settings(r, node, "firmware")
    parts = r.planned[node].firmware
    specs = tuple(changes.ChangeSpec(changes.ChangeKind.FIRMWARE, f.component, (("file", f.file),
                                                                               ("version", f.version)))
                  for f in parts)
    return changes.change_node, (node, changes.ChangeSettings(
        specs, cfg.operator, cfg, changes.ChangeContext(), kube=r.kube,
        why=f"racklife apply: firmware {', '.join(f'{f.component} {f.version}' for f in parts)}"[:200]))


def _update_driver(r: WorkflowRunner, node: str, why: str) -> tuple[Callable[..., Any], tuple[Any, ...]]:
    """A driver the node's GPUs do not report is one change run: leave, the site's install hook, a power cycle,
    a re-test that must read the version from the node's GPUs, rejoin (the rolling upgrade's ``driver`` row)."""
    cfg = retest_settings(r, node, "driver")
    version = r.planned[node].target
    return changes.change_node, (node, changes.ChangeSettings(
        (changes.ChangeSpec(changes.ChangeKind.DRIVER, version),), cfg.operator, cfg,
        changes.ChangeContext(ssh_config=cfg.ssh_config), kube=r.kube, why=f"racklife apply: driver {version}"))


def _set_bios(r: WorkflowRunner, node: str, why: str) -> tuple[Callable[..., Any], tuple[Any, ...]]:
    """BIOS attributes the BMC does not read are one change run: leave, Bios/Settings, the reboot that applies
    them, the values read back, re-test, rejoin; undone (the old values set back) when a step fails."""
    cfg = retest_settings(r, node, "bios")
    step = r.planned[node]
    return changes.change_node, (node, changes.ChangeSettings(
        (changes.ChangeSpec(changes.ChangeKind.BIOS, step.target, step.bios),), cfg.operator, cfg,
        changes.ChangeContext(ssh_config=cfg.ssh_config, bios_timeout_s=r.bios_timeout_s), kube=r.kube,
        why=f"racklife apply: BIOS {step.target}"[:200]))


def _leave(r: WorkflowRunner, node: str, why: str) -> tuple[Callable[..., Any], tuple[Any, ...]]:
    return slurm_pool.leave_node, (node, None, None, f"racklife apply: {why}"[:200])


def _decommission(r: WorkflowRunner, node: str, why: str) -> tuple[Callable[..., Any], tuple[Any, ...]]:
    """A node the inventory no longer lists: decommissioned without erase, never through running work."""
    return decommission.decommission_node, (node, DecommissionSettings(
        operator=r.operator, reason=f"racklife apply: {why}"[:200], kube=r.kube, slurm_conf_cmd=r.slurm_conf_cmd))


def _power_on(r: WorkflowRunner, node: str, why: str) -> tuple[Callable[..., Any], tuple[Any, ...]]:
    return power.power_on_node, (node, replace(r.power))


# The changes the plan spells out in its step, each one change_node run per node.
_CHANGES: dict[Action, Callable[[WorkflowRunner, str, str], tuple[Callable[..., Any], tuple[Any, ...]]]] = {
    Action.UPDATE_FIRMWARE: _update_firmware,
    Action.UPDATE_DRIVER: _update_driver,
    Action.SET_BIOS: _set_bios,
}
# What each planned step must name, and what the refusal calls it.
_PLANNED: dict[Action, tuple[Callable[[Step], bool], str]] = {
    Action.UPDATE_FIRMWARE: (lambda s: bool(s.firmware), "firmware component"),
    Action.UPDATE_DRIVER: (lambda s: bool(s.target), "driver version"),
    Action.SET_BIOS: (lambda s: bool(s.bios), "BIOS attribute"),
}

_PER_NODE: dict[Action, Callable[[WorkflowRunner, str, str], tuple[Callable[..., Any], tuple[Any, ...]]]] = {
    Action.JOIN: _join,
    Action.JOIN_KUBE: _join_kube,
    Action.MOVE_POOL: _move_pool,
    Action.LEAVE: _leave,
    Action.POWER_ON: _power_on,
    Action.DECOMMISSION: _decommission,
}

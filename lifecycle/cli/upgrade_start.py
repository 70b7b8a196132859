"""Starting and adopting an upgrade run: the request's checks, the nodes and batches, the boot server, the run.

Kept apart from the command definitions (``lifecycle.cli.upgrade``) so each
stays one idea: this module turns a typed :class:`Request` into the run's
settings (fail closed: unknown nodes or pools, an image the boot server does
not have, no room in a pool's limits — each refused before anything
changes), prints the dry run, and starts or adopts the durable run.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import typer

from lifecycle.cli._common import BAD_INPUT, REFUSED, emit_json, err_console, fail, out_console
from lifecycle.cli._runs import check_no_wait, controller, leave_running, progress
from lifecycle.cli.upgrade import finish, follow
from lifecycle.model.limits import Unavailable
from lifecycle.model.states import State
from lifecycle.model.vocab import KeepJobsPolicy, Level
from lifecycle.store import NodeNotFound, Store, StoreError
from lifecycle.store.db import default_home
from lifecycle.workflows.accept import AcceptSettings
from lifecycle.workflows.boot_run import BootSettings, BootSetupError, boot_server
from lifecycle.workflows.changes import ChangeContext, ChangeKind, ChangeSettings, ChangeSpec, has, unsupported
from lifecycle.workflows.upgrade import UpgradeSettings, Window
from lifecycle.workflows.upgrade_batches import Member, NoRoom, PoolNow, Threshold, plan_batches, pool_now


@dataclass(frozen=True)
class Request:
    pool: str | None
    nodes: tuple[str, ...]
    change: ChangeSpec
    limit: Unavailable
    canary: int
    policy: KeepJobsPolicy | None
    deadline_s: float | None
    window: Window | None
    auto_continue: bool
    threshold: Threshold
    operator: str

    @staticmethod
    def parse(*, pool: str | None, nodes: str | None, image: str | None, max_unavailable: str, canary: int,
              policy: KeepJobsPolicy | None, deadline_s: float | None, window: str | None, auto_continue: bool,
              halt_after: str, operator: str, change: ChangeSpec | None = None) -> Request:
        """The request, or a ValueError naming the option at fault (``change``: a firmware or BIOS
        change instead of ``image``)."""
        if change is None:
            image = image or ""
            name, _, version = image.partition(":")
            if not name or (":" in image and not version):
                raise ValueError(f"--image must be NAME or NAME:VERSION, not {image!r}")
            change = ChangeSpec(ChangeKind.IMAGE, image)
        text = halt_after.strip()
        try:
            percent = float(text.removesuffix("%"))
        except ValueError:
            percent = -1.0
        if not text.endswith("%") or not 0 <= percent <= 100:
            raise ValueError(f"--halt-after must be P% (0 <= P <= 100), not {halt_after!r}")
        names = tuple(dict.fromkeys(n for n in (nodes or "").split(",") if n))
        if nodes is not None and not names:
            raise ValueError("--nodes names no node")
        return Request(pool, names, change, Unavailable.parse(max_unavailable), canary,
                       policy, deadline_s, Window.parse(window) if window is not None else None, auto_continue,
                       Threshold(after_percent=percent), operator)


@dataclass
class Selection:
    members: list[Member]
    skipped: dict[str, str]  # node -> why it is left out
    pools: dict[str, PoolNow]


def select(store: Store, req: Request) -> Selection:
    """The nodes to change, in order, and the ones left out with why; StoreError/NodeNotFound: bad input."""
    if req.pool is not None:
        store.pool(req.pool)
        records = sorted(store.nodes(pool=req.pool), key=lambda r: r.name)
        if not records:
            raise StoreError(f"pool {req.pool!r} has no nodes")
    else:
        records = [store.get(n) for n in req.nodes]
    members: list[Member] = []
    skipped: dict[str, str] = {}
    for r in records:
        cannot = unsupported(r.node(), req.change)
        if r.state is not State.IN_SERVICE:
            skipped[r.name] = f"{r.state.value}: only a node in service is upgraded"
        elif cannot is not None:  # its BMC lacks the interface (IPMI for firmware and BIOS)
            skipped[r.name] = cannot
        elif has(store, r.name, req.change):
            skipped[r.name] = f"already on {req.change.target}"
        else:
            members.append(Member(r.name, r.pool))
    pools = {p: pool_now(store, p) for p in sorted({r.pool for r in records})}
    return Selection(members, skipped, pools)


def boot_settings(images_dir: Path | None, listen: str, url: str | None, timeout_s: float) -> BootSettings:
    return BootSettings(images_dir or default_home() / "images", listen, url, timeout_s)


def accept_template(operator: str, ssh_config: Path, profile: str | None, burnin_python: str) -> AcceptSettings:
    """Each node's re-test: one node, no pairing; the level and work directory are set per node."""
    work = default_home() / "acceptance" / f"upgrade-{os.urandom(6).hex()}"
    return AcceptSettings(level="quick", work_dir=str(work), report_dir=str(work / "reports"), operator=operator,
                          ssh_config=str(ssh_config.resolve()), profile=profile, burnin_python=burnin_python,
                          max_in_flight=1, multi_node=False)


def _kube(kubeconfig: Path | None, pools: dict[str, PoolNow], store: Store) -> Any:
    from lifecycle.workflows.kube_pool import KubeSettings

    if kubeconfig is not None and kubeconfig.is_file():
        return KubeSettings(str(kubeconfig.resolve()))
    wanted = [p for p in pools if store.pool(p).scheduler == "kubernetes"]
    if wanted:
        fail(f"pool(s) {', '.join(wanted)} are served by Kubernetes: give --kubeconfig or set RACKLIFE_KUBECONFIG "
             "or KUBECONFIG", BAD_INPUT)
    return None


def start(req: Request, boot: BootSettings, accept: AcceptSettings, kubeconfig: Path | None, dry_run: bool,
          as_json: bool, no_wait: bool = False) -> None:
    if not dry_run:
        check_no_wait(no_wait)
    store = Store()
    try:
        try:
            sel = select(store, req)
        except (NodeNotFound, StoreError) as exc:
            fail(str(exc), BAD_INPUT)
        try:
            batches = plan_batches(sel.members, sel.pools, req.limit, req.canary)
        except NoRoom as exc:
            fail(f"refused, nothing changed: {exc}", REFUSED)
        if req.change.kind is ChangeKind.SLURM:
            from lifecycle.workflows.slurm_upgrade import failover_warning

            if (warning := failover_warning()) is not None:
                _say(f"warning: {warning}")
        if dry_run:
            _dry_run(req, sel, [[m.node for m in b] for b in batches], as_json)
            return
        if not sel.members:
            _dry_run(req, sel, [], as_json)
            err_console.print("nothing to upgrade", markup=False)
            return
        kube = _kube(kubeconfig, sel.pools, store)
        levels: dict[str, Level] = {p: store.pool(p).retest_level for p in sel.pools}
        if req.change.kind is not ChangeKind.IMAGE:  # firmware, BIOS, Slurm, driver: no boot server
            node = ChangeSettings((req.change,), req.operator, accept, ChangeContext(ssh_config=accept.ssh_config),
                                  kube=kube, policy=req.policy,
                                  deadline_s=req.deadline_s, why=f"racklife upgrade: {req.change.describe()}")
            report = _run(no_wait, as_json, UpgradeSettings(req.change, tuple(sel.members), req.limit, node, levels,
                                                            req.canary, req.auto_continue, req.threshold, req.window))
        else:
            try:
                with boot_server(store, boot) as served:
                    if req.change.target not in served.settings.images:
                        fail(f"--image {req.change.target!r} is not built (have: "
                             f"{', '.join(sorted(served.settings.images))})", BAD_INPUT)
                    node = ChangeSettings((req.change,), req.operator, accept, ChangeContext(served.settings),
                                          kube=kube, policy=req.policy, deadline_s=req.deadline_s,
                                          why=f"racklife upgrade: {req.change.describe()}")
                    settings = UpgradeSettings(req.change, tuple(sel.members), req.limit, node, levels, req.canary,
                                               req.auto_continue, req.threshold, req.window)
                    report = _run(no_wait, as_json, settings)
            except (BootSetupError, OSError) as exc:  # no built image; the boot server's address taken
                fail(f"the boot server cannot start: {exc}", BAD_INPUT)
    finally:
        store.close()
    finish(report, as_json)


def _say(message: str) -> None:
    err_console.print(message, markup=False, soft_wrap=True)


def _run(no_wait: bool, as_json: bool, settings: UpgradeSettings) -> dict[str, Any]:
    from lifecycle.workflows import upgrade

    run_id = f"upgrade-{os.urandom(6).hex()}"
    nodes = [m.node for m in settings.members]
    with controller("upgrade", no_wait=no_wait) as ctl:
        handle = ctl.start(upgrade.upgrade, settings, workflow_id=run_id, nodes=nodes)
        _say(f"upgrade run {run_id}: {len(settings.members)} node(s), {settings.change.describe()}; "
             f"`racklife upgrade status {run_id}` shows it")
        if no_wait:
            leave_running(ctl, as_json)
        with progress(nodes, f"upgrade run {run_id}", runs=ctl.runs):
            return follow(handle, _say)


def adopt(run: str, boot: BootSettings, as_json: bool) -> None:
    """Finish ``run`` here if its process is gone (the controller recovers it); else leave it to that process."""
    from lifecycle.workflows import engine
    from lifecycle.workflows.controller import Controller, run_orphaned

    store = Store()
    try:
        insp = engine.Inspector()
        try:
            info = insp.get_run(run)
        finally:
            insp.close()
        if info is None or not run_orphaned(store, info.executor):
            _say(f"{run}: sent; the process running it carries on (`racklife upgrade status {run}`)")
            return
        try:
            with boot_server(store, boot), Controller("upgrade", say=_say) as ctl:
                if run not in {r.run_id for r in ctl.recovered}:
                    _say(f"{run}: sent; it was not recovered here (`racklife upgrade status {run}`)")
                    return
                _say(f"{run}: its process is gone: running it here")
                report = follow(ctl.handle(run), _say)
        except (BootSetupError, OSError) as exc:
            _say(f"{run}: sent, but it cannot be run here: {exc}")
            raise typer.Exit(BAD_INPUT) from None
    finally:
        store.close()
    finish(report, as_json)


def _dry_run(req: Request, sel: Selection, batches: list[list[str]], as_json: bool) -> None:
    doc = {"dry_run": True, "change": req.change.describe(), "batches": batches, "skipped": sel.skipped,
           "pools": {p: {"size": x.size, "in_service": x.in_service, "min_nodes": x.min_nodes,
                         "max_unavailable": req.limit.of(x.size)} for p, x in sel.pools.items()},
           "canary": req.canary, "hold_after_canary": req.canary > 0 and not req.auto_continue,
           "policy": req.policy, "window": req.window.describe() if req.window else None}
    if as_json:
        emit_json(doc)
        return
    out_console.print(f"upgrade ({req.change.describe()}), dry run: nothing changed", markup=False)
    for p, x in sel.pools.items():
        out_console.print(f"  pool {p}: {x.in_service} of {x.size} in service, max unavailable "
                          f"{req.limit.of(x.size)}, min_nodes {x.min_nodes}", markup=False)
    for i, b in enumerate(batches, 1):
        tag = " (canary; then hold)" if i == 1 and doc["hold_after_canary"] else " (canary)" if i == 1 and \
            req.canary else ""
        out_console.print(f"  batch {i}{tag}: {', '.join(b)}", markup=False, soft_wrap=True)
    for n, why in sel.skipped.items():
        out_console.print(f"  left out: {n}: {why}", markup=False, soft_wrap=True)
    if req.window:
        out_console.print(f"  batches start only in {req.window.describe()}", markup=False)


__all__ = ["Request", "adopt", "start"]

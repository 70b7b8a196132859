"""`racklife repair NODE [--action reset-gpu|reboot|reimage|rma] [--from-xid CODE] [--dry-run]` and `repair-status`.

The action is the operator's (``--action``) or the repair table's for an XID
(``--from-xid``: NVIDIA's resolution bucket through
``lifecycle.workflows.repair_table``). The run (``lifecycle.workflows.repair``)
takes the node's lease through the pool's repair circuit breaker, leaves the
scheduler (a quarantined node has nothing to leave), performs the action,
re-tests the node at its pool's ``retest_level`` (every level runs the load
checks: the GPUs are loaded, not idle) and rejoins it, or quarantines it. A
``reimage`` brings the boot server up here, as ``racklife upgrade`` does.
``--dry-run`` prints the action, why, and the breaker's numbers; it changes
nothing. Exit codes: 0 repaired (or, for ``rma``, quarantined as asked), 1
the repair failed (quarantined), 2 bad input, 5 refused (node not in service
or quarantined, held by another run, nothing to do, the node cannot do it).

``racklife repair-status``: each pool's breaker and the health events the
service recorded, with what became of each (from the store; reads only).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from lifecycle.cli._common import BAD_INPUT, FAILED, REFUSED, JsonOpt, emit_json, fail, out_console
from lifecycle.cli._runs import NoWaitOpt, check_no_wait, operator_name
from lifecycle.cli._select import AllOpt, PoolOpt, RackOpt, SelectorOpt, select_names
from lifecycle.cli.kube import KubeconfigOpt
from lifecycle.cli.upgrade import ImagesOpt, ListenOpt, TimeoutOpt, UrlOpt
from lifecycle.model.vocab import Level
from lifecycle.store.db import default_home

if TYPE_CHECKING:  # the workflows are imported when a repair runs (the command's help starts fast)
    from lifecycle.workflows.repair import RepairSettings
    from lifecycle.workflows.repair_table import RepairAction

ACTIONS = ("reset-gpu", "reboot", "reimage", "rma")


def repair_cmd(
    nodes: list[str] = typer.Argument(None, help="The node to repair (in service, or quarantined): a name, or a "
                                                 "hostlist or filter that selects one node."),
    rack: list[str] = RackOpt, pool: list[str] = PoolOpt, all_: bool = AllOpt, selector: str | None = SelectorOpt,
    action: str | None = typer.Option(None, "--action", help="reset-gpu | reboot | reimage | rma."),
    from_xid: int | None = typer.Option(None, "--from-xid", help="Choose the action from this XID's NVIDIA bucket."),
    image: str | None = typer.Option(None, "--image",
                                      help="reimage: NAME[:VERSION] (default: the node's image, else its pool's)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the action, why, and the breaker; change nothing."),
    kubeconfig: Path | None = KubeconfigOpt,
    ssh_config: Path = typer.Option(Path.home() / ".ssh" / "config", "--ssh-config", envvar="RACKLIFE_SSH_CONFIG",
                                    help="SSH config that reaches the nodes (the re-test's burn-in)."),
    profile: str | None = typer.Option(None, "--profile", envvar="RACKLIFE_BURNIN_PROFILE",
                                       help="Burn-in profile for the re-test (default: the node's SKU)."),
    burnin_python: str = typer.Option("python3", "--burnin-python", envvar="RACKLIFE_BURNIN_PYTHON",
                                      help="Python on the nodes that has racklife's burnin package."),
    images_dir: Path | None = ImagesOpt,
    boot_listen: str = ListenOpt,
    boot_url: str | None = UrlOpt,
    boot_timeout: float = TimeoutOpt,
    operator: str | None = typer.Option(None, "--operator", help="Who asks (default: the login name)."),
    no_wait: bool = NoWaitOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Repair NODE: leave, reset-gpu, reboot, reimage or quarantine, re-test under load, rejoin; within the breaker."""
    from lifecycle.store import NodeNotFound, Store, StoreError, repair_breaker
    from lifecycle.workflows import repair_table
    from lifecycle.workflows.repair import BUILT, REPAIRABLE
    from lifecycle.workflows.repair_actions import gpu_reset_refusal
    from lifecycle.workflows.repair_table import RepairAction

    if not dry_run:
        check_no_wait(no_wait)

    if (action is None) == (from_xid is None):
        fail("give exactly one of --action or --from-xid", BAD_INPUT)
    if action is not None:
        if action not in ACTIONS:
            fail(f"--action must be one of {', '.join(ACTIONS)}, not {action!r}", BAD_INPUT)
        chosen = RepairAction(action)
        reason = f"asked for by the operator ({chosen.value})"
    else:
        assert from_xid is not None
        if from_xid < 0:
            fail(f"--from-xid must be an XID code (a number 0 or more), not {from_xid}", BAD_INPUT)
        rep = repair_table.for_xid(from_xid)
        chosen, reason = rep.action, rep.reason
    if image is not None and chosen is not RepairAction.REIMAGE:
        fail("--image is only for a reimage", BAD_INPUT)
    picked = select_names(nodes, racks=rack, pools=pool, all_=all_, selector=selector)
    if len(picked) != 1:
        fail(f"repair takes one node at a time (its run holds the pool's repair breaker); the selection names "
             f"{len(picked)}: {', '.join(picked)}", BAD_INPUT)
    node = picked[0]
    store = Store()
    try:
        rec = store.get(node)
        pool_spec = store.pool(rec.pool)
        breaker = repair_breaker.count(store, rec.pool, node)
    except (NodeNotFound, StoreError, ValueError) as exc:
        store.close()
        fail(str(exc), BAD_INPUT)
    store.close()
    target = image or rec.node().image or pool_spec.image
    refusal = ""
    if chosen is RepairAction.NONE:
        refusal = f"nothing to repair on {node}: {reason}"
    elif chosen not in BUILT:
        refusal = f"repair action {chosen.value} is not one racklife performs ({reason})"
    elif rec.state.value not in REPAIRABLE:
        refusal = f"node {node} is {rec.state.value}; a repair here needs it in service or quarantined"
    elif chosen is RepairAction.RMA and rec.state.value == "quarantined":
        refusal = f"node {node} is quarantined already"
    elif chosen is RepairAction.RESET_GPU and (why := gpu_reset_refusal(rec.node().sku)):
        refusal = why
    elif chosen is RepairAction.REIMAGE and target is None:
        refusal = f"neither node {node} nor pool {rec.pool} names an image: give --image NAME[:VERSION]"
    plan: dict[str, Any] = {"node": node, "state": rec.state.value, "pool": rec.pool, "action": chosen.value,
                            "reason": reason, "retest_level": pool_spec.retest_level, "breaker": breaker.describe(),
                            "image": target if chosen is RepairAction.REIMAGE else None, "refused": refusal}
    if dry_run:
        _print_plan(plan, as_json)
        if refusal:
            raise typer.Exit(REFUSED)
        return
    if refusal:
        fail(refusal, REFUSED)
    settings = _settings(node, chosen, reason, operator_name(operator), pool_spec.retest_level, kubeconfig,
                         ssh_config, profile, burnin_python)
    if chosen is not RepairAction.REIMAGE:
        _print(_run(node, settings, no_wait, as_json), as_json)
        return
    from dataclasses import replace

    from lifecycle.cli.upgrade_start import boot_settings
    from lifecycle.workflows.boot_run import BootSetupError, boot_server

    store = Store()
    try:
        with boot_server(store, boot_settings(images_dir, boot_listen, boot_url, boot_timeout)) as served:
            if target not in served.settings.images:
                fail(f"--image {target!r} is not built (have: {', '.join(sorted(served.settings.images))})",
                     BAD_INPUT)
            outcome = _run(node, replace(settings, image=target, provision=served.settings), no_wait, as_json)
    except (BootSetupError, OSError) as exc:
        fail(f"the boot server cannot start: {exc}", BAD_INPUT)
    finally:
        store.close()
    _print(outcome, as_json)


def _print_plan(plan: dict[str, Any], as_json: bool) -> None:
    if as_json:
        emit_json({"dry_run": True, **plan})
        return
    node, refusal = plan["node"], plan["refused"]
    out_console.print(f"{node}: repair {plan['action']} (dry run, nothing changed): {plan['reason']}", markup=False,
                      soft_wrap=True)
    image = f"; image {plan['image']}" if plan["image"] else ""
    out_console.print(f"  state {plan['state']}; re-test at level {plan['retest_level']}{image}", markup=False)
    out_console.print(f"  breaker: {plan['breaker']}", markup=False, soft_wrap=True)
    if refusal:
        out_console.print(f"  refused: {refusal}", markup=False, soft_wrap=True)


def _settings(node: str, action: RepairAction, reason: str, who: str, level: Level, kubeconfig: Path | None,
              ssh_config: Path, profile: str | None, burnin_python: str) -> RepairSettings:
    from lifecycle.workflows import repair
    from lifecycle.workflows.accept import AcceptSettings
    from lifecycle.workflows.kube_pool import KubeSettings

    work = default_home() / "acceptance" / f"repair-{os.urandom(6).hex()}" / node
    kube = KubeSettings(str(kubeconfig.resolve())) if kubeconfig is not None and kubeconfig.is_file() else None
    return repair.RepairSettings(
        action=action, reason=reason, operator=who, kube=kube,
        accept=AcceptSettings(level=level, work_dir=str(work), report_dir=str(work / "reports"), operator=who,
                              ssh_config=str(ssh_config.resolve()), profile=profile, burnin_python=burnin_python,
                              max_in_flight=1, multi_node=False))


def _run(node: str, settings: RepairSettings, no_wait: bool = False, as_json: bool = False) -> dict[str, Any]:
    from lifecycle.cli._runs import controller, leave_running, progress
    from lifecycle.workflows import repair

    with controller("repair", no_wait=no_wait) as ctl:
        handle = ctl.start_or_finish(repair.repair_node, node, settings)
        if no_wait:
            leave_running(ctl, as_json)
        with progress([node], f"repair of {node}", runs=ctl.runs):
            result: dict[str, Any] = handle.get_result()
        return result


def _print(o: dict[str, Any], as_json: bool) -> None:
    if as_json:
        emit_json(o)
    else:
        verdict = "ok" if o["ok"] else "FAILED" if o["phases"] else "REFUSED"
        out_console.print(f"{o['node']}: repair {o['action']} {verdict}; node {o['state']}; {o['reason']}",
                          markup=False, soft_wrap=True)
        if o["breaker"]:
            out_console.print(f"  breaker: {o['breaker']}", markup=False, soft_wrap=True)
    if o["ok"] or (o["action"] == "rma" and o["state"] == "quarantined"):
        return
    raise typer.Exit(FAILED if o["phases"] else REFUSED)


def repair_status_cmd(
    pool: str | None = typer.Argument(None, help="Only this pool's breaker and events (default: every pool)."),
    limit: int = typer.Option(20, "--limit", min=1, max=1000, help="How many of the newest events to show."),
    as_json: bool = JsonOpt,
) -> None:
    """Show each pool's repair breaker and the newest health events, with what became of each."""
    from lifecycle.store import Store, StoreError, health, repair_breaker

    store = Store()
    try:
        breakers = [b for b in repair_breaker.counts(store) if b.pool == pool or (pool is None and b.nodes)]
        if pool is not None and not breakers:
            fail(f"pool {pool!r} is not in the store", BAD_INPUT)
        members = {n.name for n in store.nodes() if pool is None or n.pool == pool}
        events = [e for e in health.events(store, limit=limit * 4 if pool else limit) if e.node in members][:limit]
    except StoreError as exc:
        fail(str(exc), BAD_INPUT)
    finally:
        store.close()
    if as_json:
        emit_json({"breakers": [{"pool": b.pool, "nodes": b.nodes, "percent": b.percent, "limit": b.limit,
                                 "repairing": list(b.repairing), "open": b.open, "describe": b.describe()}
                                for b in breakers],
                   "events": [{"id": e.id, "node": e.node, "xid": e.xid, "pci": e.pci, "logged_at": e.logged_at,
                               "bucket": e.bucket, "action": e.action, "outcome": e.outcome, "detail": e.detail,
                               "run_id": e.run_id, "seen_at": e.seen_at.isoformat()} for e in events]})
        return
    for b in breakers:
        out_console.print(b.describe(), markup=False, soft_wrap=True)
    if not events:
        out_console.print("no health events recorded", markup=False)
    for e in events:
        run = f" run {e.run_id}" if e.run_id else ""
        out_console.print(f"{e.seen_at:%Y-%m-%d %H:%M:%S} {e.node} Xid {e.xid} ({e.bucket}) -> {e.action}: "
                          f"{e.outcome}{run}; {e.detail}", markup=False, soft_wrap=True)

"""`racklife repair NODE [--action reboot|rma] [--from-xid CODE] [--dry-run]`: one repair, one durable run.

The action is the operator's (``--action``) or the repair table's for an XID
(``--from-xid``: NVIDIA's resolution bucket through
``lifecycle.workflows.repair_table``). The run (``lifecycle.workflows.repair``)
takes the node's lease through the pool's repair circuit breaker, leaves the
scheduler, performs the action, re-tests the node at its pool's
``retest_level`` (every level runs the GEMM soak: the GPUs are loaded, not
idle) and rejoins it, or quarantines it. ``--dry-run`` prints the action, why,
and the breaker's numbers; it changes nothing. Exit codes: 0 repaired (or,
for ``rma``, quarantined as asked), 1 the repair failed (quarantined), 2 bad
input, 5 refused (node not in service, held by another run, nothing to do).
"""

from __future__ import annotations

import getpass
import os
from pathlib import Path
from typing import Any

import typer

from lifecycle.cli._common import BAD_INPUT, FAILED, REFUSED, JsonOpt, emit_json, fail, out_console
from lifecycle.cli.kube import KubeconfigOpt
from lifecycle.store.db import default_home


def repair_cmd(
    node: str = typer.Argument(..., help="The node to repair (in service)."),
    action: str | None = typer.Option(None, "--action", help="reboot | rma (reset-gpu and reimage: not built)."),
    from_xid: int | None = typer.Option(None, "--from-xid", help="Choose the action from this XID's NVIDIA bucket."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the action, why, and the breaker; change nothing."),
    kubeconfig: Path | None = KubeconfigOpt,
    ssh_config: Path = typer.Option(Path.home() / ".ssh" / "config", "--ssh-config", envvar="RACKLIFE_SSH_CONFIG",
                                    help="SSH config that reaches the nodes (the re-test's burn-in)."),
    profile: str | None = typer.Option(None, "--profile", envvar="RACKLIFE_BURNIN_PROFILE",
                                       help="Burn-in profile for the re-test (default: the node's SKU)."),
    burnin_python: str = typer.Option("python3", "--burnin-python", envvar="RACKLIFE_BURNIN_PYTHON",
                                      help="Python on the nodes that has racklife's burnin package."),
    operator: str | None = typer.Option(None, "--operator", help="Who asks (default: the login name)."),
    as_json: bool = JsonOpt,
) -> None:
    """Repair NODE: leave, reboot or quarantine, re-test under load, rejoin; within the pool's breaker."""
    from lifecycle.store import NodeNotFound, Store, StoreError, repair_breaker
    from lifecycle.workflows import repair_table
    from lifecycle.workflows.repair_table import RepairAction

    if (action is None) == (from_xid is None):
        fail("give exactly one of --action or --from-xid", BAD_INPUT)
    if action is not None:
        try:
            chosen = RepairAction(action)
        except ValueError:
            fail(f"--action must be one of reboot, rma, not {action!r}", BAD_INPUT)
        reason = f"asked for by the operator ({chosen.value})"
    else:
        assert from_xid is not None
        if from_xid < 0:
            fail(f"--from-xid must be an XID code (a number 0 or more), not {from_xid}", BAD_INPUT)
        rep = repair_table.for_xid(from_xid)
        chosen, reason = rep.action, rep.reason
    store = Store()
    try:
        rec = store.get(node)
        pool = store.pool(rec.pool)
        breaker = repair_breaker.count(store, rec.pool, node)
    except (NodeNotFound, StoreError, ValueError) as exc:
        store.close()
        fail(str(exc), BAD_INPUT)
    store.close()
    from lifecycle.workflows.repair import BUILT

    refusal = ""
    if chosen is RepairAction.NONE:
        refusal = f"nothing to repair on {node}: {reason}"
    elif chosen not in BUILT:
        refusal = f"repair action {chosen.value} is not built yet ({reason}); docs/limits.md"
    elif rec.state.value != "in_service":
        refusal = f"node {node} is {rec.state.value}; a repair here needs it in service"
    plan: dict[str, Any] = {"node": node, "state": rec.state.value, "pool": rec.pool, "action": chosen.value,
                            "reason": reason, "retest_level": pool.retest_level, "breaker": breaker.describe(),
                            "refused": refusal}
    if dry_run:
        if as_json:
            emit_json({"dry_run": True, **plan})
        else:
            out_console.print(f"{node}: repair {chosen.value} (dry run, nothing changed): {reason}", markup=False,
                              soft_wrap=True)
            out_console.print(f"  state {rec.state.value}; re-test at level {pool.retest_level}", markup=False)
            out_console.print(f"  breaker: {breaker.describe()}", markup=False, soft_wrap=True)
            if refusal:
                out_console.print(f"  refused: {refusal}", markup=False, soft_wrap=True)
        if refusal:
            raise typer.Exit(REFUSED)
        return
    if refusal:
        fail(refusal, REFUSED)
    outcome = _run(node, chosen, reason, operator or getpass.getuser(), pool.retest_level, kubeconfig,
                   ssh_config, profile, burnin_python)
    _print(outcome, as_json)


def _run(node: str, action: Any, reason: str, who: str, level: str, kubeconfig: Path | None, ssh_config: Path,
         profile: str | None, burnin_python: str) -> dict[str, Any]:
    from lifecycle.cli._runs import controller
    from lifecycle.workflows import repair
    from lifecycle.workflows.accept import AcceptSettings
    from lifecycle.workflows.kube_pool import KubeSettings

    work = default_home() / "acceptance" / f"repair-{os.urandom(6).hex()}" / node
    kube = KubeSettings(str(kubeconfig.resolve())) if kubeconfig is not None and kubeconfig.is_file() else None
    settings = repair.RepairSettings(
        action=action, reason=reason, operator=who, kube=kube,
        accept=AcceptSettings(level=level, work_dir=str(work), report_dir=str(work / "reports"), operator=who,
                              ssh_config=str(ssh_config.resolve()), profile=profile, burnin_python=burnin_python,
                              max_in_flight=1, multi_node=False))
    with controller("repair") as ctl:
        cut_off = [r for r in ctl.cut_off(repair.WORKFLOW) if r.args and r.args[0] == node]
        handle = ctl.handle(cut_off[0].run_id) if cut_off else ctl.start(repair.repair_node, node, settings,
                                                                          nodes=[node])
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

"""`racklife decommission NODE…`: take servers out of the fleet for good, one durable run each.

Every node is one run of ``lifecycle.workflows.decommission.decommission_node``
holding its lease: pre-checks, leave the scheduler, out of Slurm's
configuration or Kubernetes' Node list, with ``--erase`` a verified secure
erase and a signed certificate, ``--reset-bmc``, power off,
``decommissioned``. ``--dry-run`` runs the same pre-checks without the engine
and lists what would be touched; it changes nothing. A run cut off by a killed
controller is finished by the next ``racklife decommission`` of that node.
Exit codes: 0 every node decommissioned, 1 one failed (e.g. an erase that was
not verified), 2 bad input, 5 refused by a pre-check (jobs running without
``--force``, a foreign drain, an IPMI BMC asked to erase).
"""

from __future__ import annotations

import getpass
import os
import shlex
from pathlib import Path
from typing import Any

import typer

from lifecycle.cli._common import (
    BAD_INPUT,
    FAILED,
    REFUSED,
    JsonOpt,
    emit_json,
    emit_table,
    err_console,
    fail,
    out_console,
)
from lifecycle.cli.kube import KubeconfigOpt


def decommission_cmd(
    nodes: list[str] = typer.Argument(..., help="Node names to decommission."),
    erase: bool = typer.Option(False, "--erase", help="Secure-erase every drive through the BMC, verify it and "
                                                      "write a signed erase certificate (Redfish BMCs only)."),
    force: bool = typer.Option(False, "--force", help="Requeue running Slurm jobs and evict pods instead of "
                                                      "refusing; every job and pod touched is reported."),
    reset_bmc: bool = typer.Option(False, "--reset-bmc", help="After power off, reset the BMC's settings to "
                                                              "defaults (Redfish ResetToDefaults ResetAll)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the plan and the pre-checks; change nothing."),
    reason: str = typer.Option("decommission", "--reason", help="Why, for the node's history."),
    kubeconfig: Path | None = KubeconfigOpt,
    certificates: Path | None = typer.Option(None, "--certificates", envvar="RACKLIFE_ERASE_CERTIFICATES",
                                             help="Where erase certificates go (default: "
                                                  "$RACKLIFE_HOME/erase-certificates)."),
    operator: str | None = typer.Option(None, "--operator", help="Who asks (default: the login name)."),
    as_json: bool = JsonOpt,
) -> None:
    """Decommission NODES: leave the scheduler, optionally erase, power off; history kept, name freed."""
    from lifecycle.store import NodeNotFound, Store, StoreError
    from lifecycle.workflows.decommission_checks import (
        SLURM_CONF_CMD_ENV,
        DecommissionSettings,
        plan_lines,
        prechecks,
        touched,
    )
    from lifecycle.workflows.kube_pool import KubeSettings

    names = list(dict.fromkeys(nodes))
    if kubeconfig is not None and not kubeconfig.is_file():
        fail(f"--kubeconfig {kubeconfig}: no such file", BAD_INPUT)
    store = Store()
    try:
        for n in names:
            store.get(n)
    except (NodeNotFound, StoreError) as exc:
        store.close()
        fail(str(exc), BAD_INPUT)
    settings = DecommissionSettings(
        operator=operator or getpass.getuser(), reason=reason, force=force, erase=erase, reset_bmc=reset_bmc,
        kube=KubeSettings(str(kubeconfig.resolve())) if kubeconfig is not None else None,
        slurm_conf_cmd=tuple(shlex.split(os.environ.get(SLURM_CONF_CMD_ENV, ""))),
        certificate_dir=str(certificates.resolve()) if certificates is not None else "")
    if dry_run:
        try:
            report = [{"node": n, "plan": plan_lines(store, n, settings), **prechecks(store, n, settings).to_dict(),
                       "would_touch": touched(store, n, settings)} for n in names]
        finally:
            store.close()
        _print_dry_run(report, as_json)
        return
    store.close()
    _print(_run(names, settings), as_json)


def _run(names: list[str], settings: Any) -> list[dict[str, Any]]:
    from lifecycle.cli._runs import controller
    from lifecycle.workflows import decommission

    with controller("decommission") as ctl:
        cut_off = {r.args[0]: r for r in ctl.cut_off("decommission_node") if r.args}
        handles = []
        for n in names:
            if n in cut_off:
                err_console.print(f"{n}: finishing decommission run {cut_off[n].run_id}, cut off earlier, with the "
                                  "settings it started with", markup=False)
                handles.append(ctl.handle(cut_off[n].run_id))
            else:
                handles.append(ctl.start(decommission.decommission_node, n, settings, nodes=[n]))
        return [h.get_result() for h in handles]


def _print_dry_run(report: list[dict[str, Any]], as_json: bool) -> None:
    if as_json:
        emit_json({"dry_run": True, "nodes": report})
    else:
        for r in report:
            out_console.print(f"{r['node']}: {r['state']} in pool {r['pool']} -> plan (dry run, nothing changed):",
                              markup=False)
            for i, line in enumerate(r["plan"], 1):
                out_console.print(f"  {i}. {line}", markup=False, soft_wrap=True)
            for c in r["checks"]:
                out_console.print(f"  [{'ok' if c['ok'] else 'FAIL'}] {c['name']}: {c['detail']}", markup=False,
                                  soft_wrap=True)
            for t in r["would_touch"] or ["nothing running on it"]:
                out_console.print(f"  would touch: {t}", markup=False, soft_wrap=True)
    if not all(r["ok"] for r in report):
        raise typer.Exit(REFUSED)


def _touched(o: dict[str, Any]) -> str:
    report = o["leave"].get("report") or {}
    jobs = [f"job {j.get('job_id')} {j.get('action', '')}".strip() for j in report.get("jobs", [])]
    pods = [f"pod {p} evicted" for p in report.get("evicted", [])]
    return ", ".join(jobs + pods) or "-"


def _print(outcomes: list[dict[str, Any]], as_json: bool) -> None:
    if as_json:
        emit_json(outcomes)
    else:
        emit_table("decommission", ["node", "result", "state", "touched", "erase", "reason"],
                   [(o["node"], "ok" if o["ok"] else "REFUSED" if o["refused"] else "FAILED", o["state"], _touched(o),
                     o["erase"].get("certificate", "-") if o["erase"] else "-", o["reason"][:300])
                    for o in outcomes])
    if all(o["ok"] for o in outcomes):
        return
    refused = all(o["ok"] or o["refused"] for o in outcomes)
    raise typer.Exit(REFUSED if refused else FAILED)

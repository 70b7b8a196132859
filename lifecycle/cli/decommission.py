"""`racklife decommission NODE…`: take servers out of the fleet for good, one durable run each.

Every node is one run of ``lifecycle.workflows.decommission.decommission_node``
holding its lease: pre-checks, leave the scheduler, out of Slurm's
configuration or Kubernetes' Node list, with ``--erase`` a verified secure
erase, read back from a maintenance boot (the ``maintenance`` image where it is
built, else ``minimal``; ``--maintenance-image``) (the embedded
boot server runs while the command does; ``--images``, ``--boot-listen``,
``--ssh-config`` as ``racklife provision`` and ``accept`` take them) and a
signed certificate, ``--reset-bmc``, power off,
``decommissioned``. ``--dry-run`` runs the same pre-checks without the engine
and lists what would be touched; it changes nothing. A run cut off by a killed
controller is finished by the next ``racklife decommission`` of that node.
Exit codes: 0 every node decommissioned, 1 one failed (e.g. an erase that was
not verified), 2 bad input, 5 refused by a pre-check (jobs running without
``--force``, a foreign drain, an IPMI BMC asked to erase).
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import replace
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
    fail,
    out_console,
)
from lifecycle.cli._runs import NoWaitOpt, check_no_wait, operator_name
from lifecycle.cli._select import AllOpt, PoolOpt, RackOpt, SelectorOpt, select
from lifecycle.cli.kube import KubeconfigOpt
from lifecycle.cli.upgrade import ImagesOpt, ListenOpt, TimeoutOpt, UrlOpt


def decommission_cmd(
    nodes: list[str] = typer.Argument(None, help="Node names or hostlists to decommission."),
    rack: list[str] = RackOpt, pool: list[str] = PoolOpt, all_: bool = AllOpt, selector: str | None = SelectorOpt,
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
    ssh_config: Path = typer.Option(Path.home() / ".ssh" / "config", "--ssh-config", envvar="RACKLIFE_SSH_CONFIG",
                                    help="--erase: ssh_config that reaches the node in its maintenance boot."),
    images_dir: Path | None = ImagesOpt,
    maintenance_image: str | None = typer.Option(
        None, "--maintenance-image", envvar="RACKLIFE_MAINTENANCE_IMAGE",
        help="--erase: the image booted to read the drives back (default: maintenance where built, else "
             "minimal)."),
    boot_listen: str = ListenOpt,
    boot_url: str | None = UrlOpt,
    boot_timeout: float = TimeoutOpt,
    operator: str | None = typer.Option(None, "--operator", help="Who asks (default: the login name)."),
    no_wait: bool = NoWaitOpt,
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

    if not dry_run:
        check_no_wait(no_wait)
    if kubeconfig is not None and not kubeconfig.is_file():
        fail(f"--kubeconfig {kubeconfig}: no such file", BAD_INPUT)
    store = Store()
    try:
        names = select(store, nodes or [], racks=rack, pools=pool, all_=all_, selector=selector)
    except (NodeNotFound, StoreError) as exc:
        store.close()
        fail(str(exc), BAD_INPUT)
    except typer.Exit:  # the selection was bad input
        store.close()
        raise
    settings = DecommissionSettings(
        operator=operator_name(operator), reason=reason, force=force, erase=erase, reset_bmc=reset_bmc,
        kube=KubeSettings(str(kubeconfig.resolve())) if kubeconfig is not None else None,
        slurm_conf_cmd=tuple(shlex.split(os.environ.get(SLURM_CONF_CMD_ENV, ""))),
        certificate_dir=str(certificates.resolve()) if certificates is not None else "")
    from lifecycle.cli.upgrade_start import boot_settings

    boot = boot_settings(images_dir, boot_listen, boot_url, boot_timeout)
    try:
        with _readback(store, boot, ssh_config, erase, maintenance_image, here=not dry_run) as (back, why):
            settings = replace(settings, readback=back, readback_unavailable=why)
            if dry_run:
                report = [{"node": n, "plan": plan_lines(store, n, settings),
                           **prechecks(store, n, settings).to_dict(), "would_touch": touched(store, n, settings)}
                          for n in names]
            else:
                outcomes = _run(names, settings, no_wait, as_json)
    finally:
        store.close()
    if dry_run:
        _print_dry_run(report, as_json)
        return
    _print(outcomes, as_json)


@contextmanager
def _readback(store: Any, boot: Any, ssh_config: Path, erase: bool, asked: str | None,
              here: bool) -> Iterator[tuple[Any, str]]:
    """With ``--erase``: the read-back's settings, the boot server running (``here``) while the block does;
    else (None, why not). A missing image or SSH config is not bad input: the erase's pre-check refuses it."""
    from lifecycle.workflows.boot_run import BootSetupError, boot_server, planned_settings
    from lifecycle.workflows.decommission_checks import ReadbackSettings, readback_image

    if not erase:
        yield None, ""
        return
    if not ssh_config.is_file():
        yield None, (f"no SSH config {ssh_config} to reach the node in its maintenance boot (--ssh-config or "
                     "RACKLIFE_SSH_CONFIG)")
        return
    image = readback_image(boot.images_dir, asked)
    with ExitStack() as stack:
        try:
            settings = (planned_settings(replace(boot, image=image)) if not here
                        else stack.enter_context(boot_server(store, replace(boot, image=image))).settings)
        except (BootSetupError, OSError) as exc:
            settings = None
            why = f"no maintenance boot: {exc}"
        if settings is None:
            yield None, why
        else:
            yield ReadbackSettings(settings, str(ssh_config.resolve()), image), ""


def _run(names: list[str], settings: Any, no_wait: bool = False, as_json: bool = False) -> list[dict[str, Any]]:
    from lifecycle.cli._runs import controller, leave_running, progress
    from lifecycle.workflows import decommission

    with controller("decommission", no_wait=no_wait) as ctl:
        handles = [ctl.start_or_finish(decommission.decommission_node, n, settings) for n in names]
        if no_wait:
            leave_running(ctl, as_json)
        with progress(names, f"decommission of {len(names)} node(s)", runs=ctl.runs):
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

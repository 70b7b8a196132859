"""`racklife apply [INVENTORY] [--nodes …] [--max-in-flight N] [--max-unavailable N|P%] [--yes]`.

Carries the plan out as durable workflow runs, in waves, re-planning from
fresh observations before each; stops at blockers without touching them;
prints what it did and what remains. Exit codes: 0 converged ("no
changes", nothing blocked), 1 something remains (blocked, failed or not
implemented yet), 2 bad input.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import Any

import typer

from lifecycle.cli._change import Change, YesOpt, go_ahead
from lifecycle.cli._common import (
    BAD_INPUT,
    FAILED,
    JsonOpt,
    emit_json,
    emit_table,
    err_console,
    fail,
    out_console,
)
from lifecycle.cli._runs import NoWaitOpt, check_no_wait, operator_name, say
from lifecycle.cli._select import expand_names
from lifecycle.cli.inventory import load_or_exit
from lifecycle.model.vocab import Level
from lifecycle.planner.plan import Plan
from lifecycle.store import Store, StoreError
from lifecycle.store.db import default_home


def apply_cmd(
    inventory: Path | None = typer.Argument(None, help="Inventory YAML (default: what was last imported)."),
    nodes: str | None = typer.Option(None, "--nodes", help="Comma-separated node names (default: every node)."),
    max_in_flight: int = typer.Option(8, "--max-in-flight", min=1, max=1024,
                                       help="Most nodes worked on at once."),
    max_unavailable: str = typer.Option("1", "--max-unavailable",
                                        help="Per pool, nodes out of service at once: N or P%."),
    yes: bool = YesOpt,
    level: Level = typer.Option("quick", "--level", help="Acceptance level for accept steps."),
    operator: str | None = typer.Option(None, "--operator", help="Who applies (default: the login name)."),
    ssh_config: Path = typer.Option(Path.home() / ".ssh" / "config", "--ssh-config", envvar="RACKLIFE_SSH_CONFIG",
                                    help="ssh_config that reaches the nodes (key auth, pinned host keys)."),
    profile: str | None = typer.Option(None, "--profile", envvar="RACKLIFE_BURNIN_PROFILE",
                                       help="Burn-in profile name or .toml file for every node (default: the SKU)."),
    burnin_python: str = typer.Option("python3", "--burnin-python", envvar="RACKLIFE_BURNIN_PYTHON",
                                      help="Python on the nodes that has racklife's burnin package."),
    image: str | None = typer.Option(None, "--image", help="Image to provision (default: minimal)."),
    images_dir: Path = typer.Option(None, "--images", help="Built images (default: $RACKLIFE_HOME/images)."),
    boot_listen: str = typer.Option("127.0.0.1:8069", "--boot-listen", envvar="RACKLIFE_BOOT_LISTEN",
                                    help="Where the embedded boot server listens."),
    boot_url: str | None = typer.Option(None, "--boot-url", envvar="RACKLIFE_BOOT_URL",
                                        help="The boot server's URL as nodes see it (default: the listen address)."),
    boot_timeout: float = typer.Option(600.0, "--boot-timeout", envvar="RACKLIFE_BOOT_TIMEOUT_S", min=1,
                                       help="Seconds to wait for a node to phone home, per boot."),
    bios_timeout: float = typer.Option(900.0, "--bios-timeout", envvar="RACKLIFE_BIOS_TIMEOUT_S", min=1,
                                       help="Seconds a set-bios step waits for the BIOS to read its values back."),
    no_wait: bool = NoWaitOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Converge the fleet on its inventory as far as workflows exist and blockers allow."""
    from lifecycle.cli._runs import controller, leave_running, progress
    from lifecycle.drivers.slurm.role import ROLE_CMD_ENV
    from lifecycle.model.limits import Unavailable
    from lifecycle.planner import observe
    from lifecycle.planner.apply import ApplySettings
    from lifecycle.planner.assemble import RunnerSettings
    from lifecycle.planner.durable import carry_out
    from lifecycle.planner.fleet import UnknownNodes, plan_fleet
    from lifecycle.workflows.decommission_checks import SLURM_CONF_CMD_ENV

    try:
        limit = Unavailable.parse(max_unavailable)
    except ValueError as exc:
        fail(str(exc), BAD_INPUT)
    check_no_wait(no_wait)
    inv = load_or_exit(inventory, as_json) if inventory is not None else None
    names = expand_names([nodes]) if nodes is not None and nodes.strip(",") else [] if nodes is not None else None
    who = operator_name(operator)
    kubeconfig = os.environ.get("RACKLIFE_KUBECONFIG") or os.environ.get("KUBECONFIG")
    store = Store()
    sources = observe.default_sources(firmware=False, store=store)
    try:
        try:
            first = plan_fleet(store, inv, names, sources)
        except (UnknownNodes, StoreError) as exc:
            fail(str(exc), BAD_INPUT)
        if not first.changes:
            _finish_without_changes(first, as_json)
            if first.blocked:
                raise typer.Exit(FAILED)
            return
        go_ahead(Change("apply the plan to", [n.node for n in first.nodes if n.steps],
                        [f"{n.node}: {s.describe()}" for n in first.nodes for s in n.steps]),
                 yes=yes, dry_run=False)  # `racklife plan` is the dry run

        # Paths resolved here: a run the service executes must not resolve them against its own directory.
        settings = RunnerSettings(
            operator=who, home=default_home(), images_dir=images_dir or default_home() / "images", level=level,
            ssh_config=ssh_config.resolve(), profile=profile, burnin_python=burnin_python,
            max_in_flight=max_in_flight, boot_listen=boot_listen, boot_url=boot_url, boot_timeout_s=boot_timeout,
            bios_timeout_s=bios_timeout, image=image,
            kubeconfig=str(Path(kubeconfig).resolve()) if kubeconfig else None,
            role_cmd=tuple(shlex.split(os.environ.get(ROLE_CMD_ENV, ""))),
            slurm_conf_cmd=tuple(shlex.split(os.environ.get(SLURM_CONF_CMD_ENV, ""))))
        cfg = ApplySettings(who, max_in_flight, limit)
        with controller("apply", no_wait=no_wait) as ctl:
            working = [n.node for n in first.nodes if n.steps]

            def handed(run_id: str) -> None:  # one durable run the service executes: ^C leaves it running there
                if no_wait:
                    leave_running(ctl, as_json)

            with progress(working, f"apply to {len(working)} node(s)", runs=ctl.runs):
                result = carry_out(ctl, store, inv, names, sources, settings, cfg, say=say, handed=handed,
                                   inventory_text=inventory.read_text() if inventory is not None else None,
                                   inventory_file=str(inventory or "")).to_json()
    finally:
        store.close()
    _print(result, as_json)


def _print(report: dict[str, Any], as_json: bool) -> None:
    """The report (``ApplyReport.to_json``: here, or the service's run's result); exit 1 unless converged."""
    if as_json:
        emit_json(report)
    else:
        done = report["done"]
        if done:
            emit_table("applied", ["node", "action", "result", "run", "detail"],
                       [(d["node"], d["action"], "ok" if d["ok"] else "FAILED", d["run_id"], d["detail"][:160])
                        for d in done])
        else:
            err_console.print("nothing done: no step could be carried out", markup=False)
        for name, why in sorted(report["skipped"].items()):
            out_console.print(f"{name}: left for later: {why}", markup=False, soft_wrap=True)
        for n in (report["remaining"] or {}).get("nodes", []):
            for s in n["steps"]:
                out_console.print(f"{n['node']}: still to do: {s['describe']}", markup=False, soft_wrap=True)
            for b in n["blockers"]:
                out_console.print(f"{n['node']}: blocked ({b['kind']}): {b['message']}", markup=False,
                                  soft_wrap=True)
        err_console.print("converged: no changes left" if report["converged"] else "not converged", markup=False)
    if not report["converged"] or not all(d["ok"] for d in report["done"]):
        raise typer.Exit(FAILED)


def _finish_without_changes(plan: Plan, as_json: bool) -> None:
    if as_json:
        emit_json({"converged": not plan.blocked, "done": [], "skipped": {}, "remaining": plan.to_json()})
        return
    for n in plan.nodes:
        for b in n.blockers:
            out_console.print(f"{n.node}: blocked ({b.kind}): {b.message}", markup=False, soft_wrap=True)
    err_console.print("no changes" + (" (blocked nodes remain: not converged)" if plan.blocked else ""),
                      markup=False)

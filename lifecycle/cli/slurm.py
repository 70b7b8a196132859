"""`racklife slurm render|status`: Slurm configuration from the inventory, and who holds which node.

``status`` shows, next to each node's state, who owns its drain: racklife
(with the run that set it) or someone else, so an operator sees at once which
drains automation may lift and which it will leave alone.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from lifecycle.cli._change import Change, DryRunOpt, YesOpt, go_ahead
from lifecycle.cli._common import (
    BAD_INPUT,
    REFUSED,
    JsonOpt,
    emit_json,
    emit_table,
    error_exit,
    fail,
    out_console,
)
from lifecycle.cli._runs import NoWaitOpt, check_no_wait
from lifecycle.cli._select import AllOpt, PoolOpt, RackOpt, SelectorOpt, select
from lifecycle.cli.inventory import load_or_exit
from lifecycle.drivers.errors import DriverError
from lifecycle.drivers.slurm.driver import SlurmDriver
from lifecycle.drivers.slurm.render import RenderError, RenderOptions, render
from lifecycle.drivers.slurm.runner import CommandRunner, RestClient
from lifecycle.model.vocab import LeavePolicy

if TYPE_CHECKING:
    from lifecycle.workflows.controller import Controller, RunHandle

app = typer.Typer(help="Slurm configuration and state.", no_args_is_help=True)

TOKEN_ENV = "RACKLIFE_SLURM_JWT"  # noqa: S105 (the name of a variable, not a secret)


@app.command("render")
def render_cmd(
    inventory: Path = typer.Option(..., "--inventory", help="Inventory YAML file."),
    out: Path = typer.Option(..., "--out", help="Directory to write the files into."),
    topology: str = typer.Option("tree", "--topology", help="tree (switches) or block (NVLink, 23.11+)."),
    controller: str = typer.Option("slurmctld", "--controller", help="SlurmctldHost."),
    backup_controller: str | None = typer.Option(
        None, "--backup-controller", help="A second SlurmctldHost: the backup slurmctld (shared StateSaveLocation)."),
    cluster_name: str | None = typer.Option(None, "--cluster-name", help="Default: the site name."),
    as_json: bool = JsonOpt,
) -> None:
    """Write slurm.conf, gres.conf, topology.conf, cgroup.conf and slurmdbd.conf for INVENTORY into OUT."""
    if topology not in ("tree", "block"):
        fail("--topology must be 'tree' or 'block'")
    inv = load_or_exit(inventory, as_json)
    opts = RenderOptions(
        controller=controller, backup_controller=backup_controller, cluster_name=cluster_name,
        topology="tree" if topology == "tree" else "block",
    )
    try:
        rendered = render(inv, opts)
    except RenderError as exc:
        error_exit(f"slurm render: {exc}", BAD_INPUT, extra={"rendered": False})
    out.mkdir(parents=True, exist_ok=True)
    changed: list[str] = []
    for name, text in sorted(rendered.files.items()):
        path = out / name
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
            changed.append(name)
    if as_json:
        emit_json({"out": str(out), "files": sorted(rendered.files), "changed": changed})
    else:
        out_console.print(
            f"wrote {len(rendered.files)} file(s) to {out} ({len(changed)} changed: "
            f"{', '.join(changed) or 'none'})"
        )


@app.command()
def status(
    rest_url: str | None = typer.Option(
        None, "--rest-url", envvar="RACKLIFE_SLURM_REST_URL",
        help=f"slurmrestd URL for reads (token from ${TOKEN_ENV})."
    ),
    as_json: bool = JsonOpt,
) -> None:
    """Nodes with their state, partitions and drain owner, and the jobs on them."""
    rest = None
    if rest_url:
        token = os.environ.get(TOKEN_ENV)
        if not token:
            fail(f"--rest-url needs a token in ${TOKEN_ENV}")
        rest = RestClient(rest_url, token)
    driver = SlurmDriver(CommandRunner(), rest)
    try:
        nodes = driver.nodes()
        jobs = driver.jobs()
    except DriverError as exc:
        fail(str(exc), exc.exit_code)
    on_node: dict[str, list[str]] = {}
    for job in jobs:
        if job.active:
            for host in job.nodes:
                on_node.setdefault(host, []).append(job.job_id)
    rows: list[dict[str, object]] = []
    table: list[list[str]] = []
    for n in nodes:
        owner = n.owner if (n.state.drain or n.state.base == "down") else None
        here = on_node.get(n.name, [])
        rows.append({
            "node": n.name,
            "state": str(n.state),
            "partitions": list(n.partitions),
            "owner": owner.kind if owner else None,
            "owner_run": owner.run_id if owner else None,
            "reason": n.reason or None,
            "jobs": here,
        })
        shown_owner = ""
        if owner is not None:
            shown_owner = f"racklife:{owner.run_id}" if owner.kind == "racklife" else owner.kind
        table.append([n.name, str(n.state), ",".join(n.partitions), shown_owner, n.reason,
                      ",".join(here)])
    if as_json:
        emit_json({
            "nodes": rows,
            "jobs": [
                {"job_id": j.job_id, "state": j.state, "partition": j.partition, "user": j.user,
                 "name": j.name, "nodes": list(j.nodes)}
                for j in jobs
            ],
        })
        return
    emit_table("Slurm nodes", ["node", "state", "partitions", "drain owner", "reason", "jobs"], table)


def _known(nodes: list[str]) -> None:
    from lifecycle.store import NodeNotFound, Store

    store = Store()
    try:
        for n in nodes:
            store.get(n)
    except NodeNotFound as exc:
        fail(str(exc))
    finally:
        store.close()


def _targets(nodes: list[str] | None, rack: list[str], pool: list[str], all_: bool, selector: str | None) -> list[str]:
    """The nodes named the one way every command names them (lifecycle/cli/_select.py)."""
    from lifecycle.store import Store

    store = Store()
    try:
        return select(store, nodes or [], racks=rack, pools=pool, all_=all_, selector=selector)
    finally:
        store.close()


def _run_pool_workflow(name: str, nodes: list[str], start: Callable[[Controller, str], RunHandle[dict[str, Any]]],
                       no_wait: bool = False, as_json: bool = False) -> list[dict[str, Any]]:
    """``start(ctl, node)`` for each node (its run of the join or leave workflow), awaited."""
    from lifecycle.cli._runs import controller, leave_running, progress

    _known(nodes)
    with controller("slurm", no_wait=no_wait) as ctl:
        handles = [start(ctl, n) for n in dict.fromkeys(nodes)]
        if no_wait:
            leave_running(ctl, as_json)
        with progress(list(dict.fromkeys(nodes)), f"slurm {name}", runs=ctl.runs):
            return [h.get_result() for h in handles]


def print_outcomes(outcomes: list[dict[str, object]], as_json: bool) -> None:
    if as_json:
        emit_json(outcomes)
    else:
        rows = []
        for o in outcomes:
            report = o.get("report") or {}
            jobs = report.get("jobs", []) if isinstance(report, dict) else []
            touched = ", ".join(f"{j['job_id']}:{j['action']}" for j in jobs) or "-"
            rows.append((o["node"], "ok" if o["ok"] else "REFUSED", o["state"], touched, o["reason"]))
        emit_table(None, ["node", "result", "state", "jobs touched", "reason"], rows)
    if not all(o["ok"] for o in outcomes):
        raise typer.Exit(REFUSED)


@app.command()
def join(nodes: list[str] = typer.Argument(None, help="Node names or hostlists (node-[01-04])."),
         rack: list[str] = RackOpt, pool: list[str] = PoolOpt, all_: bool = AllOpt,
         selector: str | None = SelectorOpt, no_wait: bool = NoWaitOpt, as_json: bool = JsonOpt) -> None:
    """Put accepted nodes in their pool's partition and resume them (only drains racklife set)."""
    check_no_wait(no_wait)
    from lifecycle.workflows import slurm_pool

    print_outcomes(_run_pool_workflow("join", _targets(nodes, rack, pool, all_, selector),
                                      lambda ctl, n: ctl.start(slurm_pool.join_node, n, nodes=[n]),
                                      no_wait=no_wait, as_json=as_json), as_json)


@app.command()
def leave(
    nodes: list[str] = typer.Argument(None, help="Node names or hostlists (node-[01-04])."),
    rack: list[str] = RackOpt, pool: list[str] = PoolOpt, all_: bool = AllOpt, selector: str | None = SelectorOpt,
    policy: LeavePolicy | None = typer.Option(None, "--policy", help="What happens to jobs still running at the "
                                                                     "deadline (default: the pool's)."),
    deadline: float | None = typer.Option(None, "--deadline", min=0, help="Seconds to wait for running jobs."),
    reason: str = typer.Option("leaving the pool", "--reason", help="Human reason, after racklife's prefix."),
    as_json: bool = JsonOpt,
    yes: bool = YesOpt, dry_run: bool = DryRunOpt, no_wait: bool = NoWaitOpt,
) -> None:
    """Drain nodes out of Slurm: wait for jobs, then requeue or cancel per policy; report every job.

    Asks first, naming the jobs on the nodes (--yes where there is no terminal;
    --dry-run prints the nodes and jobs it would touch and changes nothing).
    """
    nodes = _targets(nodes, rack, pool, all_, selector)
    if not dry_run:
        check_no_wait(no_wait)
    try:
        jobs = [j for j in SlurmDriver(CommandRunner(), None).jobs() if j.active and set(j.nodes) & set(nodes)]
    except DriverError as exc:
        fail(f"cannot read the jobs on {', '.join(nodes)}: {exc}", exc.exit_code)
    then = {"cancel": "cancelled", "requeue": "requeued", "wait": "waited for"}.get(policy or "", "handled per the "
                                                                                               "pool's policy")
    go_ahead(Change(f"drain out of Slurm (policy {policy or 'of the pool'})", list(dict.fromkeys(nodes)),
                    [f"job {j.job_id} ({j.user}, {j.name}) on {','.join(j.nodes)}: {then}" for j in jobs]
                    or ["no running jobs"]), yes=yes, dry_run=dry_run)
    from lifecycle.workflows import slurm_pool

    print_outcomes(_run_pool_workflow("leave", nodes, lambda ctl, n: ctl.start(slurm_pool.leave_node, n, policy,
                                                                            deadline, reason, nodes=[n]),
                                      no_wait=no_wait, as_json=as_json), as_json)


@app.command("suspend-program")
def suspend_program(hostlist: list[str] = typer.Argument(..., help="Slurm hostlist(s) to lend.")) -> None:
    """Slurm's SuspendProgram for lendable nodes: start the lend workflows and return at once."""
    from lifecycle.workflows.elastic_worker import program

    raise typer.Exit(program("lend", hostlist))


@app.command("resume-program")
def resume_program(hostlist: list[str] = typer.Argument(..., help="Slurm hostlist(s) to take back.")) -> None:
    """Slurm's ResumeProgram for lendable nodes: start the reclaim workflows and return at once."""
    from lifecycle.workflows.elastic_worker import program

    raise typer.Exit(program("reclaim", hostlist))

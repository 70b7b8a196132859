"""`racklife accept RACK|--nodes …`: burn in, run multi-node NCCL (Slurm or SSH), judge, keep the evidence, gate."""

from __future__ import annotations

import os
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import typer

from acceptance.coverage import WAIVABLE
from acceptance.judge import Waiver
from lifecycle.cli._common import BAD_INPUT, FAILED, REFUSED, JsonOpt, emit_json, emit_table, err_console, fail
from lifecycle.cli._runs import NoWaitOpt, check_no_wait, operator_name
from lifecycle.cli._select import AllOpt, PoolOpt, RackOpt, SelectorOpt, select
from lifecycle.model.vocab import Level
from lifecycle.store import Store
from lifecycle.store.db import default_home


def accept_cmd(
    targets: list[str] = typer.Argument(None, help="Racks (every node of each), node names or hostlists "
                                                   "(node-[01-04])."),
    nodes: str | None = typer.Option(None, "--nodes", help="Comma-separated node names or hostlists."),
    rack: list[str] = RackOpt, pool: list[str] = PoolOpt, all_: bool = AllOpt, selector: str | None = SelectorOpt,
    level: Level = typer.Option("quick", "--level", help="How much burn-in runs on each node."),
    report_dir: Path | None = typer.Option(None, "--report-dir", help="Where the JSON, JUnit and HTML reports go."),
    profile: str | None = typer.Option(None, "--profile", envvar="RACKLIFE_BURNIN_PROFILE",
                                       help="Burn-in profile name or .toml file for every node (default: the SKU)."),
    ssh_config: Path = typer.Option(Path.home() / ".ssh" / "config", "--ssh-config", envvar="RACKLIFE_SSH_CONFIG",
                                    help="ssh_config that reaches the nodes (key auth, pinned host keys)."),
    burnin_python: str = typer.Option("python3", "--burnin-python", envvar="RACKLIFE_BURNIN_PYTHON",
                                      help="Python on the nodes that has racklife's burnin package."),
    operator: str | None = typer.Option(None, "--operator", help="Who accepts (default: the login name)."),
    max_in_flight: int = typer.Option(8, "--max-in-flight", min=1, max=1024,
                                       help="Most nodes in burn-in at once."),
    timeout: float = typer.Option(3600.0, "--timeout", min=1, help="Seconds per node for burn-in."),
    multi_node: bool = typer.Option(True, "--multi-node/--no-multi-node",
                                    help="Run all_reduce across nodes after burn-in (srun in Slurm pools, "
                                         "mpirun over SSH in the others); where the profile requires it, "
                                         "--no-multi-node leaves nodes unaccepted unless waived."),
    nccl_tests: str | None = typer.Option(None, "--nccl-tests", envvar="RACKLIFE_NCCL_TESTS",
                                          help="all_reduce_perf for multi-node runs (default: the one on the "
                                               "nodes' PATH)."),
    multi_node_timeout: float = typer.Option(1800.0, "--multi-node-timeout", min=10,
                                             help="Seconds per round of multi-node srun jobs."),
    max_parallel: int | None = typer.Option(None, "--max-parallel-runs", min=1,
                                            help="At most this many multi-node jobs at once (default: a round)."),
    waive: list[str] = typer.Option([], "--waive",
                                    help="Waive a required check, by name: multi-node (needs --reason; the "
                                         "waiver, who gave it and why go into every record and report)."),
    reason: str | None = typer.Option(None, "--reason", help="Why the waived check is waived (with --waive)."),
    no_wait: bool = NoWaitOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Accept a rack: passing nodes become `accepted`; failing ones `quarantined` (and drained in Slurm)."""
    if bad := [w for w in waive if w not in WAIVABLE]:
        fail(f"--waive {bad[0]!r}: only {', '.join(WAIVABLE)} can be waived", BAD_INPUT)
    if waive and not (reason and reason.strip()):
        fail("--waive needs --reason TEXT: a waiver says why", BAD_INPUT)
    if reason is not None and not waive:
        fail("--reason is the reason for a --waive; give the check to waive", BAD_INPUT)
    check_no_wait(no_wait)
    who = operator_name(operator)
    at = datetime.now(UTC).isoformat(timespec="seconds")
    waivers = tuple(Waiver(w, who, (reason or "").strip()[:500], at) for w in dict.fromkeys(waive))
    if not ssh_config.is_file():
        fail(f"ssh config {ssh_config} not found (set --ssh-config or RACKLIFE_SSH_CONFIG)", BAD_INPUT)
    store = Store()
    try:
        given = [*(targets or []), *([nodes] if nodes and nodes.strip(",") else [])]  # a hostlist has its commas
        if nodes is not None and not given:
            fail("unknown node(s): (none given)", BAD_INPUT)
        names = select(store, given, racks=rack, pools=pool, all_=all_, selector=selector, racks_as_targets=True)
    finally:
        store.close()
    from lifecycle.cli._runs import controller, leave_running, progress
    from lifecycle.workflows import accept

    wid = f"accept-{os.urandom(6).hex()}"
    work = default_home() / "acceptance" / wid
    cfg = accept.AcceptSettings(
        level=level, work_dir=str(work), report_dir=str(report_dir or work / "reports"),
        operator=who, ssh_config=str(ssh_config.resolve()), profile=profile, waivers=waivers,
        burnin_python=burnin_python, max_in_flight=max_in_flight, timeout_s=timeout, multi_node=multi_node,
        nccl_binary=nccl_tests, multi_node_timeout_s=multi_node_timeout, multi_node_max_parallel=max_parallel)
    with controller("accept", no_wait=no_wait) as ctl:
        same = [r for r in ctl.cut_off("accept_nodes") if r.args and set(r.args[0]) == set(names)]
        if same:
            # The same request, cut off earlier: finish that run rather than start a second one.
            wid = same[0].run_id
            cfg = same[0].args[1]
            handle = ctl.handle(wid)
            err_console.print(f"resuming acceptance run {wid}, cut off earlier, with the settings it started "
                              f"with; reports in {cfg.report_dir}", markup=False)
        else:
            handle = ctl.start(accept.accept_nodes, names, cfg, workflow_id=wid, nodes=names)
            err_console.print(f"accepting {len(names)} node(s) at level {level} as run {wid}; "
                              f"reports in {cfg.report_dir}", markup=False)
        for w in cfg.waivers:
            err_console.print(f"WAIVED {w.check} by {w.by}: {w.reason}", markup=False)
        if no_wait:
            leave_running(ctl, as_json)
        with progress(names, f"acceptance run {wid}", runs=ctl.runs):
            verdicts: list[dict[str, Any]] = handle.get_result()
    if as_json:
        emit_json({"run_id": wid, "report_dir": cfg.report_dir, "waivers": [asdict(w) for w in cfg.waivers],
                   "nodes": verdicts})
    else:
        emit_table(f"acceptance {wid}", ["node", "verdict", "state", "why"],
                   [(v["node"], "REFUSED" if v.get("refused_by") else "PASS" if v["passed"] else "FAIL",
                     v["state"], "; ".join(v["reasons"])[:200]) for v in verdicts])
    if any(not v["passed"] and not v.get("refused_by") for v in verdicts):
        raise typer.Exit(FAILED)  # a node was tested and failed: that verdict wins over a refusal beside it
    if any(v.get("refused_by") for v in verdicts):
        raise typer.Exit(REFUSED)

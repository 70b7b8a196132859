"""`racklife bmc power off|graceful-off|cycle|reset --force` of a node in service: one workflow, not a BMC call.

Before, ``--force`` only lifted the refusal and the action went straight to
the BMC: Slurm held the node down, the store still said in service, and the
next `slurm join` failed it. This runs ``lifecycle.workflows.power_cycle``
(leave with racklife's drain, act, wait for the node, rejoin) through the one
controller helper, with --dry-run and confirmation as every change has.
Exit codes: 0 done, 1 failed (the node is quarantined or out of service, the
reason says which), 5 refused (someone else's drain, another run holds the
node, a state no power run takes); nothing was done.
"""

from __future__ import annotations

import getpass
from collections.abc import Sequence
from pathlib import Path

import typer

from lifecycle.cli._change import Change, go_ahead
from lifecycle.cli._common import BAD_INPUT, FAILED, REFUSED, emit_json, fail, out_console
from lifecycle.model.vocab import KeepJobsPolicy

_TAKES_BACK = {"cycle": "wait until it is back (a slurmd started after the action, answering), rejoin",
               "reset": "wait until it is back (a slurmd started after the action, answering), rejoin",
               "off": "leave it drained and powered off", "graceful-off": "leave it drained and powered off"}


def in_service(busy: Sequence[tuple[str, str]], action: str, *, policy: KeepJobsPolicy | None, deadline: str | None,
               back_timeout: float, kubeconfig: Path | None, yes: bool, dry_run: bool, as_json: bool) -> None:
    from lifecycle.cli.roleswap import leave_deadline

    deadline_s = leave_deadline(deadline)
    others = [f"{n} ({s})" for n, s in busy if s != "in_service"]
    if others:
        fail(f"refusing to power {action} {', '.join(others)}: another run is moving it in or out of its scheduler; "
             "let it finish (racklife workflows list)", REFUSED)
    if kubeconfig is not None and not kubeconfig.is_file():
        fail(f"--kubeconfig {kubeconfig}: no such file", BAD_INPUT)
    nodes = [n for n, _s in busy]
    leave = f"leave the scheduler with racklife's drain or cordon (policy {policy or 'the pool default'})"
    go_ahead(Change(f"power {action} in service, through a workflow", nodes,
                    [f"{n}: {leave}; power {action}; {_TAKES_BACK[action]}" for n in nodes]),
             yes=yes, dry_run=dry_run)
    from lifecycle.cli._runs import controller, progress
    from lifecycle.workflows import power_cycle
    from lifecycle.workflows.kube_pool import KubeSettings

    settings = power_cycle.PowerSettings(
        action=action.replace("-", "_"), operator=getpass.getuser(), policy=policy, deadline_s=deadline_s,
        back_wait_s=back_timeout, kube=KubeSettings(str(kubeconfig.resolve())) if kubeconfig is not None else None)
    with controller("bmc", command="racklife bmc power") as ctl:
        handles = [ctl.start_or_finish(power_cycle.power_in_service, n, settings) for n in nodes]
        with progress(nodes, f"power {action}"):
            outcomes = [h.get_result() for h in handles]
    if as_json:
        emit_json(outcomes)
    else:
        for o in outcomes:
            verdict = "ok" if o["ok"] else "REFUSED" if o["refused"] else "FAILED"
            out_console.print(f"{o['node']}: power {action} {verdict}; node {o['state']}; {o['reason']}",
                              markup=False, soft_wrap=True)
            if o["hint"]:
                out_console.print(f"  {o['hint']}", markup=False, soft_wrap=True)
    if all(o["ok"] for o in outcomes):
        return
    raise typer.Exit(REFUSED if all(o["ok"] or o["refused"] for o in outcomes) else FAILED)

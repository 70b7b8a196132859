"""`racklife role-swap NODE… --to POOL`: move nodes between the Slurm and Kubernetes pools, one safe run each.

Every node is one durable run (``lifecycle.workflows.roleswap``) holding its
lease: pre-checks, leave, move and role switch, re-test, join, and a
rollback or quarantine on failure. ``--dry-run`` runs the same pre-checks
without the engine and lists what the leave would touch; it changes nothing.
A request cut off by a killed controller is finished by the next
``racklife role-swap`` (the recovered run is awaited before anything new
starts on its node). ``--reimage`` reprovisions each node with the target
pool's image (the pool's ``image``, or ``--image NAME[:VERSION]``) after the
move and before the re-test, with the embedded boot server up for the
request. Exit codes: 0 every node swapped, 1 a swap failed
(rolled back or quarantined), 2 bad input, 5 refused by a pre-check.
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

if TYPE_CHECKING:
    from lifecycle.workflows.roleswap_checks import SwapSettings

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
from lifecycle.model.vocab import KeepJobsPolicy
from lifecycle.store.db import default_home

_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(s|m|h)?$")
_UNIT_S = {"s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


def leave_deadline(deadline: str | None) -> float | None:
    """``--deadline`` of a command that takes a node out of its scheduler, in seconds (its ``--policy`` is a
    :data:`KeepJobsPolicy`, checked by the option's choices)."""
    try:
        return parse_duration(deadline) if deadline is not None else None
    except ValueError as exc:
        fail(str(exc), BAD_INPUT)


def parse_duration(text: str) -> float:
    """``90``, ``90s``, ``30m``, ``2h`` in seconds; anything else is a ValueError naming the option."""
    m = _DURATION.match(text.strip())
    if m is None:
        raise ValueError(f"--deadline must be a duration like 90s, 30m or 2h, not {text!r}")
    return float(m[1]) * _UNIT_S[m[2]]


def role_swap_cmd(
    nodes: list[str] = typer.Argument(None, help="Node names or hostlists, each in service in the other pool."),
    rack: list[str] = RackOpt, pool: list[str] = PoolOpt, all_: bool = AllOpt, selector: str | None = SelectorOpt,
    to: str = typer.Option(..., "--to", help="The pool to move to (e.g. inference or training)."),
    policy: KeepJobsPolicy | None = typer.Option(None, "--policy", help="Slurm leave (default: the pool's)."),
    deadline: str | None = typer.Option(None, "--deadline",
                                        help="How long the leave waits for jobs or PodDisruptionBudgets (30m)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the plan and the pre-checks; change nothing."),
    reimage: bool = typer.Option(False, "--reimage", help="Reprovision with the target pool's image after the move."),
    image: str | None = typer.Option(None, "--image",
                                     help="With --reimage: NAME[:VERSION] (default: the target pool's image)."),
    images_dir: Path | None = typer.Option(None, "--images", help="Built images (default: $RACKLIFE_HOME/images)."),
    boot_listen: str = typer.Option("127.0.0.1:8069", "--boot-listen", envvar="RACKLIFE_BOOT_LISTEN",
                                    help="Where the embedded boot server listens (with --reimage)."),
    boot_url: str | None = typer.Option(None, "--boot-url", envvar="RACKLIFE_BOOT_URL",
                                        help="The boot server's URL as nodes see it (default: the listen address)."),
    boot_timeout: float = typer.Option(600.0, "--boot-timeout", envvar="RACKLIFE_BOOT_TIMEOUT_S", min=1,
                                       help="Seconds to wait for a node to phone home, per boot."),
    kubeconfig: Path | None = KubeconfigOpt,
    ssh_config: Path = typer.Option(Path.home() / ".ssh" / "config", "--ssh-config", envvar="RACKLIFE_SSH_CONFIG",
                                    help="SSH config that reaches the nodes (the re-test's burn-in)."),
    profile: str | None = typer.Option(None, "--profile", envvar="RACKLIFE_BURNIN_PROFILE",
                                       help="Burn-in profile for the re-test (default: each node's SKU)."),
    burnin_python: str = typer.Option("python3", "--burnin-python", envvar="RACKLIFE_BURNIN_PYTHON",
                                      help="Python on the nodes that has racklife's burnin package."),
    operator: str | None = typer.Option(None, "--operator", help="Who asks (default: the login name)."),
    no_wait: bool = NoWaitOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Move NODES to pool --to: leave, re-test, join; roll back or quarantine on failure."""
    from lifecycle.drivers.slurm.role import ROLE_CMD_ENV
    from lifecycle.store import NodeNotFound, Store, StoreError
    from lifecycle.workflows.accept import AcceptSettings
    from lifecycle.workflows.kube_pool import KubeSettings
    from lifecycle.workflows.roleswap_checks import SwapSettings, plan_lines, prechecks, touched

    deadline_s = leave_deadline(deadline)
    if image is not None and not reimage:
        fail("--image is only for --reimage", BAD_INPUT)
    if kubeconfig is None or not kubeconfig.is_file():
        fail("no kubeconfig: give --kubeconfig or set RACKLIFE_KUBECONFIG or KUBECONFIG (a role swap always "
             "reads the Kubernetes side)", BAD_INPUT)
    if not dry_run:
        check_no_wait(no_wait)
    who = operator_name(operator)
    store = Store()
    try:
        names = select(store, nodes or [], racks=rack, pools=pool, all_=all_, selector=selector)
        target = store.pool(to)
    except (NodeNotFound, StoreError) as exc:
        store.close()
        fail(str(exc), BAD_INPUT)
    except typer.Exit:  # the selection was bad input
        store.close()
        raise
    reimage_to = (image or target.image) if reimage else None
    if reimage and reimage_to is None:
        store.close()
        fail(f"--reimage: pool {to!r} names no image; give --image NAME[:VERSION] or set the pool's image "
             "in the inventory", BAD_INPUT)
    work = default_home() / "acceptance" / f"role-swap-{os.urandom(6).hex()}"
    settings = SwapSettings(
        target=to, operator=who, kube=KubeSettings(str(kubeconfig.resolve())),
        accept=AcceptSettings(level=target.retest_level, work_dir=str(work), report_dir=str(work / "reports"),
                              operator=who, ssh_config=str(ssh_config.resolve()), profile=profile,
                              burnin_python=burnin_python, max_in_flight=len(names), multi_node=False),
        role_cmd=tuple(shlex.split(os.environ.get(ROLE_CMD_ENV, ""))), policy=policy, deadline_s=deadline_s,
        batch=tuple(names), reimage=reimage_to)
    if dry_run:
        try:
            report = [{"node": n, "plan": plan_lines(store, n, settings),
                       **prechecks(store, n, settings).to_dict(), "would_touch": touched(store, n, settings)}
                      for n in names]
        finally:
            store.close()
        _print_dry_run(report, as_json)
        return
    if reimage_to is None:
        store.close()
        outcomes = _run(names, settings, no_wait, as_json)
    else:
        from dataclasses import replace

        from lifecycle.workflows.boot_run import BootSettings, BootSetupError, boot_server

        boot = BootSettings(images_dir or default_home() / "images", boot_listen, boot_url, boot_timeout)
        try:
            with boot_server(store, boot) as served:
                if reimage_to not in served.settings.images:
                    fail(f"--reimage: image {reimage_to!r} is not built (have: "
                         f"{', '.join(sorted(served.settings.images))})", BAD_INPUT)
                outcomes = _run(names, replace(settings, provision=served.settings), no_wait, as_json)
        except BootSetupError as exc:
            fail(str(exc), BAD_INPUT)
        finally:
            store.close()
    _print(outcomes, as_json)


def _run(names: list[str], settings: SwapSettings, no_wait: bool = False,
         as_json: bool = False) -> list[dict[str, Any]]:
    from lifecycle.cli._runs import controller, leave_running, progress
    from lifecycle.workflows import roleswap

    with controller("role-swap", no_wait=no_wait) as ctl:
        handles = [ctl.start_or_finish(roleswap.role_swap, n, node_settings(settings, n)) for n in names]
        if no_wait:
            leave_running(ctl, as_json)
        with progress(names, f"role swap of {len(names)} node(s) to {settings.target}", runs=ctl.runs):
            return [h.get_result() for h in handles]


def node_settings(settings: SwapSettings, node: str) -> SwapSettings:
    """The swap of one node of a request: its re-test works (and writes its evidence) in its own folder.

    The runs of one request re-test their nodes at the same time, each its own acceptance run;
    sharing one work folder, the second to finish found the first's evidence bundle there and
    failed ("an evidence bundle is written once"), leaving its node out of both pools.
    """
    work = Path(settings.accept.work_dir) / node
    return replace(settings, accept=replace(settings.accept, work_dir=str(work), report_dir=str(work / "reports")))


def _print_dry_run(report: list[dict[str, Any]], as_json: bool) -> None:
    if as_json:
        emit_json({"dry_run": True, "nodes": report})
    else:
        for r in report:
            out_console.print(f"{r['node']}: {r['source']} -> plan (dry run, nothing changed):", markup=False)
            for i, line in enumerate(r["plan"], 1):
                out_console.print(f"  {i}. {line}", markup=False, soft_wrap=True)
            for c in r["checks"]:
                out_console.print(f"  [{'ok' if c['ok'] else 'FAIL'}] {c['name']}: {c['detail']}", markup=False,
                                  soft_wrap=True)
            for t in r["would_touch"] or ["nothing running on it"]:
                out_console.print(f"  would touch: {t}", markup=False, soft_wrap=True)
    if not all(r["ok"] for r in report):
        raise typer.Exit(REFUSED)


def _print(outcomes: list[dict[str, Any]], as_json: bool) -> None:
    if as_json:
        emit_json(outcomes)
    else:
        emit_table("role swap", ["node", "result", "from", "to", "state", "phases", "reason"],
                   [(o["node"], "ok" if o["ok"] else "FAILED" if o["phases"] else "REFUSED", o["source"], o["target"],
                     o["state"],
                     ", ".join(f"{k} {v:.1f}s" for k, v in o["phases"].items()), o["reason"][:300])
                    for o in outcomes])
    if all(o["ok"] for o in outcomes):
        return
    refused = all(o["ok"] or not o["phases"] for o in outcomes)
    raise typer.Exit(REFUSED if refused else FAILED)

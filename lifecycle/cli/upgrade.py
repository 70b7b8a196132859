"""`racklife upgrade --pool P|--nodes … (--image NAME[:VERSION] | --firmware FILE --component C | --bios K=V… |
--slurm VERSION | --driver VERSION) …`
and `upgrade status|pause|resume|abort RUN`.

A rolling upgrade is one durable run (``lifecycle.workflows.upgrade``): the
nodes go batch by batch, canary first, each through the one per-node path
(leave under the policy, the change — reimage, firmware update or BIOS
settings through the node's BMC, its slurmd onto a Slurm release after the
run has moved slurmdbd and slurmctld first, or an NVIDIA driver through the
site's install hook and a reboot through the BMC —, re-test at its pool's
level (a driver upgrade's re-test must read the new driver from the node),
rejoin). This
module picks the nodes (in service, not already changed, with a BMC that can
take the change: an IPMI node is left out of a firmware or BIOS upgrade, with
the reason), plans the
batches within every pool's ``--max-unavailable`` and floor (``--dry-run``
prints them and changes nothing), brings the boot server up, and starts and
follows the run; the control commands send it messages through the database.
A run whose process died is adopted by ``resume`` or ``abort`` (the
controller recovers it, with the boot server up). Exit codes: 0 every node
changed, 1 the rollout failed, halted, was aborted or held nodes back, 2 bad
input, 5 refused (no room in a pool's limits).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

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
from lifecycle.cli._runs import NoWaitOpt, operator_name
from lifecycle.cli._select import AllOpt, RackOpt, SelectorOpt
from lifecycle.cli.kube import KubeconfigOpt
from lifecycle.cli.roleswap import parse_duration
from lifecycle.model.vocab import KeepJobsPolicy

if TYPE_CHECKING:
    from lifecycle.workflows.changes import ChangeSpec

app = typer.Typer(help="Rolling upgrades: batches within each pool's limits, canary first.")

ImagesOpt = typer.Option(None, "--images", help="Built images (default: $RACKLIFE_HOME/images).")
ListenOpt = typer.Option("127.0.0.1:8069", "--boot-listen", envvar="RACKLIFE_BOOT_LISTEN",
                         help="Where the embedded boot server listens.")
UrlOpt = typer.Option(None, "--boot-url", envvar="RACKLIFE_BOOT_URL",
                      help="The boot server's URL as nodes see it (default: the listen address).")
TimeoutOpt = typer.Option(600.0, "--boot-timeout", envvar="RACKLIFE_BOOT_TIMEOUT_S", min=1,
                          help="Seconds to wait for a node to phone home, per boot.")


@app.callback(invoke_without_command=True)
def upgrade_cmd(
    ctx: typer.Context,
    pool: list[str] = typer.Option([], "--pool", help="Upgrade every node of this pool (repeatable)."),
    nodes: str | None = typer.Option(None, "--nodes", help="Node names or hostlists, comma-separated "
                                                           "(node-[01-04],node-07)."),
    rack: list[str] = RackOpt, all_: bool = AllOpt, selector: str | None = SelectorOpt,
    image: str | None = typer.Option(None, "--image", help="The image to reimage with: NAME or NAME:VERSION."),
    firmware: Path | None = typer.Option(None, "--firmware", help="A firmware image to update --component with "
                                                                 "(Redfish UpdateService)."),
    component: str | None = typer.Option(None, "--component", help="With --firmware: the component (name or id)."),
    firmware_version: str | None = typer.Option(
        None, "--firmware-version", help="With --firmware: the version it installs (a node already on it is "
                                         "left out; one that reads another after the update fails)."),
    bios: list[str] | None = typer.Option(None, "--bios", help="A BIOS attribute KEY=VALUE to set (repeat it); "
                                                                 "applied by a reboot and read back."),
    slurm: str | None = typer.Option(None, "--slurm", help="A Slurm release (22.05.8): slurmdbd, then slurmctld, "
                                                           "then each node's slurmd, via $RACKLIFE_SLURM_DAEMON_CMD."),
    driver: str | None = typer.Option(None, "--driver", help="An NVIDIA driver version (550.127.08): installed by "
                                                             "$RACKLIFE_DRIVER_INSTALL_CMD, a reboot through the BMC, "
                                                             "then the re-test must read it."),
    max_unavailable: str = typer.Option("25%", "--max-unavailable",
                                        help="Per pool, nodes out of service at once: N or P%."),
    canary: int = typer.Option(1, "--canary", min=0, max=1000,
                               help="Nodes in the first batch; the run holds after it (0: no canary)."),
    policy: KeepJobsPolicy | None = typer.Option(None, "--policy", help="Slurm leave (default: the pool's)."),
    deadline: str | None = typer.Option(None, "--deadline",
                                        help="How long a leave waits for jobs or PodDisruptionBudgets (30m)."),
    window: str | None = typer.Option(None, "--window", help="Start batches only between HH:MM-HH:MM (UTC)."),
    auto_continue: bool = typer.Option(False, "--auto-continue", help="Do not hold after the canary."),
    halt_after: str = typer.Option("10%", "--halt-after",
                                   help="Halt when more nodes than this fail after the canary (P%)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the batches; change nothing."),
    images_dir: Path | None = ImagesOpt,
    boot_listen: str = ListenOpt,
    boot_url: str | None = UrlOpt,
    boot_timeout: float = TimeoutOpt,
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
    """Upgrade a pool (or nodes) in batches: leave, reimage, re-test, rejoin; canary first, then hold."""
    if ctx.invoked_subcommand is not None:
        return
    from lifecycle.cli import upgrade_start

    one_pool, names = _targets(pool, nodes, rack, all_, selector)
    change = _bmc_change(image, firmware, component, firmware_version, bios or [], slurm, driver)
    try:
        req = upgrade_start.Request.parse(
            pool=one_pool, nodes=names, image=image, max_unavailable=max_unavailable, canary=canary, policy=policy,
            deadline_s=parse_duration(deadline) if deadline is not None else None, window=window,
            auto_continue=auto_continue, halt_after=halt_after, operator=operator_name(operator),
            change=change)
    except ValueError as exc:
        fail(str(exc), BAD_INPUT)
    boot = upgrade_start.boot_settings(images_dir, boot_listen, boot_url, boot_timeout)
    accept = upgrade_start.accept_template(req.operator, ssh_config, profile, burnin_python)
    upgrade_start.start(req, boot, accept, kubeconfig, dry_run, as_json, no_wait)


def _targets(pools: list[str], nodes: str | None, racks: list[str], all_: bool,
             selector: str | None) -> tuple[str | None, str | None]:
    """(pool, None) for one whole pool (its floor and limits as the run's scope), else (None, "n1,n2,…").

    The nodes are named the way every command names them (lifecycle/cli/_select.py): --nodes takes
    names and hostlists, and --pool, --rack, --selector and --all select from the store.
    """
    from lifecycle.cli._select import select_names

    if not (nodes or pools or racks or all_ or selector):
        fail("name the nodes: --pool P, --nodes NODE,… (names or hostlists), --rack, --selector or --all", BAD_INPUT)
    names = select_names([nodes] if nodes else [], racks=racks, pools=pools, all_=all_, selector=selector)
    if len(pools) == 1 and not (nodes or racks or all_ or selector):
        return pools[0], None
    return None, ",".join(names)


def _bmc_change(image: str | None, firmware: Path | None, component: str | None, version: str | None,
                bios: list[str], slurm: str | None = None, driver: str | None = None) -> ChangeSpec | None:
    """The firmware, BIOS, Slurm or driver change asked for (None: an image); exactly one kind, or exit 2."""
    from lifecycle.workflows.changes import ChangeKind, ChangeSpec  # the engine only when a change is made

    if sum(x is not None and x != [] for x in (image, firmware, bios or None, slurm, driver)) != 1:
        fail("give exactly one change: --image NAME[:VERSION], --firmware FILE --component C, --bios KEY=VALUE, "
             "--slurm VERSION or --driver VERSION", BAD_INPUT)
    if driver is not None:
        from lifecycle.drivers.nvidia_driver import check_version, no_hook_reason

        try:
            wanted = check_version(driver)
        except ValueError as exc:
            fail(str(exc), BAD_INPUT)
        if (why := no_hook_reason()) is not None:
            fail(f"--driver needs the site's install hook: {why}; `racklife lab env` sets the lab's; nothing "
                 "changed", BAD_INPUT)
        return ChangeSpec(ChangeKind.DRIVER, wanted)
    if slurm is not None:
        from lifecycle.drivers.slurm.daemons import DAEMON_CMD_ENV, check_version

        try:
            check_version(slurm)
        except ValueError as exc:
            fail(str(exc), BAD_INPUT)
        if not os.environ.get(DAEMON_CMD_ENV, "").strip():
            fail(f"--slurm needs the site's daemon command in ${DAEMON_CMD_ENV} (docs/upgrade.md; "
                 "`racklife lab env` sets the lab's)", BAD_INPUT)
        return ChangeSpec(ChangeKind.SLURM, slurm.strip())
    if (component is not None or version is not None) and firmware is None:
        fail("--component and --firmware-version go with --firmware", BAD_INPUT)
    if firmware is not None:
        if component is None:
            fail("--firmware needs --component (racklife bmc firmware list NODE shows them)", BAD_INPUT)
        if not firmware.is_file():
            fail(f"{firmware}: no such file", BAD_INPUT)
        params = (("file", str(firmware.resolve())),) + ((("version", version),) if version else ())
        return ChangeSpec(ChangeKind.FIRMWARE, component, params)
    if bios:
        pairs: dict[str, str] = {}
        for item in bios:
            key, sep, value = item.partition("=")
            if not sep or not key or key in pairs:
                fail(f"--bios {item!r}: expected KEY=VALUE, each KEY once", BAD_INPUT)
            pairs[key] = value
        return ChangeSpec(ChangeKind.BIOS, ",".join(f"{k}={v}" for k, v in pairs.items()), tuple(pairs.items()))
    return None


RunArg = typer.Argument(..., help="The upgrade run's id (printed when it started).")


@app.command("status")
def status_cmd(run: str = RunArg, as_json: bool = JsonOpt) -> None:
    """Show an upgrade run: its phase, batches, every node's result and the jobs and pods it touched, and a
    pause or abort sent but not yet read (it is read when the nodes in flight have finished)."""
    status, report, pending = _read(run)
    asked = _requested(pending)
    if as_json:
        emit_json({"run": run, "status": status, "report": report, "requested": asked,
                   "pending_commands": pending})
        return
    print_report(report, status)
    if asked is not None:
        out_console.print(f"  requested: {asked['command']} (sent, not yet read by the run: it is read when the "
                          f"nodes in flight have finished their cycle; then {asked['then']})", markup=False,
                          soft_wrap=True)


@app.command("pause")
def pause_cmd(run: str = RunArg, as_json: bool = JsonOpt) -> None:
    """Pause an upgrade run before its next batch (nodes in flight finish their cycle)."""
    _send(run, "pause")
    if as_json:
        emit_json({"run": run, "sent": "pause"})
    err_console.print(f"{run}: pause sent; it takes effect before the next batch", markup=False)


@app.command("resume")
def resume_cmd(run: str = RunArg, images_dir: Path | None = ImagesOpt, boot_listen: str = ListenOpt,
               boot_url: str | None = UrlOpt, boot_timeout: float = TimeoutOpt, as_json: bool = JsonOpt) -> None:
    """Resume a held or paused upgrade run; adopt it here if its process is gone."""
    from lifecycle.cli import upgrade_start

    _send(run, "resume")
    upgrade_start.adopt(run, upgrade_start.boot_settings(images_dir, boot_listen, boot_url, boot_timeout), as_json)


@app.command("abort")
def abort_cmd(run: str = RunArg, images_dir: Path | None = ImagesOpt, boot_listen: str = ListenOpt,
              boot_url: str | None = UrlOpt, boot_timeout: float = TimeoutOpt, as_json: bool = JsonOpt) -> None:
    """Abort an upgrade run: no further node starts; nodes in flight finish (new, or quarantined)."""
    from lifecycle.cli import upgrade_start

    _send(run, "abort")
    upgrade_start.adopt(run, upgrade_start.boot_settings(images_dir, boot_listen, boot_url, boot_timeout), as_json)


def _read(run: str) -> tuple[str, dict[str, Any] | None, list[str]]:
    """The run's status, its last published report and the control messages it has not read yet."""
    from lifecycle.workflows import engine
    from lifecycle.workflows.upgrade import STATUS, TOPIC

    insp = engine.Inspector()
    try:
        info = insp.get_run(run)
        if info is None or not info.name.endswith("upgrade"):
            fail(f"no upgrade run {run!r}", BAD_INPUT)
        report = info.output if info.status == "SUCCESS" and isinstance(info.output, dict) else insp.event(run,
                                                                                                          STATUS)
        pending = [str(m) for m in insp.pending_messages(run, TOPIC)] if info.status == "PENDING" else []
        return info.status, report, pending
    finally:
        insp.close()


def _requested(pending: list[str]) -> dict[str, str] | None:
    """What the unread control messages will do (``upgrade.requested``), for people and JSON."""
    from lifecycle.workflows.upgrade import WHEN_READ, requested

    command = requested(pending)
    return None if command is None else {"command": command.value, "then": WHEN_READ[command]}


def _send(run: str, command: str) -> None:
    from lifecycle.workflows import engine
    from lifecycle.workflows.upgrade import TOPIC

    insp = engine.Inspector()
    try:
        info = insp.get_run(run)
        if info is None or not info.name.endswith("upgrade"):
            fail(f"no upgrade run {run!r}", BAD_INPUT)
        if info.status != "PENDING":
            fail(f"upgrade run {run} is {info.status}: it takes no more commands", BAD_INPUT)
        insp.send(run, command, TOPIC)
    finally:
        insp.close()


def print_report(report: dict[str, Any] | None, status: str = "") -> None:
    if report is None:
        out_console.print(f"no report published yet ({status})", markup=False)
        return
    out_console.print(f"{report['run']}: {report['change']}: {report['phase']}"
                      f"{' (' + status + ')' if status else ''}: {report['message']}", markup=False, soft_wrap=True)
    for i, b in enumerate(report["batches"], 1):
        out_console.print(f"  batch {i}: {', '.join(b)}", markup=False, soft_wrap=True)
    if report["nodes"]:
        emit_table("nodes", ["node", "batch", "result", "state", "reason"],
                   [(n["node"], n["batch"] + 1, "ok" if n["ok"] else "skipped" if n["skipped"] else "FAILED",
                     n["state"], n["reason"][:200]) for n in report["nodes"]])
    for t in report["touched"]:
        out_console.print(f"  touched: {t}", markup=False, soft_wrap=True)
    if report["pending"]:
        out_console.print(f"  not started: {', '.join(report['pending'])}", markup=False, soft_wrap=True)


def follow(handle: Any, say: Any) -> dict[str, Any]:
    """Await the run, saying each change of its published phase (a hold, a pause, a batch).

    The report is read through the database, so this works for a run of this process and for one
    handed to ``racklife serve``.
    """
    from lifecycle.workflows import engine
    from lifecycle.workflows.upgrade import STATUS, TOPIC

    run = handle.get_workflow_id()
    last = ""
    insp = engine.Inspector()
    try:
        while handle.get_status().status in ("PENDING", "ENQUEUED"):
            report = insp.event(run, STATUS)
            line = f"{report['phase']}: {report['message']}" if isinstance(report, dict) else ""
            asked = _requested([str(m) for m in insp.pending_messages(run, TOPIC)])
            if line and asked is not None:
                line += f" ({asked['command']} requested: read when the nodes in flight have finished)"
            if line and line != last:
                say(f"{run}: {line}")
                last = line
            time.sleep(1.0)
    finally:
        insp.close()
    result: dict[str, Any] = handle.get_result()
    return result


def finish(report: dict[str, Any], as_json: bool) -> None:
    if as_json:
        emit_json(report)
    else:
        print_report(report)
    if report["phase"] != "done" or report["failed"] or any(n["skipped"] for n in report["nodes"]):
        raise typer.Exit(FAILED)


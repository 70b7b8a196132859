"""`racklife lab up|status|down|inventory|env|fault`: an emulated rack on this machine.

`up` starts the lab's supervisor process (``lifecycle.lab.rack``) in the
background and waits until every node booted and every Slurm node is idle;
the other commands read the state file it keeps. `down` works from names
alone, so it also cleans up after a lab that crashed, and `up` does the same
before it starts. See docs/lab.md for what is real and what is simulated.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import typer

from lifecycle.cli._change import Change, DryRunOpt, YesOpt, go_ahead
from lifecycle.cli._common import (
    FAILED,
    REFUSED,
    UNAVAILABLE,
    JsonOpt,
    emit_json,
    emit_table,
    err_console,
    fail,
    out_console,
)
from lifecycle.cli.slurm import TOKEN_ENV
from lifecycle.lab import netns, rack
from lifecycle.lab.faults import BMC_PROFILES, PROFILES, Fault, FaultFileError, load_faults, read_fault, write_fault
from lifecycle.model.skus import SKUS

app = typer.Typer(help="An emulated GPU rack on this machine (needs root).", no_args_is_help=True)

CONTROLLER_DIR = "controller"  # the controller's RACKLIFE_HOME for this lab, inside the lab directory
DirOpt = typer.Option(rack.DEFAULT_LAB_DIR, "--dir", envvar="RACKLIFE_LAB_DIR",
                      help="Lab directory ('racklife lab env' exports it for the lab's clients).")
PrefixOpt = typer.Option(netns.DEFAULT_PREFIX, "--prefix", help="Name prefix of the lab's namespaces.")


def _state_or_exit(lab_dir: Path) -> dict[str, Any]:
    state = rack.read_state(lab_dir)
    if state is None or not rack.supervisor_alive(state) or state.get("phase") != "ready":
        fail(f"no lab is running in {lab_dir} (start one with 'racklife lab up')", REFUSED)
    return state


@app.command("up")
def up(
    nodes: int = typer.Option(8, "--nodes", help="Number of simulated nodes."),
    racks: int = typer.Option(0, "--racks", help="Number of racks (default: one per 8 nodes)."),
    faults: Path | None = typer.Option(None, "--faults", help="YAML: node name -> fault profile."),
    boot_time: float = typer.Option(1.0, "--boot-time", help="Seconds a node takes to boot."),
    ipmi_every: int = typer.Option(4, "--ipmi-every",
                                   help="Every Nth node gets an IPMI BMC, the others Redfish (0: all Redfish)."),
    inference: int | None = typer.Option(None, "--inference",
                                         help="Nodes in the inference pool (Kubernetes), the last ones; the "
                                              "others are in training (Slurm). Default: a quarter."),
    with_vm: bool = typer.Option(False, "--with-vm",
                                 help=f"Add {rack.VM_NAME}: a QEMU VM that network-boots via dnsmasq and iPXE."),
    lab_dir: Path = DirOpt,
    prefix: str = PrefixOpt,
    timeout: float = typer.Option(180.0, "--timeout", help="Seconds to wait for the lab to be ready."),
    accounting: bool = typer.Option(True, "--accounting/--no-accounting",
                                    help="Run slurmdbd with MariaDB and account every job (sacct, sreport)."),
    keep_store: bool = typer.Option(
        False, "--keep-store",
        help="Keep the previous lab's controller store (its nodes and history). By default a new lab "
             "gets a new store and the previous one is moved aside."),
    as_json: bool = JsonOpt,
) -> None:
    """Bring up a lab: nodes in network namespaces with sshd and slurmd, BMCs, Slurm."""
    if os.geteuid() != 0:
        fail("the lab needs root (network namespaces, daemons)", REFUSED)
    state = rack.read_state(lab_dir)
    if rack.supervisor_alive(state):
        fail(f"a lab is already running in {lab_dir}; run 'racklife lab down' first", REFUSED)
    _refuse_another_labs(lab_dir, state, prefix)
    config = rack.RackConfig(lab_dir=lab_dir, nodes=nodes, racks=racks, boot_time_s=boot_time,
                             prefix=prefix, ready_timeout_s=timeout, with_vm=with_vm,
                             slurm_accounting=accounting, ipmi_every=ipmi_every, inference=inference)
    try:
        if faults is not None:
            gpus = SKUS[config.sku].gpu_count
            config = replace(config, faults=load_faults(faults, {n: gpus for n in config.names()}))
        config.validate()
    except (FaultFileError, ValueError) as exc:
        fail(str(exc))
    rack.cleanup(lab_dir, prefix)  # what a crashed lab left
    lab_dir.mkdir(parents=True, exist_ok=True)
    store_note = fresh_controller_store(lab_dir, keep=keep_store)
    rack.write_json(lab_dir / rack.CONFIG_FILE, config.to_json())
    (lab_dir / rack.STATE_FILE).unlink(missing_ok=True)
    started = time.monotonic()
    with (lab_dir / "supervisor.log").open("ab") as log:
        # setsid -f: the supervisor is not our child, so it outlives this command.
        subprocess.run(["setsid", "-f", sys.executable, "-m", "lifecycle.lab.rack", "serve", str(lab_dir)],
                       stdin=subprocess.DEVNULL, stdout=log, stderr=log, check=True)
    while True:
        state = rack.read_state(lab_dir)
        phase = state.get("phase") if state else None
        if state is not None and phase == "ready":
            break
        waited = time.monotonic() - started
        if phase == "failed" or (state and not rack.supervisor_alive(state)) or (state is None and waited > 30):
            why = (state or {}).get("error") or f"see {lab_dir / 'supervisor.log'}"
            rack.cleanup(lab_dir, prefix)
            fail(f"the lab did not start: {why}", FAILED)
        if waited > timeout + 30:
            rack.cleanup(lab_dir, prefix)
            fail(f"the lab was not ready after {timeout:.0f} s; see {lab_dir / 'supervisor.log'}", FAILED)
        time.sleep(0.2)
    ready_s = round(time.monotonic() - started, 1)
    if as_json:
        emit_json({**state, "ready_s": ready_s, "controller_store": store_note})
    else:
        vm = f" and {rack.VM_NAME} (QEMU, powered off until its BMC powers it on)" if with_vm else ""
        out_console.print(f"lab up: {nodes} nodes{vm} ready in {ready_s} s; 'racklife lab env' for the client setup")
        out_console.print(store_note, markup=False)


def fresh_controller_store(lab_dir: Path, *, keep: bool) -> str:
    """A new lab gets a new controller store; say what happened to the previous one.

    The previous lab's store describes nodes that no longer exist (same names,
    new machines): kept, they look ``in_service`` and the new lab's first
    import is refused. It is moved aside, never deleted.
    """
    home = lab_dir / CONTROLLER_DIR
    if not home.is_dir() or not any(home.iterdir()):
        return f"controller store: new, in {home}"
    if keep:
        return f"controller store: kept the previous lab's, in {home} (--keep-store)"
    aside = lab_dir / f"{CONTROLLER_DIR}.{time.strftime('%Y%m%dT%H%M%S')}"
    n = 1
    while aside.exists():
        n += 1
        aside = aside.with_name(f"{CONTROLLER_DIR}.{time.strftime('%Y%m%dT%H%M%S')}.{n}")
    home.rename(aside)
    return f"controller store: new, in {home}; the previous lab's is in {aside} (--keep-store keeps it in place)"


@app.command("status")
def status(lab_dir: Path = DirOpt, as_json: bool = JsonOpt) -> None:
    """Nodes, their power and BMCs, and the paths clients need."""
    state = rack.read_state(lab_dir)
    alive = rack.supervisor_alive(state)
    if state is None:
        fail(f"no lab in {lab_dir}", REFUSED)
    if not alive:
        # What the state file says of power and Slurm was true when the lab stopped; it is not now.
        if as_json:
            emit_json({"lab_dir": str(lab_dir), "running": False, "phase": state.get("phase"),
                       "nodes": [{"name": n["name"], "pool": n.get("pool")} for n in state.get("nodes", [])]})
        else:
            out_console.print(f"lab {lab_dir}: not running (last phase: {state.get('phase')}); its nodes "
                              f"{', '.join(n['name'] for n in state.get('nodes', [])) or '-'} are down; "
                              "'racklife lab up' starts a lab", markup=False, soft_wrap=True)
        return
    faults = {n["name"]: "-" if n.get("kind") == "vm" else _fault_of(Path(n["dir"])) for n in state.get("nodes", [])}
    if as_json:
        emit_json({**state, "running": alive,
                   "nodes": [{**n, "fault": faults[n["name"]]} for n in state.get("nodes", [])]})
        return
    out_console.print(f"lab {lab_dir}: {state.get('phase')}{'' if alive else ' (supervisor not running)'}")
    dhcp = state.get("dhcp") or {}
    if dhcp:
        leases = dhcp.get("leases") or []
        out_console.print(f"dnsmasq: {'pid ' + str(dhcp['pid']) if dhcp.get('pid') else 'not running'} on "
                          f"{dhcp.get('interface')}, {len(leases)} lease(s)"
                          + "".join(f"; {x['ip']} to {x['mac']}" for x in leases) + f" (log {dhcp.get('log')})")
    if state.get("slurm_rest_url"):
        out_console.print(f"slurmrestd: {state['slurm_rest_url']} (token: 'racklife lab env')")
    if state.get("slurmdbd"):
        out_console.print(f"slurmdbd: {state['slurmdbd']} (accounting: sacct, sreport)", markup=False)
    for note in state.get("notes") or []:
        out_console.print(f"note: {note}")
    emit_table(None, ["node", "pool", "address", "bmc", "power", "state", "fault"], [
        (n["name"], n["pool"], n["address"], f"{n['bmc']['driver']} {n['bmc']['address']}" if n["bmc"] else "",
         n["power"], n["state"], faults[n["name"]]) for n in state.get("nodes", [])])


def _fault_of(node_dir: Path) -> str:
    try:
        f = read_fault(node_dir)
    except (OSError, ValueError, KeyError):
        return "?"
    return f.profile if f.profile == "healthy" else f"{f.profile} (gpu {f.gpu})"


def _refuse_another_labs(lab_dir: Path, state: dict[str, Any] | None, prefix: str) -> None:
    """Namespaces of ``prefix`` that this directory's lab did not make belong to another lab: never touch them."""
    if state is not None and str(state.get("prefix", netns.DEFAULT_PREFIX)) == prefix:
        return  # this lab's own, left by a crash: up and down clean them up
    theirs = netns.running(prefix)
    if theirs:
        fail(f"namespaces {', '.join(theirs)} belong to another lab than {lab_dir}'s (prefix {prefix!r})", REFUSED,
             hint="racklife lab down --dir THAT_LAB for it, or --prefix another for this one")


@app.command("down")
def down(lab_dir: Path = DirOpt, prefix: str = PrefixOpt, as_json: bool = JsonOpt,
         yes: bool = YesOpt, dry_run: bool = DryRunOpt) -> None:
    """Stop the lab in --dir (also after a crash) and remove its namespaces and processes, and no other lab's.

    Asks first (--yes where there is no terminal; --dry-run to see what it would stop).
    """
    state = rack.read_state(lab_dir)
    if state is None:
        _refuse_another_labs(lab_dir, state, prefix)
        if as_json:
            emit_json({"lab_dir": str(lab_dir), "removed": []})
        else:
            out_console.print(f"lab down: no lab in {lab_dir}, nothing was running", markup=False)
        return
    prefix = str(state.get("prefix", prefix))
    alive = rack.supervisor_alive(state)
    go_ahead(Change("tear down the lab", [str(lab_dir)],
                    [f"supervisor pid {state.get('pid')} and every daemon of the lab stopped" if alive
                     else "the lab's supervisor is not running: what it left is removed",
                     f"namespaces {', '.join(netns.running(prefix)) or '(none left)'} removed"]),
             yes=yes, dry_run=dry_run)
    removed = rack.cleanup(lab_dir, prefix)
    left = netns.running(prefix)
    if left:
        fail(f"namespaces left behind: {', '.join(left)}", FAILED)
    if as_json:
        emit_json({"removed": removed})
    else:
        out_console.print("lab down" + (f": removed {', '.join(removed)}" if removed else ": nothing was running"))


@app.command("inventory")
def inventory(lab_dir: Path = DirOpt) -> None:
    """Print the running lab's inventory YAML (every other command accepts it)."""
    state = _state_or_exit(lab_dir)
    sys.stdout.write(Path(state["inventory"]).read_text(encoding="utf-8"))


def parse_exports(text: str) -> dict[str, str]:
    """The variables a `racklife lab env` output sets (what `eval` would do), for programs."""
    found: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("export "):
            key, _, value = line.removeprefix("export ").partition("=")
            found[key] = shlex.split(value)[0]
    return found


@app.command("env")
def env(
    lab_dir: Path = DirOpt,
    slurm_jwt: bool = typer.Option(
        False, "--slurm-jwt",
        help="Also export SLURM_JWT (for curl and Slurm's own REST clients). With it set, every Slurm "
             "command authenticates by JWT instead of munge, and srun's step launch fails."),
    as_json: bool = JsonOpt,
) -> None:
    """Print shell exports for clients of the running lab: eval "$(racklife lab env)".

    Under -o json (yaml) the same variables as a document: {"lab_dir", "env": {NAME: value}}.

    The slurmrestd token is minted on each call (valid 12 h) and exported as
    RACKLIFE_SLURM_JWT (what `racklife slurm status --rest-url` reads).
    """
    state = _state_or_exit(lab_dir)
    q = shlex.quote
    lines = [f"export RACKLIFE_LAB_DIR={q(str(state['lab_dir']))}",  # the next lab command finds this lab
             f"export SLURM_CONF={q(state['slurm_conf'])}",
             f"export RACKLIFE_INVENTORY={q(state['inventory'])}",
             f"export RACKLIFE_LAB_SSH_CONFIG={q(state['ssh_config'])}",
             f"# SSH config: {state['ssh_config']}  (ssh -F \"$RACKLIFE_LAB_SSH_CONFIG\" NODE)",
             # The controller's own state for this lab lives beside it.
             f"export RACKLIFE_HOME={q(str(Path(state['lab_dir']) / CONTROLLER_DIR))}"]
    lines.append(f"export RACKLIFE_SSH_CONFIG={q(state['ssh_config'])}")
    burnin = state.get("burnin") or {}
    if burnin.get("profile"):
        lines += [f"export RACKLIFE_BURNIN_PROFILE={q(burnin['profile'])}",
                  f"export RACKLIFE_BURNIN_PYTHON={q(burnin['python'])}"]
    boot = state.get("boot")
    if boot:
        lines += [f"export RACKLIFE_BOOT_LISTEN={q(boot['listen'])}", f"export RACKLIFE_BOOT_URL={q(boot['url'])}"]
    rest_url = state.get("slurm_rest_url")
    if rest_url:
        lines.append(f"export RACKLIFE_SLURM_REST_URL={q(rest_url)}")
        try:
            token = rack.slurm_token(state)
        except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
            # Everything else in the environment still works: say so, on stderr and in the output.
            err_console.print(f"racklife lab env: no slurmrestd token: {exc}")
            lines.append("# slurmrestd token: could not be minted (see stderr)")
        else:
            lines += [f"# slurmrestd JWT, valid {rack.JWT_LIFESPAN_S // 3600} h: "
                      'racklife slurm status --rest-url "$RACKLIFE_SLURM_REST_URL"',
                      f"export {TOKEN_ENV}={q(token)}"]
            if slurm_jwt:
                lines.append(f"export SLURM_JWT={q(token)}")
    # The lab's slurm.conf hook (decommission): the node out of the lab's Slurm files, slurmctld restarted.
    conf_hook = [sys.executable, "-m", "lifecycle.lab.slurm_remove", "--lab-dir", str(state["lab_dir"])]
    lines.append(f"export RACKLIFE_SLURM_CONF_CMD={q(shlex.join(conf_hook))}")
    # The lab's daemon hook (a Slurm upgrade): restart slurmdbd, the slurmctld or one slurmd in the lab.
    daemon_hook = [sys.executable, "-m", "lifecycle.lab.slurm_daemons", "--lab-dir", str(state["lab_dir"])]
    lines.append(f"export RACKLIFE_SLURM_DAEMON_CMD={q(shlex.join(daemon_hook))}")
    # The lab's driver install hook (a driver upgrade): the node's next boot loads the version.
    driver_hook = [sys.executable, "-m", "lifecycle.lab.driver_install", "--lab-dir", str(state["lab_dir"])]
    lines.append(f"export RACKLIFE_DRIVER_INSTALL_CMD={q(shlex.join(driver_hook))}")
    # Its registration hook (a Pulumi SlurmNodeRegistration): the node's line and partition back in, restarted.
    lines.append(f"export RACKLIFE_SLURM_ADD_CMD={q(shlex.join([*conf_hook, '--add']))}")
    if state.get("kubeconfig"):
        lines.insert(1, f"export KUBECONFIG={q(state['kubeconfig'])}")
        # The lab's node-role hook (role swap, elastic capacity): stop or boot slurmd, register the Node.
        hook = [sys.executable, "-m", "lifecycle.lab.slurm_power", "role-switch", "--conf", str(state["slurm_conf"]),
                "--kubeconfig", str(state["kubeconfig"])]
        lines.append(f"export RACKLIFE_NODE_ROLE_CMD={q(shlex.join(hook))}")
    else:
        lines.append("# KUBECONFIG: this lab has no Kubernetes stand-in")
    if as_json:  # the variables themselves, for a program that would otherwise parse shell
        emit_json({"lab_dir": str(state["lab_dir"]), "env": parse_exports("\n".join(lines))})
        return
    sys.stdout.write("\n".join(lines) + "\n")


def _bmc_fault(address: str, faults: dict[str, bool]) -> None:
    """Tell the lab's Redfish emulator (loopback only) which faults this BMC shows from now on."""
    import urllib.request
    from urllib.parse import urlsplit

    parts = urlsplit(address)
    if parts.hostname not in ("127.0.0.1", "localhost") or parts.scheme != "http":
        fail(f"{address} is not a lab BMC on loopback")
    request = urllib.request.Request(f"{address.rstrip('/')}/_emulator/faults", method="PUT",  # noqa: S310
                                     data=json.dumps(faults).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:  # noqa: S310 - loopback http, checked above
            reply.read()
    except OSError as exc:
        fail(f"the lab's BMC at {address} did not take the fault: {exc}", UNAVAILABLE)


@app.command("fault")
def fault(
    node: str = typer.Argument(..., help="Node name."),
    profile: str = typer.Argument(..., help=f"One of: {', '.join([*PROFILES, *BMC_PROFILES])}."),
    gpu: int = typer.Option(0, "--gpu", help="GPU (or IB port, for ib-down) the fault hits."),
    lab_dir: Path = DirOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Inject a fault into a running node (its tools, or with a bmc- profile its BMC), from the next call."""
    state = _state_or_exit(lab_dir)
    dirs = {n["name"]: Path(n["dir"]) for n in state["nodes"] if n.get("kind") != "vm"}
    if node not in dirs:
        fail(f"no simulated node '{node}' in the lab (nodes: {', '.join(sorted(dirs))}; a VM has no fake GPUs)")
    if profile in BMC_PROFILES:
        bmc = next(n.get("bmc") or {} for n in state["nodes"] if n["name"] == node)
        if bmc.get("driver") != "redfish":
            fail(f"{node}'s BMC is {bmc.get('driver')}: BMC faults are for the lab's Redfish emulator")
        _bmc_fault(str(bmc["address"]), BMC_PROFILES[profile][1])
        if as_json:
            emit_json({"node": node, "fault": profile, "bmc": True})
        else:
            out_console.print(f"{node}: {profile} (its BMC)")
        return
    try:
        write_fault(dirs[node], Fault(profile, gpu))
    except ValueError as exc:
        fail(str(exc))
    if as_json:
        emit_json({"node": node, "fault": profile, "gpu": None if profile == "healthy" else gpu})
    else:
        out_console.print(f"{node}: {profile}" + ("" if profile == "healthy" else f" (gpu {gpu})"))

"""`racklife bmc …`: talk to the BMCs of the nodes named (the one node selection), or to one by --address.

Why it exists: an operator racking a server needs to check power, set the boot device, read the
inventory, the SEL and the sensors without writing code, with the same drivers the workflows use.
Exit codes tell scripts what happened: 0 ok, 2 bad input, 3 BMC unreachable, 4 auth failed,
5 the BMC refused the operation. Passwords come from the environment (or the inventory's
credentials reference) and never appear in output, JSON or error messages. Which BMCs, and how
several nodes' outcomes are reported: ``bmc_targets.py``.
"""

from __future__ import annotations

from dataclasses import asdict
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from lifecycle.cli._change import Change, DryRunOpt, YesOpt, go_ahead, refuse_scheduled, scheduled
from lifecycle.cli._common import BAD_INPUT, JsonOpt, emit_table, error_exit, out_console
from lifecycle.cli.bmc_targets import (
    AddressOpt,
    AllOpt,
    Bmc,
    DriverChoice,
    DriverOpt,
    InsecureOpt,
    InventoryOpt,
    NodeOpt,
    PasswordEnvOpt,
    PoolOpt,
    RackOpt,
    Selection,
    SelectorOpt,
    SystemOpt,
    TargetsArg,
    UserOpt,
    _Target,
    each,
    report,
    resolve,
    stop_on_one_error,
)
from lifecycle.drivers.bmc.base import BootDevice, BootMode, HardwareInventory, LogEntry, PowerAction, PowerState
from lifecycle.model.vocab import KeepJobsPolicy

app = typer.Typer(help="Power, boot device, inventory, SEL, sensors, firmware and BIOS of one BMC.",
                  no_args_is_help=True)


class PowerCommand(StrEnum):
    STATUS = "status"
    ON = "on"
    OFF = "off"
    GRACEFUL_OFF = "graceful-off"
    CYCLE = "cycle"
    RESET = "reset"


# The power actions that take a running system down: asked for, and refused on a node in service.
_TAKES_DOWN = frozenset({PowerCommand.OFF, PowerCommand.GRACEFUL_OFF, PowerCommand.CYCLE, PowerCommand.RESET})


def _selection(targets: list[str] | None, node: str | None, rack: list[str], pool: list[str], all_: bool,
               selector: str | None, inventory: Path | None, address: str | None, driver: DriverChoice,
               user: str | None, password_env: str | None, insecure: bool, system: str | None) -> list[Bmc]:
    return resolve(Selection(tuple(targets or ()), node, tuple(rack), tuple(pool), all_, selector, inventory,
                             address, driver, user, password_env, insecure, system))


@app.command()
def power(
    action: Annotated[PowerCommand, typer.Argument(help="status, on, off, graceful-off, cycle "
                                                        "or reset.")],
    targets: TargetsArg = None, rack: RackOpt = [], pool: PoolOpt = [], all_: AllOpt = False,  # noqa: B006
    selector: SelectorOpt = None, node: NodeOpt = None,
    inventory: InventoryOpt = None, address: AddressOpt = None,
    driver: DriverOpt = DriverChoice.REDFISH, user: UserOpt = None,
    password_env: PasswordEnvOpt = None, insecure: InsecureOpt = False, system: SystemOpt = None,
    as_json: bool = JsonOpt,
    yes: bool = YesOpt, dry_run: bool = DryRunOpt,
    force: bool = typer.Option(False, "--force", help="On a node in service: run the action as a workflow that "
                                                      "leaves the scheduler, acts and rejoins (refused without it)."),
    policy: KeepJobsPolicy | None = typer.Option(None, "--policy",
                                                 help="With --force, Slurm leave (default: the pool's)."),
    deadline: str | None = typer.Option(None, "--deadline", help="With --force: how long the leave waits for jobs "
                                                                "or PodDisruptionBudgets (30m)."),
    back_timeout: float = typer.Option(600.0, "--back-timeout", min=1, help="With --force: seconds the node may take "
                                                                            "to be back after cycle or reset."),
    kubeconfig: Path | None = typer.Option(None, "--kubeconfig", envvar=["RACKLIFE_KUBECONFIG", "KUBECONFIG"],
                                           help="With --force on a Kubernetes pool's node: the cluster."),
) -> None:
    """Show or change power. Asking for the state the system is in already does nothing.

    off, graceful-off, cycle and reset ask first (--yes where there is no
    terminal; --dry-run to see what would happen), and are refused on a node a
    scheduler is using unless --force. With --force, a node in service goes
    through one workflow (racklife bmc power … --force, lifecycle/workflows/
    power_cycle.py): leave its scheduler with racklife's own drain or cordon
    (--policy, --deadline), the action, wait until it is back (cycle, reset)
    and rejoin, lifting only racklife's drain; after off it stays drained and
    the output says how to bring it back. A drain someone else holds refuses it.
    Several nodes: one result per node (reads up to 8 BMCs at a time).
    """
    bmcs = _selection(targets, node, rack, pool, all_, selector, inventory, address, driver, user, password_env,
                      insecure, system)
    named = [b.label for b in bmcs if b.spec is not None]
    busy = scheduled(named, address) if action in _TAKES_DOWN else []
    if busy:
        what = f"power {action.value}"
        if not force:
            refuse_scheduled(busy, what, "take it out first (racklife slurm leave / role-swap), or --force to run "
                                         "it as one workflow: leave the scheduler, act, wait for the node, rejoin")
        rest = [n for n in named if n not in {n for n, _s in busy}]  # --address is the one node it belongs to
        if rest:
            error_exit(f"the selection mixes nodes a scheduler is using ({', '.join(n for n, _s in busy)}) with "
                       f"nodes it is not ({', '.join(rest)}): --force runs the first through the power workflow; "
                       "name them separately (--selector state=in_service)", BAD_INPUT)
        from lifecycle.cli.bmc_power import in_service

        in_service(busy, action.value, policy=policy, deadline=deadline, back_timeout=back_timeout,
                   kubeconfig=kubeconfig, yes=yes, dry_run=dry_run, as_json=as_json)
        return
    states = each(bmcs, lambda t: t.driver.power_state())
    if action is PowerCommand.STATUS:
        report(states, as_json=as_json, doc=lambda label, st: {"bmc": label, "power": st.value},
               show=lambda label, st: out_console.print(f"{label}: power {st.value}"))
        return
    stop_on_one_error(states)
    wanted = PowerAction(action.value.replace("-", "_"))
    before = {o.label: o.value for o in states if o.value is not None}
    changing = [label for label, st in before.items() if _changes(st, wanted)]
    if dry_run or (action in _TAKES_DOWN and changing):
        effects = [f"{label}: power is {st.value} now" + ("" if _changes(st, wanted) else ": nothing to do")
                   for label, st in before.items()]
        if len(bmcs) == 1:
            effects = [e.split(": ", 1)[1] for e in effects]
        go_ahead(Change(f"power {action.value}", [b.label for b in bmcs], effects),
                 yes=yes or action not in _TAKES_DOWN, dry_run=dry_run)
    reachable = [b for b in bmcs if b.label in before]

    def act(t: _Target) -> PowerState:
        t.driver.power(wanted)
        return before[t.label]

    done = [o for o in states if not o.ok] + each(reachable, act)
    done.sort(key=lambda o: [b.label for b in bmcs].index(o.label))
    report(done, as_json=as_json,
           doc=lambda label, was: {"bmc": label, "action": wanted.value, "before": was.value,
                                   "changed": _changes(was, wanted)},
           show=lambda label, was: out_console.print(
               f"{label}: power {action.value} "
               f"{'requested' if _changes(was, wanted) else 'nothing to do, already'} (was {was.value})"))


def _changes(before: PowerState, action: PowerAction) -> bool:
    if action is PowerAction.ON:
        return before is not PowerState.ON
    if action in (PowerAction.OFF, PowerAction.GRACEFUL_OFF):
        return before is not PowerState.OFF
    return True


@app.command()
def boot(
    device: Annotated[BootDevice, typer.Argument(help="pxe, http, disk or cd.")],
    targets: TargetsArg = None,
    persistent: Annotated[bool, typer.Option(
        "--persistent", help="Keep the override for every boot, not only the next one.")] = False,
    legacy: Annotated[bool, typer.Option("--legacy", help="Legacy BIOS boot, not UEFI.")] = False,
    rack: RackOpt = [], pool: PoolOpt = [], all_: AllOpt = False,  # noqa: B006
    selector: SelectorOpt = None, node: NodeOpt = None,
    inventory: InventoryOpt = None, address: AddressOpt = None,
    driver: DriverOpt = DriverChoice.REDFISH, user: UserOpt = None,
    password_env: PasswordEnvOpt = None, insecure: InsecureOpt = False, system: SystemOpt = None,
    as_json: bool = JsonOpt,
) -> None:
    """Set the boot device for the next boot (or every boot with --persistent)."""
    mode = BootMode.LEGACY if legacy else BootMode.UEFI
    bmcs = _selection(targets, node, rack, pool, all_, selector, inventory, address, driver, user, password_env,
                      insecure, system)
    when = "every boot" if persistent else "the next boot"
    report(each(bmcs, lambda t: t.driver.set_boot(device, once=not persistent, mode=mode)), as_json=as_json,
           doc=lambda label, _: {"bmc": label, "boot": device.value, "once": not persistent, "mode": mode.value},
           show=lambda label, _: out_console.print(f"{label}: boot from {device.value} ({mode.value}) on {when}"))


@app.command("inventory")
def inventory_(
    targets: TargetsArg = None, rack: RackOpt = [], pool: PoolOpt = [], all_: AllOpt = False,  # noqa: B006
    selector: SelectorOpt = None, node: NodeOpt = None,
    inventory: InventoryOpt = None, address: AddressOpt = None,
    driver: DriverOpt = DriverChoice.REDFISH, user: UserOpt = None,
    password_env: PasswordEnvOpt = None, insecure: InsecureOpt = False, system: SystemOpt = None,
    as_json: bool = JsonOpt,
) -> None:
    """Hardware inventory: system, CPUs, memory, GPUs, NICs, drives, firmware."""
    bmcs = _selection(targets, node, rack, pool, all_, selector, inventory, address, driver, user, password_env,
                      insecure, system)
    report(each(bmcs, lambda t: t.driver.inventory()), as_json=as_json,
           doc=lambda label, hw: {"bmc": label, **asdict(hw)}, show=_show_inventory, tables=True)


def _show_inventory(label: str, hw: HardwareInventory) -> None:
    s = hw.system
    out_console.print(f"{label}: {s.vendor} {s.model}, serial {s.serial}, UUID {s.uuid}, "
                      f"BIOS {s.bios_version or '?'}; {len(hw.cpus)} CPU(s), "
                      f"{hw.memory_gib:g} GiB, {len(hw.gpus)} GPU(s)", highlight=False)
    if hw.gpus:
        emit_table("GPUs", ["model", "serial", "slot"],
                   [(g.model, g.serial, g.pcie_slot) for g in hw.gpus])
    if hw.nics:
        emit_table("NICs", ["name", "MAC", "Mb/s", "link"],
                   [(n.name, n.mac, n.speed_mbps, n.link_up) for n in hw.nics])
    if hw.drives:
        emit_table("Drives", ["id", "model", "serial", "bytes", "protocol"],
                   [(d.id, d.model, d.serial, d.capacity_bytes, d.protocol) for d in hw.drives])
    emit_table("Firmware", ["name", "version"], [(f.name, f.version) for f in hw.firmware])


@app.command()
def sel(
    targets: TargetsArg = None,
    clear: Annotated[bool, typer.Option("--clear", help="Clear the log after reading it (asks first).")] = False,
    rack: RackOpt = [], pool: PoolOpt = [], all_: AllOpt = False,  # noqa: B006
    selector: SelectorOpt = None, node: NodeOpt = None,
    inventory: InventoryOpt = None, address: AddressOpt = None,
    driver: DriverOpt = DriverChoice.REDFISH, user: UserOpt = None,
    password_env: PasswordEnvOpt = None, insecure: InsecureOpt = False, system: SystemOpt = None,
    as_json: bool = JsonOpt,
    yes: bool = YesOpt, dry_run: bool = DryRunOpt,
) -> None:
    """The system event log (SEL); with --clear, print it and then clear it (--yes, or asked; --dry-run)."""
    bmcs = _selection(targets, node, rack, pool, all_, selector, inventory, address, driver, user, password_env,
                      insecure, system)
    read = each(bmcs, lambda t: t.driver.event_log())
    if clear:
        stop_on_one_error(read)
        counts = {o.label: len(o.value) for o in read if o.value is not None}
        effects = [f"{label}: {n} entries are lost" for label, n in counts.items()]
        go_ahead(Change("clear the event log", [b.label for b in bmcs],
                        [e.split(": ", 1)[1] for e in effects] if len(bmcs) == 1 else effects),
                 yes=yes, dry_run=dry_run)
        cleared = {o.label: o for o in each([b for b in bmcs if b.label in counts],
                                              lambda t: t.driver.clear_event_log())}
        for o in read:  # the entries as read; the node's outcome is the clear's
            c = cleared.get(o.label)
            if c is not None and not c.ok:
                o.code, o.message, o.value = c.code, c.message, None
    report(read, as_json=as_json, doc=lambda label, entries: {"bmc": label, "cleared": clear, "entries": [
        {**asdict(e), "created": e.created.isoformat() if e.created else None} for e in entries]},
        show=lambda label, entries: _show_sel(label, entries, clear), tables=True)


def _show_sel(label: str, entries: list[LogEntry], clear: bool) -> None:
    emit_table(f"{label}: event log", ["id", "time", "severity", "message"],
               [(e.id, e.created.isoformat() if e.created else "", e.severity, e.message) for e in entries])
    if clear:
        out_console.print(f"{label}: event log cleared ({len(entries)} entries)")


@app.command()
def sensors(
    targets: TargetsArg = None, rack: RackOpt = [], pool: PoolOpt = [], all_: AllOpt = False,  # noqa: B006
    selector: SelectorOpt = None, node: NodeOpt = None,
    inventory: InventoryOpt = None, address: AddressOpt = None,
    driver: DriverOpt = DriverChoice.REDFISH, user: UserOpt = None,
    password_env: PasswordEnvOpt = None, insecure: InsecureOpt = False, system: SystemOpt = None,
    as_json: bool = JsonOpt,
) -> None:
    """Sensor readings (temperature, fans, voltage, power) with their health."""
    bmcs = _selection(targets, node, rack, pool, all_, selector, inventory, address, driver, user, password_env,
                      insecure, system)
    report(each(bmcs, lambda t: (t.driver.sensors(), t.driver.health())), as_json=as_json,
           doc=lambda label, v: {"bmc": label, "health": asdict(v[1]), "sensors": [asdict(r) for r in v[0]]},
           show=lambda label, v: emit_table(f"{label}: sensors (health {v[1].overall})",
                                            ["name", "kind", "value", "unit", "health"],
                                            [(r.name, r.kind, r.value, r.unit, r.health) for r in v[0]]),
           tables=True)

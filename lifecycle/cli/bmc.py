"""`racklife bmc …`: talk to one BMC, named by the inventory (--node) or directly (--address).

Why it exists: an operator racking a server needs to check power, set the boot device, read the
inventory, the SEL and the sensors without writing code, with the same drivers the workflows use.
Exit codes tell scripts what happened: 0 ok, 2 bad input, 3 BMC unreachable, 4 auth failed,
5 the BMC refused the operation. Passwords come from the environment (or the inventory's
credentials reference) and never appear in output, JSON or error messages.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict
from enum import StrEnum
from pathlib import Path
from typing import Annotated, NoReturn

import typer

from lifecycle.cli._change import Change, DryRunOpt, ForceOpt, YesOpt, go_ahead, in_service_guard
from lifecycle.cli._common import BAD_INPUT, JsonOpt, emit_json, emit_table, err_console, error_exit, out_console
from lifecycle.drivers.bmc.base import (
    BmcDriver,
    BootDevice,
    BootMode,
    Credentials,
    PowerAction,
    PowerState,
    resolve_credentials,
)
from lifecycle.drivers.bmc.factory import driver_for, driver_from_args
from lifecycle.drivers.errors import DriverError
from lifecycle.model.inventory import InventoryError, load_inventory

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


class DriverChoice(StrEnum):
    REDFISH = "redfish"
    IPMI = "ipmi"


InventoryOpt = Annotated[Path | None, typer.Option(
    "--inventory", envvar="RACKLIFE_INVENTORY", help="Inventory YAML (with --node).")]
NodeOpt = Annotated[str | None, typer.Option("--node", help="Node name in the inventory.")]
AddressOpt = Annotated[str | None, typer.Option(
    "--address", help="BMC URL (Redfish) or host[:port] (IPMI), instead of --node.")]
DriverOpt = Annotated[DriverChoice, typer.Option("--driver", help="Protocol, with --address.")]
UserOpt = Annotated[str | None, typer.Option("--user", help="BMC user, with --address.")]
PasswordEnvOpt = Annotated[str | None, typer.Option(
    "--password-env", help="Name of the environment variable that holds the password.")]
InsecureOpt = Annotated[bool, typer.Option(
    "--insecure", help="Do not verify the BMC's TLS certificate (Redfish).")]
SystemOpt = Annotated[str | None, typer.Option(
    "--system", help="Redfish system id on a BMC that manages several.")]


class _Target:
    """The BMC a command talks to, and the secret to scrub from anything printed."""

    def __init__(self, label: str, driver: BmcDriver, secret: str) -> None:
        self.label, self.driver, self.secret = label, driver, secret

    def scrub(self, text: str) -> str:
        return text.replace(self.secret, "***") if self.secret else text


def _error(message: str, code: int) -> NoReturn:
    error_exit(message, code)


def _bad(message: str) -> NoReturn:
    _error(message, BAD_INPUT)


def _failed(error: DriverError, secret: str) -> NoReturn:
    _error(str(error).replace(secret, "***") if secret else str(error), error.exit_code)


def _open(inventory: Path | None, node: str | None, address: str | None, driver: DriverChoice,
          user: str | None, password_env: str | None, insecure: bool,
          system: str | None) -> _Target:
    if node and address:
        _bad("give either --node (with --inventory) or --address, not both")
    if node:
        if inventory is None:
            _bad("--node needs --inventory FILE (or RACKLIFE_INVENTORY)")
        try:
            spec = load_inventory(inventory).node(node).bmc
        except InventoryError as exc:
            _bad(f"{inventory}: invalid inventory:\n{exc}")
        except KeyError:
            _bad(f"no node {node!r} in {inventory}")
        try:
            creds = resolve_credentials(spec.credentials, spec.address)
            return _Target(node, driver_for(spec, credentials=creds), creds.password)
        except DriverError as exc:
            _failed(exc, "")
        except ValueError as exc:
            _bad(str(exc))
    if not address:
        _bad("name a BMC: --node NAME --inventory FILE, or --address ADDRESS")
    if not user or not password_env:
        _bad("--address needs --user and --password-env VARIABLE")
    password = os.environ.get(password_env, "")
    if not password:
        _bad(f"environment variable {password_env} is empty or unset")
    try:
        made = driver_from_args(driver.value, address, Credentials(user, password),
                                verify_tls=not insecure, system=system)
    except ValueError as exc:
        _bad(str(exc).replace(password, "***"))
    return _Target(address, made, password)


@contextmanager
def _session(inventory: Path | None, node: str | None, address: str | None,
             driver: DriverChoice, user: str | None, password_env: str | None, insecure: bool,
             system: str | None) -> Iterator[_Target]:
    target = _open(inventory, node, address, driver, user, password_env, insecure, system)
    try:
        yield target
    except DriverError as exc:
        _failed(exc, target.secret)
    finally:
        try:
            target.driver.close()
        except DriverError as exc:
            err_console.print(f"warning: {target.scrub(str(exc))}", highlight=False)


@app.command()
def power(
    action: Annotated[PowerCommand, typer.Argument(help="status, on, off, graceful-off, cycle "
                                                        "or reset.")],
    inventory: InventoryOpt = None, node: NodeOpt = None, address: AddressOpt = None,
    driver: DriverOpt = DriverChoice.REDFISH, user: UserOpt = None,
    password_env: PasswordEnvOpt = None, insecure: InsecureOpt = False, system: SystemOpt = None,
    as_json: bool = JsonOpt,
    yes: bool = YesOpt, dry_run: bool = DryRunOpt, force: bool = ForceOpt,
) -> None:
    """Show or change power. Asking for the state the system is in already does nothing.

    off, graceful-off, cycle and reset ask first (--yes where there is no
    terminal; --dry-run to see what would happen), and are refused on a node a
    scheduler is using unless --force.
    """
    if action in _TAKES_DOWN:
        in_service_guard([node] if node else [], f"power {action.value}", force=force, bmc_address=address)
    with _session(inventory, node, address, driver, user, password_env, insecure, system) as t:
        before = t.driver.power_state()
        result: dict[str, object] = {"bmc": t.label, "power": before.value}
        if action is not PowerCommand.STATUS:
            wanted = PowerAction(action.value.replace("-", "_"))
            changes = _changes(before, wanted)
            if dry_run or (action in _TAKES_DOWN and changes):
                now = f"power is {before.value} now" + ("" if changes else ": nothing to do")
                go_ahead(Change(f"power {action.value}", [t.label], [now]), yes=yes or action not in _TAKES_DOWN,
                         dry_run=dry_run)
            t.driver.power(wanted)
            result = {"bmc": t.label, "action": wanted.value, "before": before.value,
                      "changed": _changes(before, wanted)}
    if as_json:
        emit_json(result)
    elif action is PowerCommand.STATUS:
        out_console.print(f"{t.label}: power {before.value}")
    else:
        verb = "requested" if result["changed"] else "nothing to do, already"
        out_console.print(f"{t.label}: power {action.value} {verb} (was {before.value})")


def _changes(before: PowerState, action: PowerAction) -> bool:
    if action is PowerAction.ON:
        return before is not PowerState.ON
    if action in (PowerAction.OFF, PowerAction.GRACEFUL_OFF):
        return before is not PowerState.OFF
    return True


@app.command()
def boot(
    device: Annotated[BootDevice, typer.Argument(help="pxe, http, disk or cd.")],
    persistent: Annotated[bool, typer.Option(
        "--persistent", help="Keep the override for every boot, not only the next one.")] = False,
    legacy: Annotated[bool, typer.Option("--legacy", help="Legacy BIOS boot, not UEFI.")] = False,
    inventory: InventoryOpt = None, node: NodeOpt = None, address: AddressOpt = None,
    driver: DriverOpt = DriverChoice.REDFISH, user: UserOpt = None,
    password_env: PasswordEnvOpt = None, insecure: InsecureOpt = False, system: SystemOpt = None,
    as_json: bool = JsonOpt,
) -> None:
    """Set the boot device for the next boot (or every boot with --persistent)."""
    mode = BootMode.LEGACY if legacy else BootMode.UEFI
    with _session(inventory, node, address, driver, user, password_env, insecure, system) as t:
        t.driver.set_boot(device, once=not persistent, mode=mode)
    result = {"bmc": t.label, "boot": device.value, "once": not persistent, "mode": mode.value}
    if as_json:
        emit_json(result)
    else:
        when = "every boot" if persistent else "the next boot"
        out_console.print(f"{t.label}: boot from {device.value} ({mode.value}) on {when}")


@app.command("inventory")
def inventory_(
    inventory: InventoryOpt = None, node: NodeOpt = None, address: AddressOpt = None,
    driver: DriverOpt = DriverChoice.REDFISH, user: UserOpt = None,
    password_env: PasswordEnvOpt = None, insecure: InsecureOpt = False, system: SystemOpt = None,
    as_json: bool = JsonOpt,
) -> None:
    """Hardware inventory: system, CPUs, memory, GPUs, NICs, drives, firmware."""
    with _session(inventory, node, address, driver, user, password_env, insecure, system) as t:
        hw = t.driver.inventory()
    if as_json:
        emit_json({"bmc": t.label, **asdict(hw)})
        return
    s = hw.system
    out_console.print(f"{t.label}: {s.vendor} {s.model}, serial {s.serial}, UUID {s.uuid}, "
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
    clear: Annotated[bool, typer.Option("--clear", help="Clear the log after reading it (asks first).")] = False,
    inventory: InventoryOpt = None, node: NodeOpt = None, address: AddressOpt = None,
    driver: DriverOpt = DriverChoice.REDFISH, user: UserOpt = None,
    password_env: PasswordEnvOpt = None, insecure: InsecureOpt = False, system: SystemOpt = None,
    as_json: bool = JsonOpt,
    yes: bool = YesOpt, dry_run: bool = DryRunOpt,
) -> None:
    """The system event log (SEL); with --clear, print it and then clear it (--yes, or asked; --dry-run)."""
    with _session(inventory, node, address, driver, user, password_env, insecure, system) as t:
        entries = t.driver.event_log()
        if clear:
            go_ahead(Change("clear the event log", [t.label], [f"{len(entries)} entries are lost"]),
                     yes=yes, dry_run=dry_run)
            t.driver.clear_event_log()
    if as_json:
        emit_json({"bmc": t.label, "cleared": clear, "entries": [
            {**asdict(e), "created": e.created.isoformat() if e.created else None}
            for e in entries]})
        return
    emit_table(f"{t.label}: event log", ["id", "time", "severity", "message"],
               [(e.id, e.created.isoformat() if e.created else "", e.severity, e.message)
                for e in entries])
    if clear:
        out_console.print(f"{t.label}: event log cleared ({len(entries)} entries)")


@app.command()
def sensors(
    inventory: InventoryOpt = None, node: NodeOpt = None, address: AddressOpt = None,
    driver: DriverOpt = DriverChoice.REDFISH, user: UserOpt = None,
    password_env: PasswordEnvOpt = None, insecure: InsecureOpt = False, system: SystemOpt = None,
    as_json: bool = JsonOpt,
) -> None:
    """Sensor readings (temperature, fans, voltage, power) with their health."""
    with _session(inventory, node, address, driver, user, password_env, insecure, system) as t:
        readings = t.driver.sensors()
        health = t.driver.health()
    if as_json:
        emit_json({"bmc": t.label, "health": asdict(health),
                   "sensors": [asdict(r) for r in readings]})
        return
    emit_table(f"{t.label}: sensors (health {health.overall})",
               ["name", "kind", "value", "unit", "health"],
               [(r.name, r.kind, r.value, r.unit, r.health) for r in readings])

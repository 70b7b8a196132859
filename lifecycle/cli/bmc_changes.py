"""`racklife bmc firmware …` and `racklife bmc bios …`: change one node's firmware or BIOS.

Why it exists: an operator qualifying a firmware release or a BIOS setting on one node needs
the same verified path the rolling upgrade takes (``workflows/bmc_changes.py``): a firmware
update is done only when the component's version read back from FirmwareInventory changed;
BIOS settings are done only when the live Bios reads them back after the reboot that applies
them. The node's BMC comes from the inventory; a BMC without the interface (IPMI) is refused
before anything is sent. These commands act on the BMC directly, like the rest of
`racklife bmc`: they do not drain the node (the rolling upgrade does), so a BIOS reboot
happens only with ``--reboot``; both ask first (``--yes``, ``--dry-run``) and are refused on a
node a scheduler is using unless ``--force``.

Exit codes: 0 done (or already so), 2 bad input, 3 BMC unreachable, 4 auth failed, 5 the BMC
refused or the change did not take (a failed task, a version that did not change, BIOS that
does not read back).
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import asdict
from enum import StrEnum
from functools import partial
from pathlib import Path
from typing import Annotated

import typer

from lifecycle.cli._change import Change, DryRunOpt, ForceOpt, YesOpt, go_ahead, in_service_guard
from lifecycle.cli._common import JsonOpt, emit_json, emit_table, err_console, out_console
from lifecycle.cli.bmc import DriverChoice, InventoryOpt, _bad, _error, _session, _Target
from lifecycle.drivers.bmc.base import (
    BiosApplyTime,
    BiosInterface,
    Capability,
    FirmwareInterface,
    TaskProgress,
    UpdateMethod,
    require,
)
from lifecycle.drivers.bmc.factory import unsupported_reason
from lifecycle.drivers.bmc.firmware import find_component, update_firmware
from lifecycle.drivers.boot.image_serve import check_host, serve_image
from lifecycle.drivers.errors import NotSupported, OperationFailed
from lifecycle.model.inventory import InventoryError, load_inventory
from lifecycle.workflows.bmc_changes import BiosSettings, apply_bios, coerce_bios

firmware_app = typer.Typer(help="Firmware of one node's BMC: list it, update a component "
                                "(verified by the version it reads afterwards).",
                           no_args_is_help=True)
bios_app = typer.Typer(help="BIOS attributes of one node, through Redfish Bios/Settings.",
                       no_args_is_help=True)


class MethodChoice(StrEnum):
    AUTO = "auto"
    PULL = "pull"
    PUSH = "push"


class ApplyTimeChoice(StrEnum):
    AUTO = "auto"
    ON_RESET = "on-reset"
    IMMEDIATE = "immediate"


NodeArg = Annotated[str, typer.Argument(help="Node name in the inventory.")]


def _node_session(inventory: Path | None, node: str,
                  capability: Capability) -> AbstractContextManager[_Target]:
    """The node's BMC, refused (exit 5) before credentials or I/O when it lacks ``capability``."""
    if inventory is not None:
        try:
            spec = load_inventory(inventory).node(node)
        except (InventoryError, KeyError):
            spec = None  # _session reports it, with the file and the node
        reason = unsupported_reason(spec, capability) if spec is not None else None
        if reason is not None:
            _error(f"{node}: {reason}", NotSupported.exit_code)
    return _session(inventory, node, None, DriverChoice.REDFISH, None, None, False, None)


def _progress(step: TaskProgress) -> None:
    percent = f" {step.percent}%" if step.percent is not None else ""
    err_console.print(f"task {step.task_id or '?'}: {step.state}{percent}", highlight=False)


@firmware_app.command("list")
def firmware_list(node: NodeArg, inventory: InventoryOpt = None, as_json: bool = JsonOpt) -> None:
    """Every firmware component the node's BMC reports, with its version."""
    with _node_session(inventory, node, Capability.FIRMWARE) as t:
        fw = require(t.driver, FirmwareInterface)
        components = fw.firmware_inventory()
        methods = fw.update_methods()
    if as_json:
        emit_json({"node": node, "update_methods": [m.value for m in methods],
                   "firmware": [asdict(c) for c in components]})
        return
    emit_table(f"{node}: firmware (updates: {', '.join(methods) or 'none'})",
               ["component", "version", "updateable", "id"],
               [(c.name, c.version, c.updateable, c.id) for c in components])


@firmware_app.command("update")
def firmware_update(
    node: NodeArg,
    file: Annotated[Path, typer.Option("--file", help="The firmware image.")],
    component: Annotated[str, typer.Option(
        "--component", help="Component to update: its name or id (`bmc firmware list`).")],
    method: Annotated[MethodChoice, typer.Option(
        "--method", help="pull (SimpleUpdate from a URL served here), push (multipart), or "
                         "auto: pull where the BMC offers it.")] = MethodChoice.AUTO,
    serve_address: Annotated[str, typer.Option(
        "--serve-address", help="Address to serve the image on for pull (loopback or the "
                                "lab network).")] = "127.0.0.1",
    expect_version: Annotated[str | None, typer.Option(
        "--expect-version", help="Fail unless the component reads this version after.")] = None,
    inventory: InventoryOpt = None, yes: bool = YesOpt, dry_run: bool = DryRunOpt,
    force: bool = ForceOpt, as_json: bool = JsonOpt,
) -> None:
    """Update one component, follow the BMC's task, and read the version back.

    A task that fails, or a version that did not change, is a failure (exit 5). Asks first
    (--yes where there is no terminal; --dry-run to see what it would do), and is refused on
    a node a scheduler is using unless --force.
    """
    if not file.is_file():
        _bad(f"{file}: no such file")
    try:
        check_host(serve_address)
    except ValueError as exc:
        _bad(str(exc))
    wanted = None if method is MethodChoice.AUTO else UpdateMethod(method.value)
    in_service_guard([node], "update the firmware of", force=force)
    with _node_session(inventory, node, Capability.FIRMWARE) as t:
        fw = require(t.driver, FirmwareInterface)
        now = find_component(fw.firmware_inventory(), component, t.label)
        go_ahead(Change(f"update firmware component {now.name}", [node],
                        [f"{now.name} is {now.version} now; image {file.name}"
                         + (f", expected {expect_version} after" if expect_version else "")]),
                 yes=yes, dry_run=dry_run)
        result = update_firmware(fw, component, file, serve=partial(serve_image,
                                                                     host=serve_address),
                                 method=wanted, expect_version=expect_version,
                                 progress=None if as_json else _progress)
    if as_json:
        emit_json({"node": node, "component": result.component, "before": result.before,
                   "after": result.after, "method": result.method.value,
                   "task": result.task.task_id, "task_state": result.task.state})
        return
    out_console.print(f"{node}: {result.component} {result.before} → {result.after} "
                      f"({result.method.value}, task {result.task.task_id or '?'} "
                      f"{result.task.state})", highlight=False)


@bios_app.command("list")
def bios_list(
    node: NodeArg,
    pending: Annotated[bool, typer.Option(
        "--pending", help="Only attributes staged and not yet applied.")] = False,
    inventory: InventoryOpt = None, as_json: bool = JsonOpt,
) -> None:
    """The node's BIOS attributes (or those staged for the next reset)."""
    with _node_session(inventory, node, Capability.BIOS) as t:
        bios = require(t.driver, BiosInterface)
        values = bios.bios_pending_attributes() if pending else bios.bios_attributes()
    if as_json:
        emit_json({"node": node, "pending" if pending else "attributes": values})
        return
    emit_table(f"{node}: BIOS {'pending' if pending else 'attributes'}", ["attribute", "value"],
               sorted(values.items()))


def _pairs(items: list[str]) -> dict[str, str]:
    pairs: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            _bad(f"{item!r}: expected KEY=VALUE")
        if key in pairs:
            _bad(f"{key} given twice")
        pairs[key] = value
    return pairs


@bios_app.command("set")
def bios_set(
    node: NodeArg,
    settings: Annotated[list[str], typer.Argument(help="KEY=VALUE attributes to set.",
                                                  metavar="KEY=VALUE...")],
    apply_time: Annotated[ApplyTimeChoice, typer.Option(
        "--apply-time", help="When the BMC applies them: on-reset, immediate, or auto "
                             "(on-reset where offered).")] = ApplyTimeChoice.AUTO,
    reboot: Annotated[bool, typer.Option(
        "--reboot", help="Reset the node now to apply on-reset settings, then read them "
                         "back. Without it they stay staged for the next reset.")] = False,
    timeout: Annotated[float, typer.Option(
        "--timeout", help="Seconds to wait for the reboot and the read-back.")] = 900.0,
    inventory: InventoryOpt = None, yes: bool = YesOpt, dry_run: bool = DryRunOpt,
    force: bool = ForceOpt, as_json: bool = JsonOpt,
) -> None:
    """Stage BIOS attributes and, once applied, read them back from the live Bios.

    Attributes already set change nothing and reboot nothing. A change asks first (--yes
    where there is no terminal; --dry-run to see it); --reboot is refused on a node a
    scheduler is using unless --force.
    """
    raw = _pairs(settings)
    if timeout <= 0:
        _bad("--timeout must be positive")
    when = {ApplyTimeChoice.AUTO: None, ApplyTimeChoice.ON_RESET: BiosApplyTime.ON_RESET,
            ApplyTimeChoice.IMMEDIATE: BiosApplyTime.IMMEDIATE}[apply_time]
    if reboot:
        in_service_guard([node], "reboot", force=force)
    with _node_session(inventory, node, Capability.BIOS) as t:
        bios = require(t.driver, BiosInterface)
        current = bios.bios_attributes()
        try:
            wanted = coerce_bios(current, raw, t.label)
        except OperationFailed as exc:
            _bad(exc.message)
        differs = {k: v for k, v in wanted.items() if current.get(k) != v}
        if differs or dry_run:
            effects = [f"{k}: {current.get(k)} → {v}" for k, v in sorted(differs.items())]
            if reboot and differs:
                effects.append("the node is reset to apply them (where they apply on reset)")
            go_ahead(Change("set BIOS attributes", [node], effects), yes=yes, dry_run=dry_run)
        result = apply_bios(t.driver, wanted, BiosSettings(apply_time=when, reboot=reboot,
                                                           timeout_s=timeout))
    if as_json:
        emit_json({"node": node, **asdict(result)})
        return
    if not result.changed and result.applied and not result.rebooted:
        out_console.print(f"{node}: BIOS already reads {_shown(wanted)}; nothing to do",
                          highlight=False)
    elif result.applied:
        how = "after a reboot" if result.rebooted else "immediately"
        out_console.print(f"{node}: BIOS reads {_shown(wanted)} ({result.apply_time}, applied "
                          f"{how})", highlight=False)
    else:
        out_console.print(f"{node}: staged {_shown(result.changed)}; they apply at the next "
                          "reset (--reboot to reset now and read them back)", highlight=False)


def _shown(values: dict[str, object]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(values.items()))

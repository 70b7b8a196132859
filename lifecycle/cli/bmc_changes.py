"""`racklife bmc firmware …` and `racklife bmc bios …`: change the firmware or BIOS of the nodes named.

Why it exists: an operator qualifying a firmware release or a BIOS setting on a few nodes needs
the same verified path the rolling upgrade takes (``workflows/bmc_changes.py``): a firmware
update is done only when the component's version read back from FirmwareInventory changed;
BIOS settings are done only when the live Bios reads them back after the reboot that applies
them. The nodes are the one selection (names, hostlists, --rack, --pool, --all, --selector;
``bmc_targets.py``), each node's BMC from the store (or --inventory FILE); a BMC without the
interface (IPMI) is refused before anything is sent, and each node reports its own outcome.
These commands act on the BMC directly, like the rest of `racklife bmc`: they do not drain the
node (the rolling upgrade does), so a BIOS reboot happens only with ``--reboot``; both ask
first (``--yes``, ``--dry-run``) and are refused on a node a scheduler is using unless
``--force``, which gives such a node the change through the node cycle, as `racklife upgrade`
does (``bmc_cycle.py``).

Exit codes: 0 done (or already so), 2 bad input, 3 BMC unreachable, 4 auth failed, 5 the BMC
refused or the change did not take (a failed task, a version that did not change, BIOS that
does not read back).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from enum import StrEnum
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from lifecycle.cli._change import Change, DryRunOpt, ForceOpt, YesOpt, go_ahead, refuse_scheduled, scheduled
from lifecycle.cli._common import BAD_INPUT, JsonOpt, emit_table, err_console, out_console
from lifecycle.cli.bmc_targets import (
    AllOpt,
    Bmc,
    InventoryOpt,
    NodeOpt,
    Outcome,
    PoolOpt,
    RackOpt,
    Selection,
    SelectorOpt,
    TargetsArg,
    _Target,
    each,
    report,
    resolve,
    stop_on_one_error,
)
from lifecycle.cli.bmc_targets import bad as _bad
from lifecycle.drivers.bmc.base import (
    BiosApplyTime,
    BiosInterface,
    Capability,
    Firmware,
    FirmwareInterface,
    TaskProgress,
    UpdateMethod,
    require,
)
from lifecycle.drivers.bmc.firmware import FirmwareResult, find_component, update_firmware
from lifecycle.drivers.boot.image_serve import check_host, serve_image
from lifecycle.drivers.errors import DriverError, OperationFailed
from lifecycle.workflows.bmc_changes import BiosResult, BiosSettings, apply_bios, coerce_bios

if TYPE_CHECKING:  # the workflow engine (DBOS) is imported only when a node in service takes a change
    from lifecycle.workflows.changes import ChangeSpec

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


def _nodes(targets: list[str] | None, node: str | None, rack: list[str], pool: list[str], all_: bool,
           selector: str | None, inventory: Path | None) -> list[Bmc]:
    return resolve(Selection(tuple(targets or ()), node, tuple(rack), tuple(pool), all_, selector, inventory))


def _progress(label: str, many: bool) -> Callable[[TaskProgress], None]:
    def show(step: TaskProgress) -> None:
        percent = f" {step.percent}%" if step.percent is not None else ""
        err_console.print(f"{label + ': ' if many else ''}task {step.task_id or '?'}: {step.state}{percent}",
                          highlight=False)
    return show


@firmware_app.command("list")
def firmware_list(
    targets: TargetsArg = None, rack: RackOpt = [], pool: PoolOpt = [], all_: AllOpt = False,  # noqa: B006
    selector: SelectorOpt = None, node: NodeOpt = None, inventory: InventoryOpt = None, as_json: bool = JsonOpt,
) -> None:
    """Every firmware component the node's BMC reports, with its version."""
    def read(t: _Target) -> tuple[list[Firmware], tuple[UpdateMethod, ...]]:
        fw = require(t.driver, FirmwareInterface)
        return fw.firmware_inventory(), fw.update_methods()

    report(each(_nodes(targets, node, rack, pool, all_, selector, inventory), read, capability=Capability.FIRMWARE),
           as_json=as_json,
           doc=lambda label, v: {"node": label, "update_methods": [m.value for m in v[1]],
                                 "firmware": [asdict(c) for c in v[0]]},
           show=lambda label, v: emit_table(f"{label}: firmware (updates: {', '.join(v[1]) or 'none'})",
                                            ["component", "version", "updateable", "id"],
                                            [(c.name, c.version, c.updateable, c.id) for c in v[0]]),
           tables=True)


@firmware_app.command("update")
def firmware_update(
    file: Annotated[Path, typer.Option("--file", help="The firmware image.")],
    component: Annotated[str, typer.Option(
        "--component", help="Component to update: its name or id (`bmc firmware list`).")],
    targets: TargetsArg = None,
    method: Annotated[MethodChoice, typer.Option(
        "--method", help="pull (SimpleUpdate from a URL served here), push (multipart), or "
                         "auto: pull where the BMC offers it.")] = MethodChoice.AUTO,
    serve_address: Annotated[str, typer.Option(
        "--serve-address", help="Address to serve the image on for pull (loopback or the "
                                "lab network).")] = "127.0.0.1",
    expect_version: Annotated[str | None, typer.Option(
        "--expect-version", help="Fail unless the component reads this version after.")] = None,
    rack: RackOpt = [], pool: PoolOpt = [], all_: AllOpt = False,  # noqa: B006
    selector: SelectorOpt = None, node: NodeOpt = None,
    inventory: InventoryOpt = None, yes: bool = YesOpt, dry_run: bool = DryRunOpt,
    force: bool = ForceOpt, as_json: bool = JsonOpt,
) -> None:
    """Update one component on each node, follow the BMC's task, and read the version back.

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
    bmcs = _nodes(targets, node, rack, pool, all_, selector, inventory)
    if _in_service(bmcs, "update the firmware of", force=force, yes=yes, dry_run=dry_run, as_json=as_json,
                   change=lambda: _firmware_change(file, component, expect_version, method, serve_address)):
        return
    found = each(bmcs, lambda t: find_component(require(t.driver, FirmwareInterface).firmware_inventory(),
                                                component, t.label), capability=Capability.FIRMWARE)
    stop_on_one_error(found)
    now = {o.label: o.value for o in found if o.value is not None}
    image = f"image {file.name}" + (f", expected {expect_version} after" if expect_version else "")
    effects = [f"{label}: {c.name} is {c.version} now; {image}" for label, c in now.items()]
    names = {c.name for c in now.values()}
    go_ahead(Change(f"update firmware component {names.pop() if len(names) == 1 else component}",
                    [b.label for b in bmcs], [e.split(": ", 1)[1] for e in effects] if len(bmcs) == 1 else effects),
             yes=yes, dry_run=dry_run)
    many = len(bmcs) > 1
    done = {o.label: o for o in each(
        [b for b in bmcs if b.label in now],
        lambda t: update_firmware(require(t.driver, FirmwareInterface), component, file,
                                  serve=partial(serve_image, host=serve_address), method=wanted,
                                  expect_version=expect_version,
                                  progress=None if as_json else _progress(t.label, many)),
        capability=Capability.FIRMWARE)}
    outcomes: list[Outcome[FirmwareResult]] = [done.get(o.label) or Outcome(o.label, code=o.code,
                                                                              message=o.message) for o in found]
    report(outcomes, as_json=as_json,
           doc=lambda label, r: {"node": label, "component": r.component, "before": r.before, "after": r.after,
                                 "method": r.method.value, "task": r.task.task_id, "task_state": r.task.state},
           show=lambda label, r: out_console.print(
               f"{label}: {r.component} {r.before} → {r.after} ({r.method.value}, task {r.task.task_id or '?'} "
               f"{r.task.state})", highlight=False))


def _in_service(bmcs: list[Bmc], what: str, *, force: bool, yes: bool, dry_run: bool, as_json: bool,
                change: Callable[[], ChangeSpec]) -> bool:
    """True when the nodes are in service and the change went through the node cycle (``bmc_cycle.py``).

    Refused (exit 5) without --force; a selection mixing nodes in service with others is bad input.
    """
    busy = scheduled([b.label for b in bmcs])
    if not busy:
        return False
    if not force:
        refuse_scheduled(busy, what, "take it out first (racklife slurm leave / role-swap), or --force to make the "
                                     "change through the node cycle: leave, change, read back, re-test, rejoin")
    rest = [b.label for b in bmcs if b.label not in {n for n, _s in busy}]
    if rest:
        _bad(f"the selection mixes nodes a scheduler is using ({', '.join(n for n, _s in busy)}) with nodes it is "
             f"not ({', '.join(rest)}): name them separately (--selector state=in_service)")
    from lifecycle.cli.bmc_cycle import through_cycle

    through_cycle(busy, change(), what, yes=yes, dry_run=dry_run, as_json=as_json)
    return True


def _firmware_change(file: Path, component: str, version: str | None, method: MethodChoice,
                     serve_address: str) -> ChangeSpec:
    if method is not MethodChoice.AUTO or serve_address != "127.0.0.1":
        _bad("--method and --serve-address are for a node out of service; a node in service takes the upgrade's "
             "firmware change (racklife upgrade --firmware)")
    from lifecycle.workflows.changes import ChangeKind, ChangeSpec

    return ChangeSpec(ChangeKind.FIRMWARE, component,
                      (("file", str(file.resolve())),) + ((("version", version),) if version else ()))


def _bios_change(raw: dict[str, str]) -> ChangeSpec:
    from lifecycle.workflows.changes import ChangeKind, ChangeSpec

    return ChangeSpec(ChangeKind.BIOS, ",".join(f"{k}={v}" for k, v in raw.items()), tuple(raw.items()))


@bios_app.command("list")
def bios_list(
    targets: TargetsArg = None,
    pending: Annotated[bool, typer.Option(
        "--pending", help="Only attributes staged and not yet applied.")] = False,
    rack: RackOpt = [], pool: PoolOpt = [], all_: AllOpt = False,  # noqa: B006
    selector: SelectorOpt = None, node: NodeOpt = None, inventory: InventoryOpt = None, as_json: bool = JsonOpt,
) -> None:
    """The node's BIOS attributes (or those staged for the next reset)."""
    def read(t: _Target) -> dict[str, object]:
        bios = require(t.driver, BiosInterface)
        return bios.bios_pending_attributes() if pending else bios.bios_attributes()

    report(each(_nodes(targets, node, rack, pool, all_, selector, inventory), read, capability=Capability.BIOS),
           as_json=as_json, doc=lambda label, v: {"node": label, "pending" if pending else "attributes": v},
           show=lambda label, v: emit_table(f"{label}: BIOS {'pending' if pending else 'attributes'}",
                                            ["attribute", "value"], sorted(v.items())), tables=True)


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
    targets: Annotated[list[str] | None, typer.Argument(
        help="Nodes (names or hostlists), then the KEY=VALUE attributes to set.",
        metavar="[NODE]... KEY=VALUE...", show_default=False)] = None,
    apply_time: Annotated[ApplyTimeChoice, typer.Option(
        "--apply-time", help="When the BMC applies them: on-reset, immediate, or auto "
                             "(on-reset where offered).")] = ApplyTimeChoice.AUTO,
    reboot: Annotated[bool, typer.Option(
        "--reboot", help="Reset the node now to apply on-reset settings, then read them "
                         "back. Without it they stay staged for the next reset.")] = False,
    timeout: Annotated[float, typer.Option(
        "--timeout", help="Seconds to wait for the reboot and the read-back.")] = 900.0,
    rack: RackOpt = [], pool: PoolOpt = [], all_: AllOpt = False,  # noqa: B006
    selector: SelectorOpt = None, node: NodeOpt = None,
    inventory: InventoryOpt = None, yes: bool = YesOpt, dry_run: bool = DryRunOpt,
    force: bool = ForceOpt, as_json: bool = JsonOpt,
) -> None:
    """Stage BIOS attributes and, once applied, read them back from the live Bios.

    Arguments with `=` are attributes, the others name nodes. Attributes already set change
    nothing and reboot nothing. A change asks first (--yes where there is no terminal;
    --dry-run to see it); --reboot is refused on a node a scheduler is using unless --force.
    """
    given = targets or []
    raw = _pairs([a for a in given if "=" in a])
    if not raw:
        _bad("give the attributes to set: KEY=VALUE…")
    if timeout <= 0:
        _bad("--timeout must be positive")
    when = {ApplyTimeChoice.AUTO: None, ApplyTimeChoice.ON_RESET: BiosApplyTime.ON_RESET,
            ApplyTimeChoice.IMMEDIATE: BiosApplyTime.IMMEDIATE}[apply_time]
    bmcs = _nodes([a for a in given if "=" not in a], node, rack, pool, all_, selector, inventory)
    if reboot and _in_service(bmcs, "set the BIOS of", force=force, yes=yes, dry_run=dry_run, as_json=as_json,
                              change=lambda: _bios_change(raw)):
        return

    def plan(t: _Target) -> _BiosPlan:
        current = require(t.driver, BiosInterface).bios_attributes()
        try:
            return _BiosPlan(current, coerce_bios(current, raw, t.label))
        except OperationFailed as exc:
            raise _BadSetting(t.label, exc.message) from None

    planned = each(bmcs, plan, capability=Capability.BIOS)
    bad_setting = [o for o in planned if o.code == BAD_INPUT]
    if bad_setting:  # an attribute the BIOS does not have, or a value of the wrong type: nothing is done anywhere
        _bad(bad_setting[0].message)
    stop_on_one_error(planned)
    plans = {o.label: o.value for o in planned if o.value is not None}
    if any(p.differs for p in plans.values()) or dry_run:
        effects = [f"{label}: {k}: {p.current.get(k)} → {v}" for label, p in plans.items()
                   for k, v in sorted(p.differs.items())]
        if len(bmcs) == 1:
            effects = [e.split(": ", 1)[1] for e in effects]
        if reboot and any(p.differs for p in plans.values()):
            effects.append("the node is reset to apply them (where they apply on reset)")
        go_ahead(Change("set BIOS attributes", [b.label for b in bmcs], effects), yes=yes, dry_run=dry_run)
    settings = BiosSettings(apply_time=when, reboot=reboot, timeout_s=timeout)
    done = {o.label: o for o in each([b for b in bmcs if b.label in plans],
                                     lambda t: apply_bios(t.driver, plans[t.label].wanted, settings),
                                     capability=Capability.BIOS)}
    outcomes: list[Outcome[BiosResult]] = [done.get(o.label) or Outcome(o.label, code=o.code, message=o.message)
                                           for o in planned]
    report(outcomes, as_json=as_json, doc=lambda label, r: {"node": label, **asdict(r)},
           show=lambda label, r: _show_bios(label, plans[label].wanted, r))


@dataclass(frozen=True)
class _BiosPlan:
    current: dict[str, object]
    wanted: dict[str, object]  # typed like the attributes they set

    @property
    def differs(self) -> dict[str, object]:
        return {k: v for k, v in self.wanted.items() if self.current.get(k) != v}


class _BadSetting(DriverError):
    """An attribute the node's BIOS does not have, or a value of the wrong type: bad input (exit 2)."""

    exit_code = BAD_INPUT

    def __str__(self) -> str:
        return self.message


def _show_bios(node: str, wanted: dict[str, object], result: BiosResult) -> None:
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

"""Which BMCs a `racklife bmc …` command talks to, and how each one's outcome is reported.

Why: `bmc power status --node r01-n01 --inventory site.yaml` named one BMC from
an inventory file while every other command took names, hostlists, --rack,
--pool, --all and --selector against the store. The bmc commands now read the
one selection (``_select.py``): each selected node's BMC comes from its stored
inventory record. Two ways remain for BMCs the store does not know yet:
``--address`` (with --driver, --user, --password-env) talks to one BMC before
enrolment, and ``--inventory FILE`` resolves names and hostlists within a file
not imported yet. ``--node NAME`` is a deprecated spelling of one positional name.

Each node is a separate outcome: one BMC that does not answer does not hide
the others. Up to :data:`WORKERS` BMCs are talked to at a time. One node's
error is the command's error (its exit code, 3 unreachable, 4 auth, 5 refused),
as before; several nodes print one result per node and exit as docs/output.md
says for multi-node commands: 0 all done, 5 when every node not done was
refused, else 1.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, Generic, NoReturn, TypeVar, cast

import typer

from lifecycle.cli._common import (
    BAD_INPUT,
    EXIT_CODES,
    FAILED,
    OK,
    REFUSED,
    emit_json,
    err_console,
    error_exit,
    out_console,
)
from lifecycle.cli._select import expand_names, select
from lifecycle.drivers.bmc.base import BmcDriver, Capability, Credentials, resolve_credentials
from lifecycle.drivers.bmc.factory import driver_for, driver_from_args, unsupported_reason
from lifecycle.drivers.errors import DriverError, NotSupported
from lifecycle.model.inventory import BmcSpec, InventoryError, load_inventory

WORKERS = 8  # BMCs talked to at a time: a rack's reads in a few rounds, without a burst on the BMC network

T = TypeVar("T")


class DriverChoice(StrEnum):
    REDFISH = "redfish"
    IPMI = "ipmi"


TargetsArg = Annotated[list[str] | None, typer.Argument(
    help="Nodes of the store: names or Slurm hostlists ('r01-n[01-04]').", metavar="[NODE]...",
    show_default=False)]
RackOpt = Annotated[list[str], typer.Option("--rack", help="Every node of this rack (repeatable).")]
PoolOpt = Annotated[list[str], typer.Option("--pool", help="Every node of this pool (repeatable).")]
AllOpt = Annotated[bool, typer.Option("--all", help="Every node in the store.")]
SelectorOpt = Annotated[str | None, typer.Option(
    "--selector", "-l", help="key=value[,key=value]: nodes whose state, pool, rack and sku match.")]
NodeOpt = Annotated[str | None, typer.Option(
    "--node", help="Deprecated: give the node as a positional NODE.")]
InventoryOpt = Annotated[Path | None, typer.Option(
    "--inventory", help="Resolve NODE names and hostlists in this inventory file (not imported yet) "
                        "instead of the store.")]
AddressOpt = Annotated[str | None, typer.Option(
    "--address", help="One BMC not in the store: URL (Redfish) or host[:port] (IPMI), instead of NODE.")]
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


def bad(message: str) -> NoReturn:
    error_exit(message, BAD_INPUT)


@dataclass(frozen=True)
class Selection:
    """How the command line named its BMCs (the options every `bmc` command shares)."""

    targets: Sequence[str] = ()
    node: str | None = None
    racks: Sequence[str] = ()
    pools: Sequence[str] = ()
    all_: bool = False
    selector: str | None = None
    inventory: Path | None = None
    address: str | None = None
    driver: DriverChoice = DriverChoice.REDFISH
    user: str | None = None
    password_env: str | None = None
    insecure: bool = False
    system: str | None = None


@dataclass(frozen=True)
class Bmc:
    """One BMC to talk to: a node's (``spec`` from the store or the file) or one given by --address."""

    label: str
    spec: BmcSpec | None = None
    address_driver: BmcDriver | None = None
    secret: str = ""

    def open(self, capability: Capability | None = None) -> _Target:
        """Connect; a node whose BMC lacks ``capability`` is refused (NotSupported) before any I/O."""
        if self.spec is None:
            assert self.address_driver is not None
            return _Target(self.label, self.address_driver, self.secret)
        if capability is not None and (reason := unsupported_reason(self.spec, capability)) is not None:
            raise NotSupported(self.label, reason)
        creds = resolve_credentials(self.spec.credentials, self.spec.address)
        return _Target(self.label, driver_for(self.spec, credentials=creds), creds.password)


def resolve(sel: Selection) -> list[Bmc]:
    """The BMCs named: exit 2 on no or two ways of naming them, or on anything unknown."""
    targets = [*sel.targets, *([sel.node] if sel.node else [])]
    if sel.node and sel.targets:
        bad("give NODE… or the deprecated --node, not both")
    named = bool(targets or sel.racks or sel.pools or sel.all_ or sel.selector)
    if sel.address:
        if named or sel.inventory is not None:
            bad("give either NODE… (or --rack, --pool, --all, --selector) or --address, not both")
        return [_address(sel)]
    if sel.inventory is not None:
        if sel.racks or sel.pools or sel.all_ or sel.selector:
            bad("--inventory resolves NODE names and hostlists in the file; --rack, --pool, --all and --selector "
                "select from the store (import the file first)")
        if not targets:
            bad("name the nodes of --inventory: NODE… (names or hostlists)")
        try:
            inv = load_inventory(sel.inventory)
        except InventoryError as exc:
            bad(f"{sel.inventory}: invalid inventory:\n{exc}")
        names = expand_names(targets)
        known = {n.name: n for n in inv.nodes}
        unknown = [n for n in names if n not in known]
        if unknown:
            bad(f"no node {', '.join(repr(n) for n in unknown)} in {sel.inventory}")
        return [Bmc(n, known[n].bmc) for n in names]
    if not named:
        bad("name the BMCs: NODE… (names or hostlists), --rack, --pool, --all or --selector; or --address for "
            "a BMC not in the store")
    from lifecycle.store import Store, StoreError

    store = Store()
    try:
        names = select(store, targets, racks=sel.racks, pools=sel.pools, all_=sel.all_, selector=sel.selector)
        try:
            return [Bmc(n, store.get(n).node().bmc) for n in names]
        except StoreError as exc:
            bad(str(exc))
    finally:
        store.close()


def _address(sel: Selection) -> Bmc:
    if not sel.user or not sel.password_env:
        bad("--address needs --user and --password-env VARIABLE")
    password = os.environ.get(sel.password_env, "")
    if not password:
        bad(f"environment variable {sel.password_env} is empty or unset")
    assert sel.address is not None
    try:
        made = driver_from_args(sel.driver.value, sel.address, Credentials(sel.user, password),
                                verify_tls=not sel.insecure, system=sel.system)
    except ValueError as exc:
        bad(str(exc).replace(password, "***"))
    return Bmc(sel.address, address_driver=made, secret=password)


@dataclass
class Outcome(Generic[T]):
    """One BMC's result, or why there is none (the exit code its error has on its own)."""

    label: str
    value: T | None = None
    code: int = OK
    message: str = ""

    @property
    def ok(self) -> bool:
        return self.code == OK


def _one(bmc: Bmc, act: Callable[[_Target], T], capability: Capability | None) -> Outcome[T]:
    try:
        target = bmc.open(capability)
    except DriverError as exc:
        return Outcome(bmc.label, code=exc.exit_code, message=str(exc))
    except ValueError as exc:
        return Outcome(bmc.label, code=BAD_INPUT, message=f"{bmc.label}: {exc}")
    try:
        return Outcome(bmc.label, act(target))
    except DriverError as exc:
        return Outcome(bmc.label, code=exc.exit_code, message=target.scrub(str(exc)))
    finally:
        try:
            target.driver.close()
        except DriverError as exc:
            err_console.print(f"warning: {target.scrub(str(exc))}", highlight=False)


def each(bmcs: Sequence[Bmc], act: Callable[[_Target], T], *,
         capability: Capability | None = None) -> list[Outcome[T]]:
    """``act`` on every BMC, up to :data:`WORKERS` at a time; outcomes in the order named."""
    if len(bmcs) == 1:
        return [_one(bmcs[0], act, capability)]
    with ThreadPoolExecutor(max_workers=min(WORKERS, len(bmcs))) as pool:
        return list(pool.map(lambda b: _one(b, act, capability), bmcs))


def stop_on_one_error(outcomes: Sequence[Outcome[Any]]) -> None:
    """With one BMC, its error is the command's (the message and its exit code), as it always was."""
    if len(outcomes) == 1 and not outcomes[0].ok:
        error_exit(outcomes[0].message, outcomes[0].code)


def report(outcomes: Sequence[Outcome[T]], *, as_json: bool, doc: Callable[[str, T], dict[str, Any]],
           show: Callable[[str, T], None], tables: bool = False) -> None:
    """Print each outcome (a document per node under --json) and exit as docs/output.md says.

    ``tables``: ``show`` prints tables, whose titles (naming the node) go to stderr when piped; with several
    nodes a line ``NODE:`` on stdout comes before each node's tables, so the output still says whose they are.
    """
    stop_on_one_error(outcomes)
    if len(outcomes) == 1:
        label, value = outcomes[0].label, cast(T, outcomes[0].value)
        if as_json:
            emit_json(doc(label, value))
        else:
            show(label, value)
        return
    if as_json:
        emit_json([doc(o.label, cast(T, o.value)) if o.ok else
                   {"bmc": o.label, "error": {"code": EXIT_CODES.get(o.code, "failed"), "exit_code": o.code,
                                              "message": o.message}} for o in outcomes])
    else:
        for o in outcomes:
            if o.ok:
                if tables:
                    out_console.print(f"{o.label}:", markup=False)
                show(o.label, cast(T, o.value))
            else:
                out_console.print(f"{o.label}: {EXIT_CODES.get(o.code, 'failed').upper()}: {o.message}",
                                  markup=False, soft_wrap=True)
        done = sum(o.ok for o in outcomes)
        err_console.print(f"{done} of {len(outcomes)} node(s) done", highlight=False)
    exit_for(outcomes)


def exit_for(outcomes: Sequence[Outcome[Any]]) -> None:
    if all(o.ok for o in outcomes):
        return
    raise typer.Exit(REFUSED if all(o.ok or o.code == REFUSED for o in outcomes) else FAILED)

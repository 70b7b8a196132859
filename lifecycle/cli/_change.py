"""What every command that changes hardware or a scheduler shares: --dry-run, --yes, --force.

`bmc power off`, `bmc sel --clear`, `slurm leave --policy cancel` and `lab
down` used to act the moment they were typed. Each now describes the change it
is about to make as a :class:`Change` (what, on which targets, with which side
effects: jobs requeued, a log cleared) and calls :func:`go_ahead`, which

* under ``--dry-run`` prints the change (the document under ``-o json``) and
  exits 0 having done nothing;
* with ``--yes`` lets it through;
* on a terminal asks, and refuses (exit 5) on anything but yes;
* with no terminal to ask on, refuses (exit 5) and says to pass ``--yes``.

:func:`in_service_guard` is the other half: a power action on a node that a
scheduler is using is refused (exit 5) unless ``--force``.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn

import typer

from lifecycle.cli import _output
from lifecycle.cli._common import OK, REFUSED, emit_json, error_exit, out_console

YesOpt = typer.Option(False, "--yes", "-y", help="Do not ask for confirmation (needed where there is no terminal).")
DryRunOpt = typer.Option(False, "--dry-run", help="Print what would be done; change nothing.")
ForceOpt = typer.Option(False, "--force", help="Act on a node a scheduler is using (refused without it).")

# Node states in which Slurm or Kubernetes is using the node, or racklife is moving it in or out of one.
SCHEDULED = frozenset({"joining", "in_service", "draining", "lending", "lent", "reclaiming"})


@dataclass(frozen=True)
class Change:
    """A change a command is about to make, as --dry-run and the confirmation prompt show it."""

    action: str  # "power off", "clear the event log", "leave Slurm (policy requeue)", "tear down the lab"
    targets: Sequence[str]  # nodes, BMCs, a lab directory
    effects: Sequence[str] = field(default_factory=tuple)  # what else it touches: "job 42 requeued"

    def describe(self) -> str:
        return f"{self.action}: {', '.join(self.targets) or '(nothing)'}"

    def to_json(self) -> dict[str, object]:
        return {"dry_run": True, "action": self.action, "targets": list(self.targets), "effects": list(self.effects)}


def go_ahead(change: Change, *, yes: bool, dry_run: bool) -> None:
    """Return if ``change`` may go ahead; otherwise print it (dry run, exit 0) or refuse (exit 5)."""
    if dry_run:
        if _output.current().machine:
            emit_json(change.to_json())
        else:
            out_console.print(f"dry run, nothing done: would {change.describe()}", markup=False, soft_wrap=True)
            for effect in change.effects:
                out_console.print(f"  {effect}", markup=False, soft_wrap=True)
        raise typer.Exit(OK)
    if yes:
        return
    if not (sys.stdin.isatty() and sys.stderr.isatty()):
        error_exit(f"refusing to {change.describe()} without --yes: there is no terminal to ask on", REFUSED,
                   hint="--dry-run shows what it would do; --yes does it")
    for effect in change.effects:
        typer.echo(f"  {effect}", err=True)
    if not typer.confirm(f"{change.describe()}?", default=False, err=True):
        error_exit(f"not confirmed: did not {change.describe()}", REFUSED)


def in_service_guard(nodes: Sequence[str], what: str, *, force: bool, bmc_address: str | None = None) -> None:
    """Refuse ``what`` on nodes a scheduler is using (store state), unless --force."""
    if force:
        return
    busy = scheduled(nodes, bmc_address)
    if busy:
        refuse_scheduled(busy, what, "take it out first (racklife slurm leave / role-swap), or --force to act "
                                     "anyway (the store and the scheduler are not told)")


def refuse_scheduled(busy: Sequence[tuple[str, str]], what: str, hint: str) -> NoReturn:
    error_exit(f"refusing to {what} {', '.join(f'{n} ({s})' for n, s in busy)}: a scheduler is using it", REFUSED,
               hint=hint)


def scheduled(nodes: Sequence[str], bmc_address: str | None = None) -> list[tuple[str, str]]:
    """The nodes among ``nodes`` (and the node whose BMC is ``bmc_address``) a scheduler is using: (name, state).

    Without a store (a BMC named by --address before any import) nothing is known
    and nothing is found; a store that exists but cannot be read is exit 6.
    """
    if not (nodes or bmc_address):
        return []
    from lifecycle.store import NodeNotFound, Store
    from lifecycle.store.db import default_url, is_sqlite

    url = default_url()
    if is_sqlite(url) and not Path(url.removeprefix("sqlite:///")).exists():
        return []
    store = Store(url)
    try:
        busy: list[tuple[str, str]] = []
        if bmc_address:  # the BMC named directly: the node whose inventory has it
            nodes = [*nodes, *(r.name for r in store.nodes() if _same_bmc((r.spec.get("bmc") or {}).get("address"),
                                                                          bmc_address))]
        for name in nodes:
            try:
                state = store.get(name).state.value
            except NodeNotFound:
                continue
            if state in SCHEDULED:
                busy.append((name, state))
    finally:
        store.close()
    return busy


def _same_bmc(recorded: object, given: str) -> bool:
    if not isinstance(recorded, str):
        return False
    bare = [a.lower().rstrip("/").removeprefix("https://").removeprefix("http://") for a in (recorded, given)]
    return bare[0] == bare[1]

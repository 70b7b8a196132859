"""`racklife refresh [INVENTORY] [--nodes …]`: what every source says about each node now, and the drift.

Reads the BMC, the boot server's records, Slurm, Kubernetes and the acceptance
records; stores what it saw with the time; prints each difference from the
inventory with the source that shows it. It changes nothing on any node.
Exit codes: 0 no drift, 1 drift (an unreadable source counts), 2 bad input.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import typer

from lifecycle.cli._common import BAD_INPUT, FAILED, JsonOpt, emit_json, emit_table, err_console, fail
from lifecycle.cli._select import expand_names
from lifecycle.cli.inventory import load_or_exit
from lifecycle.store import Store, StoreError

if TYPE_CHECKING:
    from lifecycle.model.inventory import Inventory
    from lifecycle.planner.observe import Sources

T = TypeVar("T")


def against_store(run: Callable[[Store, Inventory | None, Sequence[str] | None, Sources], T],
                  inventory: Path | None, nodes: str | None, firmware: bool, as_json: bool) -> T:
    """What `refresh` and `plan` share: the inventory and node list read, ``run`` on the store, bad input exit 2."""
    from lifecycle.planner import observe
    from lifecycle.planner.fleet import UnknownNodes

    inv = load_or_exit(inventory, as_json) if inventory is not None else None
    names = expand_names([nodes]) if nodes is not None and nodes.strip(",") else [] if nodes is not None else None
    store = Store()
    try:
        return run(store, inv, names, observe.default_sources(firmware=firmware, store=store))
    except (UnknownNodes, StoreError) as exc:
        fail(str(exc), BAD_INPUT)
    finally:
        store.close()


def refresh_cmd(
    inventory: Path | None = typer.Argument(None, help="Inventory YAML (default: what was last imported)."),
    nodes: str | None = typer.Option(None, "--nodes", help="Comma-separated node names (default: every node)."),
    firmware: bool = typer.Option(True, "--firmware/--no-firmware",
                                  help="Read firmware versions from each BMC (its inventory: many requests)."),
    as_json: bool = JsonOpt,
) -> None:
    """Observe every node from every source, store it, and report drift without acting."""
    from lifecycle.planner import observe
    from lifecycle.planner.fleet import refresh
    from lifecycle.planner.observed import drift

    fresh = against_store(refresh, inventory, nodes, firmware, as_json)
    seen, wants = fresh.observations, fresh.wants
    found = [d for o in seen for d in drift(o, wants[o.node])]
    if as_json:
        emit_json({"at": seen[0].at.isoformat() if seen else None, "nodes": observe.as_table(seen),
                   "drift": [d.to_json() for d in found]})
    else:
        if found:
            emit_table(f"drift ({len(seen)} node(s) observed)", ["node", "source", "drift", "what"],
                       [(d.node, d.source.value, d.kind, d.message) for d in found])
        else:
            err_console.print(f"no drift ({len(seen)} node(s) observed)")
    if found:
        raise typer.Exit(FAILED)

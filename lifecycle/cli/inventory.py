"""`racklife inventory validate|import`: check an inventory file and load it into the store."""

from __future__ import annotations

from pathlib import Path

import typer

from lifecycle.cli._common import BAD_INPUT, REFUSED, JsonOpt, emit_json, error_exit, fail, out_console
from lifecycle.model.inventory import Inventory, InventoryError, load_inventory
from lifecycle.store import ImportRefused, Store, StoreError

app = typer.Typer(help="Validate and import inventory files.", no_args_is_help=True)


def load_or_exit(path: Path, as_json: bool = False) -> Inventory:
    """Load an inventory, or print every problem (file:line: field: message) and exit 2."""
    try:
        return load_inventory(path)
    except InventoryError as exc:
        problems = [{"file": p.file, "line": p.line, "field": p.field, "message": p.message} for p in exc.problems]
        first = exc.problems[0] if exc.problems else None
        error_exit(f"{path}: {len(exc.problems)} problem(s)", BAD_INPUT,
                   file=first.file if first else str(path), line=first.line if first else None,
                   field=first.field if first else None, details={"problems": problems},
                   extra={"valid": False, "problems": problems}, lines=[str(p) for p in exc.problems])


@app.command()
def validate(file: Path = typer.Argument(..., help="Inventory YAML file."), as_json: bool = JsonOpt) -> None:
    """Validate FILE; list every problem with its line and field; exit 2 if any."""
    inv = load_or_exit(file, as_json)
    summary = {"valid": True, "site": inv.site.name, "racks": len(inv.racks), "nodes": len(inv.nodes),
               "pools": inv.pool_names(), "images": [i.name for i in inv.images]}
    if as_json:
        emit_json(summary)
    else:
        out_console.print(f"{file}: valid — site {inv.site.name}, {len(inv.racks)} rack(s), "
                          f"{len(inv.nodes)} node(s), pools {', '.join(inv.pool_names())}")


@app.command("import")
def import_(file: Path = typer.Argument(..., help="Inventory YAML file."), as_json: bool = JsonOpt) -> None:
    """Load FILE's nodes into the store as `enrolled` (idempotent; nothing written on any error)."""
    inv = load_or_exit(file, as_json)
    store = Store()
    try:
        report = store.import_inventory(inv, reason=f"inventory import from {file}")
    except ImportRefused as exc:
        error_exit(str(exc), REFUSED, details={"problems": exc.problems},
                   extra={"imported": False, "problems": exc.problems})
    except StoreError as exc:
        fail(str(exc), REFUSED)
    finally:
        store.close()
    removed = [{"node": r.node, "serial": r.serial, "state": r.state.value} for r in report.removed]
    if as_json:
        emit_json({"added": report.added, "updated": report.updated, "unchanged": report.unchanged,
                   "renamed": [{"from": old, "to": new} for old, new in report.renamed],
                   "removed": removed,
                   "changes": [{"node": c.node, "serial": c.serial, "kind": c.kind, "old": c.old, "new": c.new}
                               for c in report.changes]})
        return
    out_console.print(f"imported {file}: {len(report.added)} added, {len(report.updated)} updated, "
                      f"{len(report.unchanged)} unchanged, {len(report.renamed)} renamed, "
                      f"{len(report.removed)} removed from the file", markup=False)
    for c in report.changes:
        what = f"{c.old} → {c.new}" if c.old is not None else str(c.new)
        out_console.print(f"  {c.node}: {c.kind}: {what}", markup=False)
    for r in report.removed:
        out_console.print(f"  {r.node} (serial {r.serial}, {r.state.value}): not in the file; kept in the store "
                          "until decommissioned", markup=False)

"""`racklife plan [INVENTORY] [--nodes …] [--json]`: what it takes to converge each node, and what blocks it.

It observes every source first (as `racklife refresh` does; with `--observed`
it plans on what the last refresh stored instead, reading no source), then prints per
node the ordered actions with the reason for each, and the blockers it will
not act through. Actions with no workflow yet are shown as such.
Exit codes: 0 no changes, 1 changes planned, 2 bad input.
"""

from __future__ import annotations

from pathlib import Path

import typer

from lifecycle.cli._common import FAILED, JsonOpt, emit_json, err_console, out_console
from lifecycle.cli.refresh import against_store


def plan_cmd(
    inventory: Path | None = typer.Argument(None, help="Inventory YAML (default: what was last imported)."),
    nodes: str | None = typer.Option(None, "--nodes", help="Comma-separated node names (default: every node)."),
    firmware: bool = typer.Option(True, "--firmware/--no-firmware", help="Read firmware versions from each BMC."),
    observed: bool = typer.Option(False, "--observed",
                                  help="Plan on the last `racklife refresh`'s stored observations; read no source."),
    as_json: bool = JsonOpt,
) -> None:
    """Plan the fleet against its inventory; change nothing."""
    from lifecycle.planner.fleet import plan_fleet, plan_observed

    result = against_store(plan_observed if observed else plan_fleet, inventory, nodes, firmware, as_json)
    if as_json:
        emit_json(result.to_json())
    else:
        for n in result.nodes:
            if not n.steps and not n.blockers:
                continue
            out_console.print(f"[bold]{n.node}[/] ({n.state})")
            for i, s in enumerate(n.steps, 1):
                out_console.print(f"  {i}. {s.describe()}", markup=False, soft_wrap=True)
                out_console.print(f"     why: {s.reason}", markup=False, soft_wrap=True)
            for b in n.blockers:
                out_console.print(f"  blocked ({b.kind}): {b.message}", markup=False, soft_wrap=True)
        changing = sum(bool(n.steps) for n in result.nodes)
        blocked = sum(bool(n.blockers) for n in result.nodes)
        err_console.print("no changes" if not result.changes else f"{changing} node(s) to change", markup=False)
        if blocked:
            err_console.print(f"{blocked} node(s) blocked: racklife will not act through a blocker", markup=False)
    if result.changes:
        raise typer.Exit(FAILED)

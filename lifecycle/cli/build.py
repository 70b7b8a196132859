"""`racklife build`: the whole inventory from enrolled to in service — provision, accept, join."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import typer

from lifecycle.cli._common import FAILED, err_console, out_console
from lifecycle.cli.inventory import load_or_exit


def _racklife(*args: str) -> int:
    """Each stage is the same command a person would run, so build shows nothing the stages don't."""
    exe = shutil.which("racklife") or str(Path(sys.executable).with_name("racklife"))
    out_console.print(f"[bold]$ racklife {' '.join(args)}[/]")
    return subprocess.run([exe, *args], env=os.environ.copy(), check=False).returncode


def build_cmd(
    inventory: Path = typer.Argument(..., help="Inventory YAML file."),
    image: str | None = typer.Option(None, "--image", help="Image to provision (default: minimal)."),
    level: str = typer.Option("quick", "--level", help="Acceptance level: quick | standard | full."),
    max_in_flight: int = typer.Option(10, "--max-in-flight", min=1),
    boot_timeout: float = typer.Option(600.0, "--boot-timeout", envvar="RACKLIFE_BOOT_TIMEOUT_S", min=1),
) -> None:
    """Import, provision every node, accept every rack, and join accepted nodes to their Slurm pools.

    A node that fails a stage stays where that stage left it (inspect_failed,
    provision_failed, quarantined) and does not go on; the others do.
    """
    inv = load_or_exit(inventory)
    failed = False
    if _racklife("inventory", "import", str(inventory)) != 0:
        raise typer.Exit(FAILED)
    prov = ["provision", "--all", "--max-in-flight", str(max_in_flight), "--boot-timeout", str(boot_timeout)]
    failed |= _racklife(*prov, *(["--image", image] if image else [])) != 0
    for rack in inv.racks:
        failed |= _racklife("accept", rack.name, "--level", level) != 0
    from lifecycle.model.states import State
    from lifecycle.store import Store

    store = Store()
    try:
        joinable = [r.name for r in store.nodes(state=State.ACCEPTED)
                    if store.pool(r.pool).scheduler == "slurm"]
    finally:
        store.close()
    if joinable:
        failed |= _racklife("slurm", "join", *joinable) != 0
    store = Store()
    try:
        summary = {s.value: len(store.nodes(state=s)) for s in State if store.nodes(state=s)}
    finally:
        store.close()
    err_console.print("build finished: " + ", ".join(f"{n} {s}" for s, n in sorted(summary.items())))
    if failed:
        raise typer.Exit(FAILED)

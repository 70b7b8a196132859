"""`racklife build`: the whole inventory from enrolled to in service — an import, then `racklife apply`."""

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
    max_in_flight: int = typer.Option(10, "--max-in-flight", min=1, help="Most nodes worked on at once."),
    boot_timeout: float = typer.Option(600.0, "--boot-timeout", envvar="RACKLIFE_BOOT_TIMEOUT_S", min=1,
                                       help="Seconds to wait for a node to phone home, per boot."),
    images_dir: Path | None = typer.Option(None, "--images", help="Built images (default: $RACKLIFE_HOME/images)."),
) -> None:
    """Import the inventory, then apply it: provision, accept and join every node that needs it.

    The same as `racklife inventory import INVENTORY` followed by `racklife
    apply INVENTORY --yes`: one planner, re-planning before each wave. A node
    that fails a step stays where it left it (inspect_failed, provision_failed,
    quarantined) and does not go on; the others do. Run again on a built fleet
    it changes nothing.
    """
    load_or_exit(inventory)
    if _racklife("inventory", "import", str(inventory)) != 0:
        raise typer.Exit(FAILED)
    code = _racklife("apply", str(inventory), "--yes", "--level", level, "--max-in-flight", str(max_in_flight),
                     "--boot-timeout", str(boot_timeout), *(["--image", image] if image else []),
                     *(["--images", str(images_dir)] if images_dir else []))
    from lifecycle.model.states import State
    from lifecycle.store import Store

    store = Store()
    try:
        summary = {s.value: len(store.nodes(state=s)) for s in State if store.nodes(state=s)}
    finally:
        store.close()
    err_console.print("build finished: " + ", ".join(f"{n} {s}" for s, n in sorted(summary.items())))
    if code != 0:
        raise typer.Exit(code)

"""`racklife build`: the whole inventory from enrolled to in service — an import, then `racklife apply`."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import typer

from lifecycle.cli._common import FAILED, JsonOpt, emit_json, err_console, interrupted, out_console
from lifecycle.cli._runs import NoWaitOpt, check_no_wait
from lifecycle.cli.inventory import load_or_exit
from lifecycle.model.vocab import Level

STAGE_GRACE_S = 60.0  # how long an interrupted stage may take to say what it left and end


def _racklife(*args: str, capture: bool = False) -> tuple[int, Any]:
    """Each stage is the same command a person would run, so build shows nothing the stages don't.

    With ``capture`` (build under -o json|yaml) the stage runs with --json and its document is
    returned, to become part of build's own; its progress and errors still go to stderr.
    """
    exe = shutil.which("racklife") or str(Path(sys.executable).with_name("racklife"))
    argv = [exe, *args, *(["--json"] if capture else [])]
    if capture:
        err_console.print(f"$ racklife {' '.join(argv[1:])}", markup=False)
    else:
        out_console.print(f"[bold]$ racklife {' '.join(args)}[/]")
    proc = subprocess.Popen(argv, env=os.environ.copy(), stdout=subprocess.PIPE if capture else None, text=True)
    try:
        stdout, _ = proc.communicate()
    except KeyboardInterrupt:
        _stop_stage(proc)
        interrupted(f"build stopped during `racklife {args[0]}` (exit {proc.returncode}, above); "
                    "run the same `racklife build` again to go on from where the fleet is")
    if not capture:
        return proc.returncode, None
    try:
        doc = json.loads(stdout) if stdout.strip() else None
    except json.JSONDecodeError:
        doc = {"output": stdout}
    return proc.returncode, doc


def _stop_stage(proc: subprocess.Popen[str]) -> None:
    """^C of build: the stage stops the way its own ^C stops it (its runs go on or are cancelled, and it says which).

    A terminal's ^C reaches the whole process group, so the stage has its SIGINT already; a
    SIGINT sent to build alone has not reached it, so it is passed on. Never SIGKILL first, as
    subprocess.run does: a killed stage could not say what it left.
    """
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=1.0)
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=STAGE_GRACE_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def build_cmd(
    inventory: Path = typer.Argument(..., help="Inventory YAML file."),
    image: str | None = typer.Option(None, "--image", help="Image to provision (default: minimal)."),
    level: Level = typer.Option("quick", "--level", help="Acceptance level of accept steps."),
    max_in_flight: int = typer.Option(10, "--max-in-flight", min=1, help="Most nodes worked on at once."),
    boot_timeout: float = typer.Option(600.0, "--boot-timeout", envvar="RACKLIFE_BOOT_TIMEOUT_S", min=1,
                                       help="Seconds to wait for a node to phone home, per boot."),
    images_dir: Path | None = typer.Option(None, "--images", help="Built images (default: $RACKLIFE_HOME/images)."),
    no_wait: bool = NoWaitOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Import the inventory, then apply it: provision, accept and join every node that needs it.

    The same as `racklife inventory import INVENTORY` followed by `racklife
    apply INVENTORY --yes`: one planner, re-planning before each wave. A node
    that fails a step stays where it left it (inspect_failed, provision_failed,
    quarantined) and does not go on; the others do. Run again on a built fleet
    it changes nothing. Under -o json (yaml) one document: {"import", "apply",
    "states", "exit_code"}, the stages' own documents inside it. With --no-wait
    the apply is handed to a live `racklife serve` (`apply --no-wait`) and build
    returns with its run id.
    """
    load_or_exit(inventory, as_json)
    check_no_wait(no_wait)  # before the import: refused, nothing changes
    code, imported = _racklife("inventory", "import", str(inventory), capture=as_json)
    if code != 0:
        if as_json:
            emit_json({"import": imported, "apply": None, "states": {}, "exit_code": code})
        raise typer.Exit(FAILED)
    code, applied = _racklife("apply", str(inventory), "--yes", "--level", level, "--max-in-flight",
                              str(max_in_flight), "--boot-timeout", str(boot_timeout),
                              *(["--image", image] if image else []),
                              *(["--images", str(images_dir)] if images_dir else []),
                              *(["--no-wait"] if no_wait else []), capture=as_json)
    if no_wait:  # apply printed the run it handed to the service; the states are the service's to change
        if as_json:
            emit_json({"import": imported, "apply": applied, "states": None, "exit_code": code})
        raise typer.Exit(code)
    from lifecycle.model.states import State
    from lifecycle.store import Store

    store = Store()
    try:
        summary = {s.value: len(store.nodes(state=s)) for s in State if store.nodes(state=s)}
    finally:
        store.close()
    if as_json:
        emit_json({"import": imported, "apply": applied, "states": summary, "exit_code": code})
    err_console.print("build finished: " + ", ".join(f"{n} {s}" for s, n in sorted(summary.items())))
    if code != 0:
        raise typer.Exit(code)

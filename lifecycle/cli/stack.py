"""`racklife up|preview|destroy --stack NAME`: the cluster stack through Pulumi's Automation API.

A thin wrapper: the stack program (``stacks/cluster``) and its dynamic
providers do the work through the planner; this selects or creates the stack
on a local file backend (``$RACKLIFE_HOME/pulumi`` unless ``--backend``), and
runs the Pulumi engine on it, streaming its output. The engine is the
``pulumi`` CLI, which the Automation API drives as a subprocess: without it
on PATH, the command says how to install it and exits 2 before anything
starts. The local backend encrypts secrets with ``PULUMI_CONFIG_PASSPHRASE``
(or ``PULUMI_CONFIG_PASSPHRASE_FILE``), which only the environment supplies.
Exit codes: 0 done, 1 the engine reported a failure, 2 bad input or no Pulumi
CLI, 6 the 'stacks' extra is missing.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

import typer

from lifecycle.cli._common import BAD_INPUT, FAILED, UNAVAILABLE, JsonOpt, emit_json, err_console, fail, out_console
from lifecycle.store.db import default_home

PROGRAM = Path(__file__).resolve().parents[2] / "stacks" / "cluster"
INSTALL = ("the Pulumi CLI (`pulumi`) is not on PATH; racklife drives it through the Automation API. Install it "
           "(https://www.pulumi.com/docs/iac/download-install/: `curl -fsSL https://get.pulumi.com | sh`, then add "
           "~/.pulumi/bin to PATH) and run this again; `pulumi version` should print 3.x")
NO_KEY = ("the local backend encrypts the stack's secrets: set PULUMI_CONFIG_PASSPHRASE or "
          "PULUMI_CONFIG_PASSPHRASE_FILE")


def _error(message: str, code: int, as_json: bool) -> NoReturn:
    fail(message, code)  # the error envelope on stdout under --json / -o json


def _stack(name: str, program: Path | None, backend: Path | None, as_json: bool) -> Any:
    """The selected (or new) stack, after every check that needs no engine."""
    program = program or PROGRAM
    if shutil.which("pulumi") is None:
        _error(INSTALL, BAD_INPUT, as_json)
    if not (program / "Pulumi.yaml").is_file():
        _error(f"{program}: no Pulumi.yaml (a stack program's directory)", BAD_INPUT, as_json)
    if not (os.environ.get("PULUMI_CONFIG_PASSPHRASE") or os.environ.get("PULUMI_CONFIG_PASSPHRASE_FILE")):
        _error(NO_KEY, BAD_INPUT, as_json)
    try:
        from pulumi import automation as auto
    except ImportError:
        _error("'racklife up' needs the 'stacks' extra (pulumi is not installed): pip install 'racklife[stacks]'",
               UNAVAILABLE, as_json)
    where = (backend or default_home() / "pulumi").resolve()
    where.mkdir(parents=True, exist_ok=True)
    opts = auto.LocalWorkspaceOptions(work_dir=str(program), env_vars={"PULUMI_BACKEND_URL": f"file://{where}"})
    return auto.create_or_select_stack(stack_name=name, work_dir=str(program), opts=opts)


def _run(verb: str, stack: str, program: Path | None, backend: Path | None, as_json: bool,
         act: Callable[[Any, Callable[[str], None]], Any]) -> None:
    from pulumi import automation as auto  # _stack checked it imports

    selected = _stack(stack, program, backend, as_json)
    say: Callable[[str], None] = (lambda line: err_console.print(line, markup=False, end="")) if as_json else \
        (lambda line: out_console.print(line, markup=False, end=""))
    try:
        result = act(selected, say)
    except auto.errors.CommandError as exc:
        _error(f"pulumi {verb} failed on stack {stack}: {str(exc)[-2000:]}", FAILED, as_json)
    summary = getattr(result, "summary", None)
    changes = getattr(result, "change_summary", None) or (summary.resource_changes if summary else None) or {}
    if as_json:
        emit_json({"stack": stack, "verb": verb, "changes": dict(changes)})
    else:
        err_console.print(f"{verb}: stack {stack}: " + (", ".join(f"{k} {v}" for k, v in changes.items())
                                                        or "no changes"), markup=False)


StackOpt = typer.Option(..., "--stack", help="The stack's name (its config: Pulumi.NAME.yaml beside the program).")
# No default in the option itself: the path of the checkout would reach the help and docs/cli.md.
ProgramOpt = typer.Option(None, "--program", help="The stack program's directory (default: racklife's stacks/cluster).")
BackendOpt = typer.Option(None, "--backend", envvar="RACKLIFE_PULUMI_BACKEND",
                          help="Directory of the local state backend (default: $RACKLIFE_HOME/pulumi).")


def up_cmd(stack: str = StackOpt, program: Path | None = ProgramOpt, backend: Path | None = BackendOpt,
           as_json: bool = JsonOpt) -> None:
    """Build the cluster stack: create or update every resource (nodes, pools, schedulers) with Pulumi."""
    _run("up", stack, program, backend, as_json, lambda s, say: s.up(on_output=say))


def preview_cmd(stack: str = StackOpt, program: Path | None = ProgramOpt, backend: Path | None = BackendOpt,
                as_json: bool = JsonOpt) -> None:
    """Show what `racklife up` would change in the cluster stack; change nothing."""
    _run("preview", stack, program, backend, as_json, lambda s, say: s.preview(on_output=say))


def destroy_cmd(stack: str = StackOpt, program: Path | None = ProgramOpt, backend: Path | None = BackendOpt,
                yes: bool = typer.Option(False, "--yes", help="Do not ask before destroying."),
                as_json: bool = JsonOpt) -> None:
    """Destroy the cluster stack: memberships leave their schedulers, then nodes are decommissioned (no erase)."""
    if not yes:
        fail("destroy drains and decommissions nodes: pass --yes", BAD_INPUT)
    _run("destroy", stack, program, backend, as_json, lambda s, say: s.destroy(on_output=say))

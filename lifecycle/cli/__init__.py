"""The `racklife` command. Each command group lives in its own module, listed in `_lazy.COMMANDS`."""

from __future__ import annotations

import atexit
import gc
import os
import sys
import traceback
from typing import NoReturn

import typer
from typer import _click as click  # typer vendors its own click (0.29): its classes, not the click package

from lifecycle.cli import _common, _output
from lifecycle.cli._common import BAD_INPUT, INTERNAL, INTERRUPTED, REFUSED, UNAVAILABLE, error_exit, fail
from lifecycle.cli._help import HELP_OPTION_NAMES
from lifecycle.cli._lazy import LazyGroup
from lifecycle.model import events
from lifecycle.model.redact import install_logging_filter
from lifecycle.workflows.retry import RetryPolicy

app = typer.Typer(
    name="racklife",
    help="Bare-metal GPU racks from cabled and powered to accepted and serving.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=True,  # --install-completion / --show-completion (bash, zsh, fish, PowerShell)
    context_settings={"help_option_names": HELP_OPTION_NAMES},  # every command inherits it
    cls=LazyGroup,  # commands are imported when used, not to print help (lifecycle/cli/_lazy.py)
)


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        typer.echo(f"racklife {version('racklife')}")
        raise typer.Exit(0)


@app.callback()
def _root(
    _show_version: bool = typer.Option(False, "--version", is_eager=True, callback=_version,
                                       help="Print racklife's version and exit."),
    db: str | None = typer.Option(
        None, "--db", envvar="RACKLIFE_DB",
        help="Database URL (sqlite:///PATH or postgresql://...). Default: ~/.racklife/racklife.sqlite.",
    ),
) -> None:
    if db:
        if db != os.environ.get("RACKLIFE_DB"):
            _common.settings_source["db"] = "--db"
        os.environ["RACKLIFE_DB"] = db
    try:
        RetryPolicy.from_env()  # a malformed RACKLIFE_RETRY_* is refused before anything runs
    except ValueError as exc:
        fail(str(exc), BAD_INPUT)
    event_log = os.environ.get("RACKLIFE_EVENT_LOG")
    if event_log and event_log not in ("stderr", "stdout", "-") and (
            os.path.isdir(event_log) or not os.path.isdir(os.path.dirname(os.path.abspath(event_log)))):
        fail(f"RACKLIFE_EVENT_LOG={event_log}: not a file in an existing directory", BAD_INPUT)
    events.configure(event_log)  # JSON lines of every transition and step (docs/observability.md)



def main() -> None:
    # The interpreter's last collections walk every object of sqlalchemy, pydantic, DBOS and
    # matplotlib before the process ends: ~0.7 s per command measured (docs/acceptance.md).
    # Frozen objects are skipped; the process is ending anyway.
    atexit.register(gc.freeze)
    install_logging_filter()
    _output.set_current(_output.sniff(sys.argv[1:]))  # parse errors answer in the format asked for
    try:
        code = _run()
    except typer.Exit as exc:  # an error_exit from a handler below
        code = exc.exit_code
    sys.exit(code)


def _run() -> int:
    """Run the command; every way it can end becomes an exit code, never a traceback."""
    try:
        rc = app(standalone_mode=False)
    except click.exceptions.UsageError as exc:
        _usage_error(exc)
    except typer.Abort:
        error_exit("not confirmed: nothing was done", REFUSED)
    except click.ClickException as exc:
        error_exit(exc.format_message(), exc.exit_code)
    except KeyboardInterrupt:
        error_exit("interrupted", INTERRUPTED)
    except Exception as exc:
        message = _store_unavailable(exc)
        if message is not None:
            error_exit(message, UNAVAILABLE)
        driver = _driver_error(exc)
        if driver is not None:
            error_exit(str(exc), driver)
        if os.environ.get("RACKLIFE_DEBUG"):
            traceback.print_exc()
        error_exit(f"internal error: {type(exc).__name__}: {exc}{_import_context(exc)}", INTERNAL,
                   hint="this is a bug in racklife; RACKLIFE_DEBUG=1 prints the traceback for a report")
    # Outside the try: error_exit raises typer.Exit, a RuntimeError, which the handler above
    # would report as an internal error (it did: "internal error: Exit: 130" on ^C of build).
    if rc == INTERRUPTED and not _common.interrupt_reported():  # typer's answer to ^C: exit 130, silently
        error_exit("interrupted", INTERRUPTED)
    return rc if isinstance(rc, int) else 0


def _import_context(exc: Exception) -> str:
    """For a module racklife depends on that did not import: which interpreter looked, and whether it
    finds the module now. CI once failed on "No module named 'lightkube'", a base dependency that
    imported in the same environment before and after; this says next time whether the environment
    changed under the command (found now) or lacks the module (still not found)."""
    if not isinstance(exc, ModuleNotFoundError) or not exc.name or exc.name.split(".")[0] == "lifecycle":
        return ""
    import importlib
    import importlib.util

    importlib.invalidate_caches()
    try:
        found = importlib.util.find_spec(exc.name.split(".")[0]) is not None
    except (ImportError, ValueError):
        found = False
    now = "it is found now: the environment changed while the command ran" if found else "it is not installed there"
    return f" (python {sys.executable}, prefix {sys.prefix}: {now})"


def _usage_error(exc: click.exceptions.UsageError) -> NoReturn:
    """Click's usage message (usage line, error, try -h), or under -o json the envelope."""
    if _output.current().structured:
        hint = None
        if exc.ctx is not None:
            hint = f"{exc.ctx.command_path} -h for the options"
        error_exit(exc.format_message(), BAD_INPUT, hint=hint)
    from typer import rich_utils

    rich_utils.rich_format_error(exc)  # as typer prints it: usage line, the error in a box, "Try -h"
    raise typer.Exit(exc.exit_code)


def _driver_error(exc: Exception) -> int | None:
    """A driver error past a command (an unreachable BMC, say): its own exit code (3, 4, 5…)."""
    errors = sys.modules.get("lifecycle.drivers.errors")
    if errors is not None and isinstance(exc, errors.DriverError):
        return int(exc.exit_code)
    return None


def _store_unavailable(exc: Exception) -> str | None:
    """The one line for a store that cannot serve, or None for any other error.

    The store (and SQLAlchemy) is imported only by commands that use it; an
    error can come from it only if it was imported, so nothing is imported here.
    """
    errors, sa = sys.modules.get("lifecycle.store.errors"), sys.modules.get("sqlalchemy")
    if errors is not None and isinstance(exc, errors.StoreUnavailable):
        return str(exc)
    if sa is not None and isinstance(exc, (sa.exc.OperationalError, sa.exc.InterfaceError)):
        # A database error past the store's own translation (DBOS's queries, say): still one line.
        from lifecycle.store.connect import unavailable as store_unavailable
        return str(store_unavailable(exc, os.environ.get("RACKLIFE_DB") or "(default store)"))
    return None

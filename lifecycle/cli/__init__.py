"""The `racklife` command. Each command group lives in its own module, listed in `_lazy.COMMANDS`."""

from __future__ import annotations

import atexit
import gc
import os
import sys

import typer

from lifecycle.cli._common import BAD_INPUT, fail, unavailable
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
    as_json = "--json" in sys.argv[1:]
    try:
        app()
    except Exception as exc:
        message = _store_unavailable(exc)
        if message is None:
            raise
        unavailable(message, as_json)


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

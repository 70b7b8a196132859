"""What every command shares: JSON or table output, exit codes, clear errors.

Everything a command prints goes through here, and through the redaction
filter (``lifecycle.model.redact``) on the way: the consoles, ``emit_json``,
``emit_table`` and ``fail``. A command that writes to stdout another way must
call ``redact`` itself.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from lifecycle.model.redact import redact

# Exit codes shared by all commands (docs/quickstart.md, "Exit codes").
OK = 0
FAILED = 1  # the operation ran and its verdict is "fail"
BAD_INPUT = 2
UNREACHABLE = 3
AUTH_FAILED = 4
REFUSED = 5
UNAVAILABLE = 6  # the environment cannot serve the command: store unusable, optional extra missing


class _RedactingConsole(Console):
    """A console whose text passes the redaction filter (tables are redacted cell by cell)."""

    def print(self, *objects: Any, **kwargs: Any) -> None:
        super().print(*(redact(o) if isinstance(o, str) else o for o in objects), **kwargs)


err_console = _RedactingConsole(stderr=True, highlight=False)
out_console = _RedactingConsole(highlight=False)

JsonOpt = typer.Option(False, "--json", help="Print machine-readable JSON.")


def fail(message: str, code: int = BAD_INPUT) -> NoReturn:
    err_console.print(f"[bold red]error:[/] {escape(message)}", markup=True, soft_wrap=True)
    raise typer.Exit(code)


def emit_json(data: Any) -> None:
    sys.stdout.write(redact(json.dumps(data, indent=2, sort_keys=False, default=str)) + "\n")


def unavailable(message: str, as_json: bool) -> NoReturn:
    """The environment cannot serve the command: one line (JSON under --json), exit 6."""
    if as_json:
        emit_json({"error": message, "exit_code": UNAVAILABLE})
    err_console.print(f"[bold red]error:[/] {escape(message)}", markup=True, soft_wrap=True)
    raise SystemExit(UNAVAILABLE)


def emit_table(title: str | None, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    table = Table(title=title, show_lines=False)
    for c in columns:
        table.add_column(c)
    for r in rows:
        table.add_row(*("" if v is None else redact(str(v)) for v in r))
    out_console.print(table)

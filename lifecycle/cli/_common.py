"""What every command shares: JSON or table output, exit codes, clear errors."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

# Exit codes shared by all commands.
OK = 0
FAILED = 1  # the operation ran and its verdict is "fail"
BAD_INPUT = 2
UNREACHABLE = 3
AUTH_FAILED = 4
REFUSED = 5

err_console = Console(stderr=True, highlight=False)
out_console = Console(highlight=False)

JsonOpt = typer.Option(False, "--json", help="Print machine-readable JSON.")


def fail(message: str, code: int = BAD_INPUT) -> NoReturn:
    err_console.print(f"[bold red]error:[/] {escape(message)}", markup=True, soft_wrap=True)
    raise typer.Exit(code)


def emit_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=False, default=str) + "\n")


def emit_table(title: str | None, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    table = Table(title=title, show_lines=False)
    for c in columns:
        table.add_column(c)
    for r in rows:
        table.add_row(*("" if v is None else str(v) for v in r))
    out_console.print(table)

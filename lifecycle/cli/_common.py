"""What every command shares: output in the format asked for, exit codes, one shape of error.

Everything a command prints goes through here, and through the redaction
filter (``lifecycle.model.redact``) on the way: the consoles, ``emit_json``,
``emit_table`` and ``fail``. A command that writes to stdout another way must
call ``redact`` itself.

Every failure leaves through :func:`fail` (or ``main``'s handlers, which call
:func:`error_exit`): one line ``error: …`` on stderr and, under ``-o json`` or
``-o yaml``, the same error as a document on stdout::

    {"error": {"code": "refused", "exit_code": 5, "message": "…", "hint": "…",
               "file": "…", "line": 12, "field": "nodes[3].bmc"}}

so a script reads one shape whatever went wrong. The exit code says which kind
of failure it was (``EXIT_CODES``, docs/output.md).
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from typing import Any, NoReturn

import typer
from rich.console import Console
from rich.markup import escape

from lifecycle.cli import _output
from lifecycle.model.redact import redact

# Exit codes shared by all commands (docs/output.md, "Exit codes").
OK = 0
FAILED = 1  # the operation ran and its verdict is "fail"
BAD_INPUT = 2  # the command line or an input file is wrong; nothing was done
UNREACHABLE = 3
AUTH_FAILED = 4
REFUSED = 5  # a precondition does not hold (a node in service, no --yes, a lab not running); nothing was done
UNAVAILABLE = 6  # the environment cannot serve the command: store unusable, optional extra missing
INTERNAL = 70  # a bug in racklife (sysexits' EX_SOFTWARE): the one line names it, RACKLIFE_DEBUG=1 shows more
INTERRUPTED = 130  # Ctrl-C (128 + SIGINT)

# The exit code → the ``code`` of the JSON error envelope.
EXIT_CODES: dict[int, str] = {
    FAILED: "failed",
    BAD_INPUT: "bad_input",
    UNREACHABLE: "unreachable",
    AUTH_FAILED: "auth_failed",
    REFUSED: "refused",
    UNAVAILABLE: "unavailable",
    INTERNAL: "internal",
    INTERRUPTED: "interrupted",
}


class _RedactingConsole(Console):
    """A console whose text passes the redaction filter (tables are redacted cell by cell)."""

    def print(self, *objects: Any, **kwargs: Any) -> None:
        super().print(*(redact(o) if isinstance(o, str) else o for o in objects), **kwargs)


err_console = _RedactingConsole(stderr=True, highlight=False)
out_console = _RedactingConsole(highlight=False)

# Where a root option came from, for `racklife config view` ({"db": "--db"} when given on the command line).
settings_source: dict[str, str] = {}

JsonOpt = typer.Option(False, "--json", help="Print machine-readable JSON (the same as -o json).")


def envelope(message: str, code: int, *, hint: str | None = None, file: str | None = None,
             line: int | None = None, field: str | None = None,
             details: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The error document: ``{"error": {code, exit_code, message, hint?, file?, line?, field?, …}}``."""
    err: dict[str, Any] = {"code": EXIT_CODES.get(code, "failed"), "exit_code": code, "message": message}
    for key, value in (("hint", hint), ("file", file), ("line", line), ("field", field)):
        if value is not None:
            err[key] = value
    return {"error": err | dict(details or {})}


def error_exit(message: str, code: int = BAD_INPUT, *, hint: str | None = None, file: str | None = None,
               line: int | None = None, field: str | None = None, details: Mapping[str, Any] | None = None,
               extra: Mapping[str, Any] | None = None, lines: Sequence[str] = (),
               as_json: bool = False) -> NoReturn:
    """Print the error (stderr; the envelope on stdout under -o json|yaml) and exit with ``code``.

    ``extra`` are top-level keys kept beside ``error`` for readers of an
    older shape (``problems``, ``valid``); ``lines`` are printed under the
    message on stderr (each problem of a file, say). ``as_json`` prints the
    envelope even where no format was chosen (a command's app invoked on its own).
    """
    if as_json or _output.current().structured:
        emit_json(dict(extra or {}) | envelope(message, code, hint=hint, file=file, line=line, field=field,
                                                details=details))
    where = f"{file}:{line}: " if file and line and not lines else ""
    err_console.print(f"[bold red]error:[/] {escape(where + message)}", markup=True, soft_wrap=True)
    for text in lines:
        err_console.print(f"  {text}", markup=False, soft_wrap=True)
    if hint:
        err_console.print(f"hint: {hint}", markup=False, soft_wrap=True)
    raise typer.Exit(code)


_interrupt: list[str] = []  # set once a command has said what an interrupt left behind


def interrupted(*lines: str) -> NoReturn:
    """Ctrl-C: say what was left (a run that can be resumed, say) and exit 130, without a traceback."""
    _interrupt.append("said")
    error_exit("interrupted", INTERRUPTED, lines=lines)


def say_interrupted(*lines: str) -> None:
    """What :func:`interrupted` prints, without leaving (for a caller that must end the process itself)."""
    with contextlib.suppress(typer.Exit):
        interrupted(*lines)


def interrupt_reported() -> bool:
    return bool(_interrupt)


def fail(message: str, code: int = BAD_INPUT, *, hint: str | None = None, file: str | None = None,
         line: int | None = None, field: str | None = None) -> NoReturn:
    error_exit(message, code, hint=hint, file=file, line=line, field=field)


def emit_json(data: Any) -> None:
    """The command's data document, in the format asked for (JSON, or YAML, or its names)."""
    _output.emit(data)


def unavailable(message: str, as_json: bool = False) -> NoReturn:
    """The environment cannot serve the command: one line (the envelope under -o json), exit 6."""
    if as_json and not _output.current().structured:
        _output.set_current(_output.Output(_output.Format.JSON))
    error_exit(message, UNAVAILABLE)


def emit_table(title: str | None, columns: Sequence[str], rows: Sequence[Sequence[Any]],
               wide: Sequence[str] = ()) -> None:
    """Rows under ``columns`` in the format asked for (``_output.table``); ``wide`` columns only with -o wide."""
    _output.table(out_console, title, columns, rows, wide)

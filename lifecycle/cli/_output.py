"""One renderer for everything a command prints as data: `-o table|wide|json|yaml|name`, `--no-headers`.

Scripts read racklife's output the way they read kubectl's: a Rich box table
wrapped at 80 columns cut run ids (``accept-917de0d…``) and node names, and
each command chose its own JSON-or-text switch. Here every command that
prints data gets the same two options (added to it by :func:`add_options`
when the command is built, so a new command gets them by declaring
``--json``), and prints through :func:`emit` and :func:`table`:

* ``table`` (default): a Rich table when stdout is a terminal, plain
  space-aligned columns when it is not; never truncated either way.
* ``wide``: plain columns always, with the extra columns a command marks wide.
* ``json`` (``--json`` is the same), ``yaml``: the command's data document.
* ``name``: one name per line (node, run id, BMC), for ``xargs``.

The chosen format lives in a context variable for the command's run, so
errors (``_common.fail``) know whether to print the JSON envelope too.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import typer
import typer.main
from rich.console import Console
from rich.table import Table
from typer import _click as click  # typer vendors its own click (0.29): its classes, not the click package

from lifecycle.model.redact import redact


class Format(StrEnum):
    TABLE = "table"
    WIDE = "wide"
    JSON = "json"
    YAML = "yaml"
    NAME = "name"


STRUCTURED = frozenset({Format.JSON, Format.YAML})  # a document on stdout, errors as an envelope too
MACHINE = STRUCTURED | {Format.NAME}  # the command takes its data (``--json``) path


@dataclass(frozen=True)
class Output:
    """How this command prints its data."""

    format: Format = Format.TABLE
    headers: bool = True

    @property
    def machine(self) -> bool:
        return self.format in MACHINE

    @property
    def structured(self) -> bool:
        return self.format in STRUCTURED


_DEFAULT = Output()
_current: ContextVar[Output] = ContextVar("racklife_output")


def current() -> Output:
    return _current.get(_DEFAULT)


@contextmanager
def using(out: Output) -> Iterator[Output]:
    token = _current.set(out)
    try:
        yield out
    finally:
        _current.reset(token)


def set_current(out: Output) -> None:
    """For the process's entry point, before any command runs (errors of parsing see it)."""
    _current.set(out)


# ------------------------------------------------------------------ documents

NAME_KEYS = ("name", "node", "id", "run_id", "bmc")  # the field that names an item, first found wins
LIST_KEYS = ("nodes", "runs", "items")  # where a document keeps its list of items


def document(data: Any) -> Any:
    """``data`` as plain JSON types (dates and paths as strings), redacted."""
    return json.loads(redact(json.dumps(data, default=str)))


def render(data: Any, fmt: Format) -> str:
    if fmt is Format.YAML:
        import yaml

        return str(yaml.safe_dump(document(data), sort_keys=False, allow_unicode=True, width=10_000))
    if fmt is Format.NAME:
        return "".join(f"{n}\n" for n in names(document(data)))
    return redact(json.dumps(data, indent=2, sort_keys=False, default=str)) + "\n"


def names(data: Any) -> list[str]:
    """The names in a document: each item's name of a list, or of the document's own list, or its own name."""
    if isinstance(data, list):
        return [n for item in data for n in _name_of(item)]
    if isinstance(data, dict):
        for key in LIST_KEYS:
            if isinstance(data.get(key), list):
                return names(data[key])
        return _name_of(data)
    return [str(data)]


def _name_of(item: Any) -> list[str]:
    if isinstance(item, dict):
        for key in NAME_KEYS:
            if isinstance(item.get(key), str):
                return [item[key]]
        return []
    return [str(item)]


def emit(data: Any) -> None:
    """Print a command's data document in the chosen format (JSON unless yaml or name was asked for)."""
    fmt = current().format
    sys.stdout.write(render(data, fmt if fmt in MACHINE else Format.JSON))
    sys.stdout.flush()


# ------------------------------------------------------------------ tables


def table(console: Console, title: str | None, columns: Sequence[str], rows: Sequence[Sequence[Any]],
          wide: Sequence[str] = ()) -> None:
    """Rows under ``columns``; the columns named in ``wide`` only with ``-o wide``."""
    out = current()
    keep = [i for i, c in enumerate(columns) if out.format is Format.WIDE or c not in wide]
    heads = [columns[i] for i in keep]
    cells = [[_cell(r[i]) for i in keep] for r in rows]
    if out.format is Format.NAME:
        sys.stdout.write("".join(f"{c[0]}\n" for c in cells if c and c[0]))
        return
    if out.format is Format.TABLE and console.is_terminal:
        t = Table(title=title, show_lines=False, show_header=out.headers)
        for i, c in enumerate(heads):
            # The first column names the row (node, run id): kept whole; the others fold onto the next
            # line when the terminal is narrow, never cut with an ellipsis.
            whole = max([len(c), *(len(r[0]) for r in cells)]) if i == 0 else None
            t.add_column(c, overflow="fold", min_width=whole, no_wrap=i == 0)
        for r in cells:
            t.add_row(*r)
        console.print(t)
        return
    if title and out.headers:
        sys.stderr.write(redact(title) + ":\n")  # a title on stdout would be a line that is not a row
    sys.stdout.write(plain(heads if out.headers else None, cells))
    sys.stdout.flush()


def _cell(value: Any) -> str:
    return "" if value is None else " ".join(redact(str(value)).split())


def plain(columns: Sequence[str] | None, rows: Sequence[Sequence[str]]) -> str:
    """Space-aligned columns, nothing truncated; an empty cell shows as '-' so every row has every field."""
    lines = [[c or "-" for c in r] for r in ([list(columns)] if columns else []) + [list(r) for r in rows]]
    if not lines:
        return ""
    widths = [max(len(line[i]) for line in lines) for i in range(len(lines[0]))]
    return "".join("  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip() + "\n"
                   for line in lines)


# ------------------------------------------------------------------ the options


def _options_of(fn: Callable[..., None]) -> list[click.Parameter]:
    t = typer.Typer(add_completion=False)
    t.command()(fn)
    return list(typer.main.get_command(t).params)


def _template(output: Format | None = typer.Option(
                  None, "-o", "--output", metavar="FORMAT",
                  help="table (the default; plain columns when not a terminal), wide, json, yaml or name "
                       "(one name per line)."),
              no_headers: bool = typer.Option(False, "--no-headers",
                                              help="Leave out the header row and titles of tables.")) -> None:
    """The two options every data command takes."""


def _json_param(cmd: click.Command) -> click.Parameter | None:
    return next((p for p in cmd.params if "--json" in getattr(p, "opts", ())), None)


class OutputConflict(click.exceptions.UsageError):
    """``--json`` with another ``-o``."""


def add_options(cmd: click.Command) -> None:
    """Give ``cmd`` (and each command under it) ``-o`` and ``--no-headers`` if it prints data (has ``--json``).

    The command's function keeps its ``--json`` flag, true for every machine
    format (json, yaml, name): it prints its document and :func:`emit`
    renders it in the format asked for.
    """
    for sub in (getattr(cmd, "commands", None) or {}).values():
        add_options(sub)
    flag = _json_param(cmd)
    if flag is None or any("--output" in getattr(p, "opts", ()) for p in cmd.params) or cmd.callback is None:
        return
    cmd.params[cmd.params.index(flag):cmd.params.index(flag) + 1] = [flag, *_options_of(_template)]
    inner, key = cmd.callback, flag.name or "json"

    def callback(**kwargs: Any) -> Any:
        out = resolve(bool(kwargs[key]), kwargs.pop("output", None), bool(kwargs.pop("no_headers", False)))
        kwargs[key] = out.machine
        with using(out):
            return inner(**kwargs)

    cmd.callback = callback


def resolve(as_json: bool, output: str | Format | None, no_headers: bool) -> Output:
    fmt = Format(output) if output is not None else (Format.JSON if as_json else Format.TABLE)
    if as_json and fmt is not Format.JSON:
        raise OutputConflict(f"--json is -o json; it cannot go with -o {fmt.value}")
    return Output(fmt, headers=not no_headers)


def sniff(argv: Sequence[str]) -> Output:
    """The output a command line asks for, read before parsing: so that a usage error can answer in JSON."""
    fmt: Format | None = None
    for i, arg in enumerate(argv):
        if arg == "--":
            break
        value = None
        if arg == "--json":
            value = Format.JSON.value
        elif arg in ("-o", "--output") and i + 1 < len(argv):
            value = argv[i + 1]
        elif arg.startswith("--output="):
            value = arg.partition("=")[2]
        elif arg.startswith("-o") and len(arg) > 2:
            value = arg[2:]
        if value is not None and value in Format._value2member_map_:
            fmt = Format(value)
    return Output(fmt or Format.TABLE, headers="--no-headers" not in argv)

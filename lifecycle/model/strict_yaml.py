"""Bounded, strict YAML for files racklife takes from people: inventories.

An inventory is written by hand or by a script, reviewed in git, and read by
a controller that can power servers off. PyYAML alone will happily expand a
10 KB file of nested aliases ("billion laughs") until memory runs out, recurse
until Python's stack ends on 20,000 nested brackets, read a 50 MB file for
half a minute, and end in a traceback on a raw NUL or escape byte. Here the
file is bounded before YAML sees it (size, control characters with their line
and column), and while it is composed (no aliases, a nesting depth limit);
every failure is a :class:`Problem` with file, line and field, never an
exception from the YAML library.

Each key and item's line is kept so that validation errors found later (by
pydantic, on plain data) can point at the line that holds the field.
"""

from __future__ import annotations

import gc
import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import yaml
from yaml.composer import Composer
from yaml.constructor import SafeConstructor
from yaml.parser import Parser
from yaml.reader import Reader
from yaml.resolver import Resolver
from yaml.scanner import Scanner

MAX_BYTES = 16 * 1024 * 1024
"""Largest inventory read: about 20,000 nodes written out in full."""
MAX_DEPTH = 32
"""Deepest nesting of mappings and lists; an inventory needs 6."""
MAX_REPORTED = 20
"""Control characters reported one by one before the rest are counted."""

# Characters no hand-written inventory holds: C0 controls except tab and the line breaks, DEL,
# C1 controls (U+0085 is a YAML line break PyYAML counts but editors do not), the Unicode line and
# paragraph separators, a byte-order mark anywhere but at the start, and bidirectional overrides
# ("Trojan Source": text that displays in another order than it is read).
_RAW_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]|(?<=.)\ufeff",
                          re.S)
# In a value, after YAML's escapes ("\e", "\0", "\n") are applied: no control character at all.
_VALUE_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ufeff]")

Path_ = tuple[str | int, ...]

try:
    from yaml._yaml import CParser
except ImportError:  # a PyYAML built without libyaml: the same events from its Python parser, slower

    class CParser(Reader, Scanner, Parser):  # type: ignore[no-redef]
        def __init__(self, stream: str) -> None:
            Reader.__init__(self, stream)
            Scanner.__init__(self)
            Parser.__init__(self)


@dataclass(frozen=True, order=True)
class Problem:
    line: int
    field: str
    message: str
    file: str = ""

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.field}: {self.message}"


class InventoryError(Exception):
    """The inventory is invalid; ``problems`` lists every problem found."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = sorted(problems)
        super().__init__("\n".join(str(p) for p in self.problems))


def char_name(ch: str) -> str:
    """``U+001B (ESC)``: how a control character is named in an error."""
    short = {"\x00": "NUL", "\x1b": "ESC", "\x7f": "DEL", "\t": "TAB", "\n": "LF", "\r": "CR", "\ufeff": "BOM"}
    name = short.get(ch) or unicodedata.name(ch, "") or "control character"
    return f"U+{ord(ch):04X} ({name})"


def control_characters(text: str, file: str) -> list[Problem]:
    """Every raw control character in the file, with line and column (1-based)."""
    problems: list[Problem] = []
    hits = list(_RAW_CONTROL.finditer(text))
    for m in hits[:MAX_REPORTED]:
        pos = m.start()
        line = text.count("\n", 0, pos) + 1
        column = pos - (text.rfind("\n", 0, pos) + 1) + 1
        problems.append(Problem(line, "<text>", f"column {column}: control character {char_name(m.group())} "
                                "is not allowed in an inventory", file))
    if len(hits) > MAX_REPORTED:
        problems.append(Problem(problems[-1].line, "<text>",
                                f"and {len(hits) - MAX_REPORTED} more control characters", file))
    return problems


class _Loader(Composer, CParser, SafeConstructor, Resolver):
    """libyaml's parser under PyYAML's composer, which refuses aliases and deep nesting.

    libyaml parses about ten times faster than PyYAML's Python parser (a
    10,000-node file in seconds, not half a minute); its own composer is
    recursive C with no depth limit, so the composing stays in Python, where
    the limits are.
    """

    def __init__(self, stream: str) -> None:
        CParser.__init__(self, stream)
        SafeConstructor.__init__(self)
        Resolver.__init__(self)
        Composer.__init__(self)
        self.lines: dict[Path_, int] = {}
        self.duplicates: list[tuple[Path_, int]] = []
        self.bad_values: list[tuple[Path_, int, str]] = []
        self.depth = 0

    def _here(self) -> Any:
        event: Any = self.peek_event()
        return event.start_mark

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        if self.check_event(yaml.AliasEvent):
            raise yaml.MarkedYAMLError(
                None, None, "YAML aliases (*name) and merge keys are not allowed in an inventory: "
                "write each value out (a generated file can repeat it)", self._here())
        self.depth += 1
        try:
            if self.depth > MAX_DEPTH:
                raise yaml.MarkedYAMLError(None, None, f"nested deeper than {MAX_DEPTH} levels", self._here())
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1


def _scalar(loader: _Loader, node: yaml.Node, path: Path_) -> Any:
    try:
        value = loader.construct_object(node, deep=True)
    except (ValueError, OverflowError) as exc:  # e.g. an integer of more than 4,300 digits
        loader.bad_values.append((path, node.start_mark.line + 1, f"cannot be read: {exc}"))
        return None
    if isinstance(value, str):
        m = _VALUE_CONTROL.search(value)
        if m is not None:
            loader.bad_values.append((path, node.start_mark.line + 1,
                                      f"contains control character {char_name(m.group())} "
                                      "(after YAML escapes); values are one line of printable text"))
    return value


def _walk(loader: _Loader, node: yaml.Node, path: Path_) -> Any:
    loader.lines.setdefault(path, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        out: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            key = _scalar(loader, key_node, path) if isinstance(key_node, yaml.ScalarNode) else None
            key_s = key if isinstance(key, str) else str(key)
            child = (*path, key_s)
            if key_s in out:
                loader.duplicates.append((child, key_node.start_mark.line + 1))
            loader.lines[child] = key_node.start_mark.line + 1
            out[key_s] = _walk(loader, value_node, child)
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_walk(loader, item, (*path, i)) for i, item in enumerate(node.value)]
    return _scalar(loader, node, path)


def parse_yaml(text: str, file: str) -> tuple[Any, dict[Path_, int], list[Problem]]:
    """Plain data, the line of every path, and the problems found on the way; raise if nothing is usable."""
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > MAX_BYTES:
        raise InventoryError([Problem(0, "<file>", f"is {size:,} bytes; the limit is {MAX_BYTES:,}", file)])
    raw = control_characters(text, file)
    if raw:
        raise InventoryError(raw)
    loader = _Loader(text)
    # Without aliases the node graph has no cycles, so the cyclic collector has nothing to find; left on,
    # its passes over hundreds of thousands of young YAML nodes make a large file quadratic (3 s of CPU for
    # 10,000 nodes instead of 1).
    collecting = gc.isenabled()
    gc.disable()
    try:
        root = loader.get_single_node()
        if root is None:
            raise InventoryError([Problem(1, "<document>", "the file is empty", file)])
        data = _walk(loader, root, ())
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else 1
        where = f"column {mark.column + 1}: " if mark else ""
        raise InventoryError([Problem(line, "<yaml>", f"{where}not valid YAML: {exc.problem}", file)]) from None
    except yaml.YAMLError as exc:  # ReaderError and other unmarked errors
        raise InventoryError([Problem(1, "<yaml>", f"not valid YAML: {exc}", file)]) from None
    except RecursionError:
        raise InventoryError([Problem(1, "<yaml>", "nested too deeply", file)]) from None
    finally:
        loader.dispose()
        if collecting:
            gc.enable()
    problems = [Problem(line, fmt(p, data), "duplicate key (YAML would silently keep the last)", file)
                for p, line in loader.duplicates]
    problems += [Problem(line, fmt(p, data), message, file) for p, line, message in loader.bad_values]
    return data, loader.lines, problems


def fmt(path: Iterable[str | int], data: Any = None) -> str:
    """``nodes[3](r01-n04).nics[0](eno1).mac``: a path with the name of each listed record."""
    out = ""
    cur = data
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
            item = cur[part] if isinstance(cur, list) and part < len(cur) else None
            if isinstance(item, dict) and isinstance(item.get("name"), str):
                name = item["name"]
                out += f"({name})" if _VALUE_CONTROL.search(name) is None else f"({ascii(name)[1:-1]})"
            cur = item
        else:
            out += f".{part}" if out else part
            cur = cur.get(part) if isinstance(cur, dict) else None
    return out or "<document>"


def line_of(lines: dict[Path_, int], path: Path_) -> int:
    for cut in range(len(path), -1, -1):
        if path[:cut] in lines:
            return lines[path[:cut]]
    return 1

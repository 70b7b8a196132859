"""Read the text table ``dcgmi diag -r N`` prints when ``-j`` was not given.

The table is read as a small state machine over its rows, because DCGM spreads one
test over several of them: a per-GPU result continues on rows with an empty first cell
(3.x: ``Pass - GPUs: 0, 2, 3`` then ``Fail - GPU: 1``; 4.x: ``GPU0: Pass`` under the
test), and ``Warning``/``Info``/``Error`` rows (wrapped mid-word over further rows)
belong to the test above them. Category separators are drawn with ``|`` (``|-----
Deployment  ---+---|``) or ``+`` (``+-----  Stress  ---+---+``) depending on version.

Fail closed: every line inside the table must be a row this module understands and
as wide as the border; the table must end with its closing border and nothing but
blank lines may follow; an ``Error:`` line from dcgmi anywhere is an error quoting it;
an ``Error`` row fails its test whatever its result cell says, and a ``Warning`` row
makes a passing test at best a warning.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from burnin.parsers import ParseError
from burnin.parsers.dcgm_report import DcgmReport, DcgmTest, TestResult, finish, status, worst

_COMMAND = re.compile(r"dcgmi\s+diag\b.*?(?:-r|--run)\s+(\d)\b")
_TOOL_ERROR = re.compile(r"^\s*Error:\s*\S")
_BORDER = re.compile(r"^\+[-+]+\+$")
_HEADER = re.compile(r"^\|\s*Diagnostic\s*\|\s*Result\s*\|$")
_RULE = re.compile(r"^\+[=+]+\+$")
_SECTION = re.compile(r"^[|+]-+\s+(?P<name>[A-Za-z][A-Za-z /]*?)\s+-+\+-*[|+]$")
_ROW = re.compile(r"^\|(?P<name>[^|]*)\|(?P<value>[^|]*)\|$")
_WORD = r"(?P<word>Pass|Fail|Skip|Warn|Not Run)"
_RESULT = re.compile(rf"^{_WORD}(?:\s+-\s+(?P<who>All|GPUs?:?\s*\d+(?:\s*,\s*\d+)*))?$")
_ENTITY = re.compile(rf"^GPU(?P<gpu>\d+):\s+{_WORD}$")
_DETAIL_ROWS = {"error", "warning", "info"}


def _cell(cell: str) -> str:
    # dcgmi pads each cell with one space before and two after the wrapped text; a
    # wrapped message continues mid-word on the next row, so the slice is exact.
    return cell[1:-2] if len(cell) >= 3 else cell.strip()


def _gpus(who: str | None, res: TestResult) -> dict[str, TestResult]:
    if not who or who == "All":
        return {}
    return {gpu: res for gpu in re.findall(r"\d+", who)}


@dataclass
class _Detail:
    kind: str  # error | warning | info
    parts: list[str]


@dataclass
class _Open:
    """The test whose rows are being read."""

    test: DcgmTest
    results: list[TestResult]
    details: list[_Detail] = field(default_factory=list)

    def close(self) -> DcgmTest:
        kinds = {d.kind for d in self.details}
        results = list(self.results)
        if "error" in kinds:
            results.append("fail")  # an Error row fails the test, whatever its cell says
        elif "warning" in kinds:
            results.append("warn")
        self.test.result = worst(results)
        texts = [" ".join("".join(d.parts).split()) for d in self.details if d.kind != "info"]
        texts += [" ".join("".join(d.parts).split()) for d in self.details if d.kind == "info"]
        self.test.details = "; ".join(t for t in texts if t)
        return self.test


class _Table:
    def __init__(self) -> None:
        self.category = ""
        self.meta: dict[str, str] = {}
        self.tests: list[DcgmTest] = []
        self.open: _Open | None = None

    def _close(self) -> None:
        if self.open is not None:
            self.tests.append(self.open.close())
            self.open = None

    def section(self, name: str) -> None:
        self._close()
        self.category = name

    def row(self, n: int, name_cell: str, value_cell: str) -> None:
        name, value = name_cell.strip(), value_cell.strip()
        if self.category.lower() == "metadata":
            if name:
                self.meta[name] = value
            elif self.meta:  # a wrapped metadata value
                last = next(reversed(self.meta))
                self.meta[last] = f"{self.meta[last]} {value}".strip()
            return
        if not self.category:
            raise ParseError(f"dcgmi table line {n}: row {name!r} before any category")
        if name.lower() in _DETAIL_ROWS:
            if self.open is None:
                # DCGM 2.x prints a bare Error row under a category that failed outright.
                self.open = _Open(DcgmTest(f"{self.category} ({name})", self.category, "fail"), ["fail"])
            self.open.details.append(_Detail(name.lower(), [_cell(value_cell)]))
            return
        if name:
            self._close()
            if not (m := _RESULT.match(value)):
                raise ParseError(f"dcgmi table line {n}: test {name!r} has an unreadable result {value!r}")
            res = status(m.group("word"))
            self.open = _Open(DcgmTest(name, self.category, res, _gpus(m.group("who"), res)), [res])
            return
        self._continuation(n, value, value_cell)

    def _continuation(self, n: int, value: str, value_cell: str) -> None:
        cur = self.open
        if cur is None:
            raise ParseError(f"dcgmi table line {n}: continuation row {value!r} under no test")
        if m := _ENTITY.match(value):  # 4.x: one row per GPU under the test (after its messages)
            res = status(m.group("word"))
            cur.test.gpus[m.group("gpu")] = res
            cur.results.append(res)
            return
        if not cur.details:
            m = _RESULT.match(value)
            if m and m.group("who") not in (None, "All"):  # 3.x: the results of other GPUs
                res = status(m.group("word"))
                cur.test.gpus.update(_gpus(m.group("who"), res))
                cur.results.append(res)
                return
            raise ParseError(f"dcgmi table line {n}: row {value!r} under test {cur.test.name!r} is not understood")
        cur.details[-1].parts.append(_cell(value_cell))

    def end(self) -> None:
        self._close()


def parse_text(text: str) -> DcgmReport:
    lines = text.splitlines()
    for line in lines:
        if _TOOL_ERROR.match(line):
            raise ParseError(f"dcgmi reported: {line.strip()[:300]}")
    command = _COMMAND.search(text)
    table = _Table()
    state = "before"  # before -> header -> body -> after
    width = 0
    for n, raw in enumerate(lines, 1):
        line = raw.rstrip()
        if state == "before":
            if _BORDER.match(line) or _HEADER.match(line):
                state, width = "header", len(line)
                if _HEADER.match(line):
                    state = "rule"
            continue
        if state == "after":
            if line.strip():
                raise ParseError(f"dcgmi output line {n}: text after the table's closing border: "
                                 f"{line.strip()[:120]!r}")
            continue
        if len(line) != width:
            raise ParseError(f"dcgmi table line {n}: a row of width {len(line)} in a table {width} wide "
                             f"(truncated or garbled): {line.strip()[:120]!r}")
        if state == "header":
            if not _HEADER.match(line):
                raise ParseError(f"dcgmi table line {n}: expected the 'Diagnostic | Result' header")
            state = "rule"
        elif state == "rule":
            if not _RULE.match(line):
                raise ParseError(f"dcgmi table line {n}: expected the '+====+' rule under the header")
            state = "body"
        elif m := _SECTION.match(line):
            table.section(m.group("name").strip())
        elif _BORDER.match(line):
            table.end()
            state = "after"
        elif m := _ROW.match(line):
            table.row(n, m.group("name"), m.group("value"))
        else:
            raise ParseError(f"dcgmi table line {n}: not a row of the results table: {line.strip()[:120]!r}")
    if state == "before":
        raise ParseError(f"no dcgmi diag table in output: {text.strip()[:200]!r}")
    if state != "after":
        raise ParseError("dcgmi table has no closing border: the output was cut off")
    return finish("text", int(command.group(1)) if command else None, table.tests,
                  table.meta.get("DCGM Version"), table.meta.get("Driver Version Detected"))

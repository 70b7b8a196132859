"""Parse ``dcgmi diag`` output: DCGM 3.x JSON, DCGM 4.x JSON, and the text table.

DCGM changed its JSON between 3.x (``"DCGM GPU Diagnostic" > test_categories``, one
result per GPU list, capitalised statuses) and 4.x (``"DCGM Diagnostic"``, results per
entity with ``entity_group``/``entity_id``, a ``metadata`` block; some builds hoist
``tests`` to the top level). Fleets run both, so both are read, and the text table is
the fallback when ``-j`` was not given. A status word this parser does not know is an
error, never a pass: a renamed "Pass" must not turn a fleet green.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Literal

from burnin.parsers import ParseError

TestResult = Literal["pass", "fail", "skip", "warn"]
Format = Literal["dcgm3-json", "dcgm4-json", "text"]

# DCGM's words (3.x capitalised, 4.x lowercase, text table) → ours.
_STATUS: dict[str, TestResult] = {
    "pass": "pass",
    "passed": "pass",
    "fail": "fail",
    "failed": "fail",
    "skip": "skip",
    "skipped": "skip",
    "not run": "skip",
    "warn": "warn",
    "warning": "warn",
}
# When a test has several results (one per GPU), the worst one is the test's result.
_SEVERITY: dict[TestResult, int] = {"pass": 0, "skip": 1, "warn": 2, "fail": 3}
# Which categories appear at which run level (dcgmi-diag reference: r1 deployment only,
# r2 adds integration/hardware, r3+ adds stress). Used only when the output does not say.
_LEVEL_BY_CATEGORY = {"stress": 3, "hardware": 2, "integration": 2, "deployment": 1}


@dataclass
class DcgmTest:
    name: str
    category: str
    result: TestResult
    gpus: dict[str, TestResult] = field(default_factory=dict)
    details: str = ""


@dataclass
class DcgmReport:
    format: Format
    level: int | None
    passed: bool
    tests: list[DcgmTest]
    failed_gpus: list[int]
    level_inferred: bool = False
    dcgm_version: str | None = None
    driver_version: str | None = None


def status(word: object) -> TestResult:
    if not isinstance(word, str) or word.strip().lower() not in _STATUS:
        raise ParseError(f"unknown DCGM test status {word!r}")
    return _STATUS[word.strip().lower()]


def _worst(results: list[TestResult]) -> TestResult:
    return max(results, key=lambda r: _SEVERITY[r])


def _finish(
    fmt: Format,
    level: int | None,
    tests: list[DcgmTest],
    dcgm_version: str | None,
    driver_version: str | None,
) -> DcgmReport:
    if not tests:
        raise ParseError("DCGM output holds no test results")
    inferred = False
    if level is None:
        levels = [_LEVEL_BY_CATEGORY.get(t.category.lower(), 0) for t in tests]
        level = max(levels) or None
        inferred = level is not None
    failed: set[int] = set()
    for t in tests:
        for gpu, res in t.gpus.items():
            if res == "fail" and gpu.isdigit():
                failed.add(int(gpu))
        if t.result == "fail" and not any(r == "fail" for r in t.gpus.values()):
            failed.update(int(g) for g in re.findall(r"\bGPU (\d+)\b", t.details))
    passed = all(t.result in ("pass", "skip") for t in tests) and any(
        t.result == "pass" for t in tests
    )
    return DcgmReport(
        format=fmt,
        level=level,
        passed=passed,
        tests=tests,
        failed_gpus=sorted(failed),
        level_inferred=inferred,
        dcgm_version=dcgm_version,
        driver_version=driver_version,
    )


# --------------------------------------------------------------------------- JSON


def _texts(value: object) -> list[str]:
    """``info``/``warnings`` arrive as a string, a list of strings, or a list of objects."""
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    out: list[str] = []
    if isinstance(value, list):
        for item in value:
            if isinstance(item, str):
                out.append(item)
            elif isinstance(item, dict):
                text = item.get("warning") or item.get("error") or item.get("info")
                if isinstance(text, str):
                    out.append(text)
    return out


def _json_test(raw: object, category: str) -> tuple[DcgmTest, bool]:
    """One test object; returns the test and whether its results were per entity (4.x)."""
    if not isinstance(raw, dict) or not isinstance(raw.get("name"), str):
        raise ParseError("a DCGM test entry has no name")
    results = raw.get("results")
    if not isinstance(results, list) or not results:
        raise ParseError(f"DCGM test {raw['name']!r} has no results")
    per_entity = False
    gpus: dict[str, TestResult] = {}
    overall: list[TestResult] = []
    warnings: list[str] = []
    info: list[str] = []
    for r in results:
        if not isinstance(r, dict):
            raise ParseError(f"DCGM test {raw['name']!r} has a malformed result")
        res = status(r.get("status"))
        overall.append(res)
        warnings += _texts(r.get("warnings"))
        info += _texts(r.get("info"))
        if "entity_id" in r:
            per_entity = True
            if r.get("entity_group", "GPU") == "GPU":
                gpus[str(r["entity_id"])] = res
        elif isinstance(r.get("gpu_ids"), str):
            for gpu in r["gpu_ids"].split(","):
                if gpu.strip():
                    gpus[gpu.strip()] = res
    summary = raw.get("test_summary")
    if isinstance(summary, dict) and "status" in summary:
        overall.append(status(summary["status"]))
        info += _texts(summary.get("info"))
    details = warnings + info  # what went wrong first, then DCGM's measurements
    return (
        DcgmTest(
            name=raw["name"],
            category=category,
            result=_worst(overall),
            gpus=gpus,
            details="; ".join(d.strip() for d in details if d.strip()),
        ),
        per_entity,
    )


def _find_version(doc: dict[str, Any], keys: tuple[str, ...]) -> str | None:
    for holder in (doc, doc.get("metadata"), doc.get("DCGM GPU Diagnostic")):
        if isinstance(holder, dict):
            for k in keys:
                if isinstance(holder.get(k), str):
                    return str(holder[k])
    return None


def parse_json(text: str) -> DcgmReport:
    start = text.find("{")
    if start < 0:
        raise ParseError(f"no JSON document in dcgmi output: {text.strip()[:200]!r}")
    try:
        doc = json.loads(text[start : text.rfind("}") + 1])
    except json.JSONDecodeError as exc:
        raise ParseError(f"dcgmi JSON is malformed or truncated: {exc}") from exc
    if not isinstance(doc, dict):
        raise ParseError("dcgmi JSON is not an object")
    tests: list[DcgmTest] = []
    any_entity = False
    body = doc.get("DCGM GPU Diagnostic", doc.get("DCGM Diagnostic"))
    if isinstance(body, dict) and isinstance(body.get("test_categories"), list):
        for cat in body["test_categories"]:
            if not isinstance(cat, dict) or not isinstance(cat.get("tests"), list):
                raise ParseError("a DCGM test category has no tests list")
            for raw in cat["tests"]:
                test, per_entity = _json_test(raw, str(cat.get("category", "")))
                tests.append(test)
                any_entity |= per_entity
        fmt: Format = "dcgm4-json" if "DCGM Diagnostic" in doc or any_entity else "dcgm3-json"
    elif isinstance(doc.get("tests"), list):
        for raw in doc["tests"]:
            category = raw.get("category", "") if isinstance(raw, dict) else ""
            tests.append(_json_test(raw, str(category))[0])
        fmt = "dcgm4-json"
    else:
        raise ParseError("dcgmi JSON has neither 'test_categories' nor top-level 'tests'")
    return _finish(
        fmt,
        None,
        tests,
        _find_version(doc, ("version", "DCGM Version")),
        _find_version(doc, ("driver_version", "Driver Version Detected", "driver_version_detected")),
    )


# --------------------------------------------------------------------------- text


_SECTION = re.compile(r"^\|-+\s+(?P<name>[A-Za-z][A-Za-z /]*?)\s+-+\+")
_ROW = re.compile(r"^\|(?P<name>[^|]*)\|(?P<value>[^|]*)\|\s*$")
_RESULT = re.compile(
    r"^(?P<word>Pass|Fail|Skip|Warn(?:ing)?|Not Run)\b(?:\s*-\s*(?P<who>.*))?$", re.IGNORECASE
)
_DETAIL_ROWS = {"error", "warning", "info"}


def _cell_text(cell: str) -> str:
    # dcgmi pads each cell with one space before and two after the wrapped text; a
    # wrapped message continues mid-word on the next row, so the slice is exact.
    return cell[1:-2] if len(cell) >= 3 else cell.strip()


def parse_text(text: str) -> DcgmReport:
    level_match = re.search(r"dcgmi\s+diag\b.*?(?:-r|--run)\s+(\d)", text)
    level = int(level_match.group(1)) if level_match else None
    category = ""
    meta: dict[str, str] = {}
    tests: list[DcgmTest] = []
    current: DcgmTest | None = None
    detail_parts: list[str] = []
    saw_table = False

    def flush() -> None:
        nonlocal detail_parts
        if current is not None and detail_parts:
            joined = " ".join(p.strip() for p in detail_parts if p.strip())
            current.details = (current.details + " " + joined).strip() if current.details else joined
        detail_parts = []

    for line in text.splitlines():
        line = line.rstrip()
        if m := _SECTION.match(line):
            flush()
            category, current = m.group("name").strip(), None
            saw_table = True
            continue
        m = _ROW.match(line)
        if not m:
            continue
        name, value = m.group("name").strip(), m.group("value")
        if not name:
            if current is not None and detail_parts:
                detail_parts[-1] += _cell_text(value)
            continue
        if name in ("Diagnostic",) or set(name) <= {"=", "-", "+"}:
            continue
        if category.lower() == "metadata":
            meta[name] = value.strip()
            continue
        if name.lower() in _DETAIL_ROWS:
            flush()
            detail_parts = [_cell_text(value)]
            continue
        flush()
        rm = _RESULT.match(value.strip())
        if not rm:
            raise ParseError(f"DCGM text row {name!r} has an unreadable result {value.strip()!r}")
        res = status(rm.group("word"))
        gpus: dict[str, TestResult] = {}
        who = rm.group("who") or ""
        if who and who.strip().lower() != "all":
            for gpu in re.findall(r"\d+", who):
                gpus[gpu] = res
        current = DcgmTest(name=name, category=category, result=res, gpus=gpus)
        tests.append(current)
    flush()
    if not saw_table:
        raise ParseError(f"no dcgmi diag table in output: {text.strip()[:200]!r}")
    return _finish(
        "text", level, tests, meta.get("DCGM Version"), meta.get("Driver Version Detected")
    )


def parse(text: str) -> DcgmReport:
    """Read ``dcgmi diag`` output in whichever of the three shapes it came."""
    stripped = text.lstrip()
    if "{" in text and ("Diagnostic" in text or '"tests"' in text) and "+====" not in text:
        return parse_json(text)
    if stripped.startswith("{"):
        return parse_json(text)
    return parse_text(text)

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
from typing import Any

from burnin.parsers import ParseError
from burnin.parsers.dcgm_report import DcgmReport, DcgmTest, Format, TestResult, finish, status, worst
from burnin.parsers.dcgm_text import parse_text

__all__ = ["DcgmReport", "DcgmTest", "Format", "TestResult", "parse", "parse_json", "parse_text", "status"]


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
        if _texts(r.get("errors")):
            res = "fail"  # an error recorded under a test fails it, whatever its status says
        elif res == "pass" and _texts(r.get("warnings")):
            res = "warn"  # DCGM warns only when something is wrong: a warned pass is not clean
        overall.append(res)
        warnings += _texts(r.get("errors"))
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
            result=worst(overall),
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
        doc, end = json.JSONDecoder().raw_decode(text, start)
    except json.JSONDecodeError as exc:
        raise ParseError(f"dcgmi JSON is malformed or truncated: {exc}") from exc
    if text[end:].strip():
        raise ParseError(f"text after the dcgmi JSON document: {text[end:].strip()[:120]!r}")
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
    return finish(
        fmt,
        None,
        tests,
        _find_version(doc, ("version", "DCGM Version")),
        _find_version(doc, ("driver_version", "Driver Version Detected", "driver_version_detected")),
    )


def parse(text: str) -> DcgmReport:
    """Read ``dcgmi diag`` output in whichever of the three shapes it came."""
    for line in text.splitlines():
        if re.match(r"^\s*Error:\s*\S", line):  # dcgmi's own failure, however much it printed first
            raise ParseError(f"dcgmi reported: {line.strip()[:300]}")
    stripped = text.lstrip()
    if "{" in text and ("Diagnostic" in text or '"tests"' in text) and "+====" not in text:
        return parse_json(text)
    if stripped.startswith("{"):
        return parse_json(text)
    return parse_text(text)

"""The burn-in result document (``result.json``): the one contract between node and controller.

``acceptance`` fans ``burnin run`` out to nodes and judges what comes back, possibly
against another profile than the node used, so the document keeps both the verdicts
reached on the node *and* the parsed measurements they were reached from
(``data``), plus enough provenance (tool, version, argv, times, raw output path) to
stand as evidence. Plain dataclasses and the standard library only: this module is
imported on nodes that have nothing but Python.

Verdicts are ``pass``, ``fail`` (measured, and wrong) and ``error`` (could not
measure: tool missing, output malformed, timed out). An ``error`` is never a pass.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

SCHEMA = "racklife.burnin.result"
BURNIN_VERSION = "0.1.0"
SCHEMA_VERSION = 1

Verdict = Literal["pass", "fail", "error"]
VERDICTS: tuple[Verdict, ...] = ("pass", "fail", "error")

JsonValue = Any  # what json.loads returns; narrowed where it is read


class ResultFormatError(ValueError):
    """A result document that is not one this version can read."""


@dataclass(frozen=True)
class Finding:
    """One judged quantity: what was measured, what the profile asked for, and the verdict."""

    name: str
    verdict: Verdict
    measured: JsonValue = None
    threshold: JsonValue = None
    reason: str = ""


@dataclass
class CheckResult:
    """One check as run on the node: provenance, parsed data, and its findings."""

    name: str
    kind: str
    verdict: Verdict
    reason: str = ""
    tool: str | None = None
    tool_version: str | None = None
    tool_version_note: str | None = None  # why there is no version ("`dcgmi --version` exited 2: Usage: …")
    argv: list[str] = field(default_factory=list)
    started_at: str | None = None
    ended_at: str | None = None
    exit_code: int | None = None
    raw_output: str | None = None  # path relative to the result directory
    measured: dict[str, JsonValue] = field(default_factory=dict)
    data: JsonValue = None  # the parsed tool output; what ``judge`` re-reads
    findings: list[Finding] = field(default_factory=list)
    options: dict[str, JsonValue] = field(default_factory=dict)


@dataclass
class RunResult:
    """The whole burn-in run of one node."""

    profile: str
    level: str
    host: str
    started_at: str
    ended_at: str
    verdict: Verdict
    checks: list[CheckResult]
    burnin_version: str
    # What the controller asked for, written back by the node: the judge checks them against the
    # request, so that a result from another node or another run cannot stand for this one.
    run_id: str | None = None
    node: str | None = None
    serial: str | None = None  # the system serial the node read of itself (DMI), when it could
    schema: str = SCHEMA
    schema_version: int = SCHEMA_VERSION

    def to_json(self) -> str:
        doc = asdict(self)
        head = {"schema": doc.pop("schema"), "schema_version": doc.pop("schema_version")}
        return json.dumps({**head, **doc}, indent=2, sort_keys=False) + "\n"

    def write(self, path: Path) -> None:
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(self.to_json(), encoding="utf-8")
        tmp.replace(path)


def worst(verdicts: list[Verdict]) -> Verdict:
    """Combine verdicts: any fail is a fail, else any error is an error; nothing is not a pass."""
    if not verdicts:
        return "error"
    if "fail" in verdicts:
        return "fail"
    if "error" in verdicts:
        return "error"
    return "pass"


def _verdict(value: object, where: str) -> Verdict:
    if value not in VERDICTS:
        raise ResultFormatError(f"{where}: verdict {value!r} is not one of {VERDICTS}")
    return value  # narrowed to Verdict by the membership test above


def _str_or_none(value: object, where: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise ResultFormatError(f"{where}: expected a string, got {type(value).__name__}")


def _finding_from(d: object, where: str) -> Finding:
    if not isinstance(d, dict) or not isinstance(d.get("name"), str):
        raise ResultFormatError(f"{where}: a finding must be an object with a name")
    return Finding(
        name=d["name"],
        verdict=_verdict(d.get("verdict"), where),
        measured=d.get("measured"),
        threshold=d.get("threshold"),
        reason=str(d.get("reason", "")),
    )


def _check_from(d: object, where: str) -> CheckResult:
    if not isinstance(d, dict):
        raise ResultFormatError(f"{where}: a check must be an object")
    name, kind = d.get("name"), d.get("kind")
    if not isinstance(name, str) or not isinstance(kind, str):
        raise ResultFormatError(f"{where}: a check needs string 'name' and 'kind'")
    argv = d.get("argv", [])
    if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
        raise ResultFormatError(f"{where}: argv must be a list of strings")
    exit_code = d.get("exit_code")
    if exit_code is not None and not isinstance(exit_code, int):
        raise ResultFormatError(f"{where}: exit_code must be an integer")
    measured = d.get("measured", {})
    options = d.get("options", {})
    findings = d.get("findings", [])
    if not isinstance(measured, dict) or not isinstance(options, dict):
        raise ResultFormatError(f"{where}: measured and options must be objects")
    if not isinstance(findings, list):
        raise ResultFormatError(f"{where}: findings must be a list")
    return CheckResult(
        name=name,
        kind=kind,
        verdict=_verdict(d.get("verdict"), where),
        reason=str(d.get("reason", "")),
        tool=_str_or_none(d.get("tool"), where),
        tool_version=_str_or_none(d.get("tool_version"), where),
        tool_version_note=_str_or_none(d.get("tool_version_note"), where),
        argv=list(argv),
        started_at=_str_or_none(d.get("started_at"), where),
        ended_at=_str_or_none(d.get("ended_at"), where),
        exit_code=exit_code,
        raw_output=_str_or_none(d.get("raw_output"), where),
        measured=measured,
        data=d.get("data"),
        findings=[_finding_from(f, f"{where}.findings[{i}]") for i, f in enumerate(findings)],
        options=options,
    )


def load_result(text: str) -> RunResult:
    """Read a ``result.json``; anything that is not a schema-1 document raises ResultFormatError."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ResultFormatError(f"not JSON: {exc}") from exc
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise ResultFormatError(f"not a burn-in result (schema is not {SCHEMA!r})")
    if doc.get("schema_version") != SCHEMA_VERSION:
        raise ResultFormatError(
            f"schema_version {doc.get('schema_version')!r} is not {SCHEMA_VERSION}"
        )
    checks = doc.get("checks")
    if not isinstance(checks, list):
        raise ResultFormatError("'checks' must be a list")
    def field_(key: str) -> str:
        value = doc.get(key)
        if not isinstance(value, str):
            raise ResultFormatError(f"{key!r} must be a string")
        return value

    return RunResult(
        profile=field_("profile"),
        level=field_("level"),
        host=field_("host"),
        started_at=field_("started_at"),
        ended_at=field_("ended_at"),
        verdict=_verdict(doc.get("verdict"), "result"),
        checks=[_check_from(c, f"checks[{i}]") for i, c in enumerate(checks)],
        burnin_version=field_("burnin_version"),
        run_id=_str_or_none(doc.get("run_id"), "run_id"),
        node=_str_or_none(doc.get("node"), "node"),
        serial=_str_or_none(doc.get("serial"), "serial"),
    )

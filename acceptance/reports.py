"""Acceptance reports for three readers: machines (JSON), CI systems (JUnit XML), people (HTML).

All three are rendered from the same judgement, so they cannot disagree. The JUnit XML
follows the Ant/Jenkins schema (one ``testsuite`` per node, one ``testcase`` per node and
check, ``failure`` for a measured miss, ``error`` for what could not be measured) so any
CI shows a rack like a test run. The HTML page (``acceptance.report_html``) is one
self-contained file — styles and SVG plots inline, no scripts, no external assets — that
opens from an archived bundle years later, offline.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from acceptance import words
from acceptance.evidence import BundleMeta, tool_versions
from acceptance.isolation import Isolation
from acceptance.judge import NodeFinding, NodeInput, RackJudgement, Waiver
from acceptance.report_html import to_html
from burnin.result import CheckResult

REPORT_SCHEMA = "racklife.acceptance.report"


@dataclass(frozen=True)
class ReportInput:
    judgement: RackJudgement
    inputs: Sequence[NodeInput]
    meta: BundleMeta
    isolation: Isolation | None = None
    evidence_digest: str | None = None
    waivers: Sequence[Waiver] = ()  # what the operator waived for this run (each node lists those it used)
    multi_node: MultiNodeStage | None = None  # why nodes were left out of the multi-node runs, or the stage stopped
    evidence_dir: str | None = None  # the evidence bundle's directory (the HTML page links to it)


@dataclass(frozen=True)
class MultiNodeStage:
    """What the multi-node stage said beside its runs: the nodes it left out and why, or why it stopped."""

    left_out: Mapping[str, str] = field(default_factory=dict)
    error: str | None = None


# ------------------------------------------------------------------ JSON


def to_json(r: ReportInput) -> str:
    j = r.judgement
    by_input = {i.node: i for i in r.inputs}
    doc: dict[str, Any] = {
        "schema": REPORT_SCHEMA,
        "schema_version": 1,
        "rack": r.meta.rack,
        "operator": r.meta.operator,
        "policy": r.meta.policy,
        "level": r.meta.level,
        "started_at": r.meta.started_at,
        "ended_at": r.meta.ended_at,
        "racklife_version": r.meta.racklife_version,
        "image": r.meta.image,
        "evidence_sha256": r.evidence_digest,
        "waivers": [asdict(w) | {"nodes": [n.node for n in j.nodes if w in n.waivers]} for w in r.waivers],
        "summary": {"nodes": len(j.nodes), "passed": len(j.passed), "not_passed": len(j.not_passed),
                    "waived": len([n for n in j.nodes if n.waivers])},
        "nodes": [
            {"node": n.node, "position": by_input[n.node].position if n.node in by_input else None,
             "profile": n.profile, "verdict": n.verdict, "reasons": n.reasons(),
             "waivers": [asdict(w) for w in n.waivers],
             "tool_versions": tool_versions(by_input[n.node]) if n.node in by_input else {},
             "findings": [asdict(f) for f in n.findings]}
            for n in j.nodes
        ],
        "fleet": [asdict(s) for s in j.fleet],
        "outlier_policy": asdict(j.policy),
        "multi_node": [{"nodes": list(g.run.nodes), "kind": g.run.kind, "verdict": g.verdict,
                        "launcher": g.run.launcher, "job_id": g.run.job_id, "finding": asdict(g.finding)}
                       for g in j.groups],
        "isolation": _isolation_doc(r.isolation),
        "multi_node_left_out": dict(r.multi_node.left_out) if r.multi_node else {},
        "multi_node_error": r.multi_node.error if r.multi_node else None,
        "evidence_dir": r.evidence_dir,
    }
    return json.dumps(doc, indent=2, default=str) + "\n"


def _isolation_doc(iso: Isolation | None) -> dict[str, Any] | None:
    return None if iso is None else iso.to_dict()


# ------------------------------------------------------------------ JUnit XML


def _junit_time(ts: str) -> str:
    """The schema's timestamp: ISO 8601 without a zone (stated in UTC)."""
    return datetime.fromisoformat(ts.replace("Z", "+00:00")).strftime("%Y-%m-%dT%H:%M:%S")


def _seconds(a: str | None, b: str | None) -> float:
    if not a or not b:
        return 0.0
    try:
        delta = datetime.fromisoformat(b.replace("Z", "+00:00")) - datetime.fromisoformat(a.replace("Z", "+00:00"))
    except ValueError:
        return 0.0
    return max(0.0, delta.total_seconds())


def _check_of(finding: NodeFinding, inp: NodeInput | None) -> CheckResult | None:
    if inp is None or inp.result is None:
        return None
    matches = [c for c in inp.result.checks if finding.check == c.name or finding.check.startswith(c.name + ".")
               or finding.check.startswith(c.kind + ".")]
    return matches[0] if matches else None


def to_junit(r: ReportInput) -> str:
    root = ET.Element("testsuites")
    by_input = {i.node: i for i in r.inputs}
    stamp = _junit_time(r.meta.ended_at)
    for idx, n in enumerate(r.judgement.nodes):
        inp = by_input.get(n.node)
        cases = n.findings
        suite = ET.SubElement(root, "testsuite", {
            "name": n.node, "package": r.meta.rack, "id": str(idx), "timestamp": stamp, "hostname": n.node,
            "tests": str(len(cases)),
            "failures": str(sum(f.verdict == "fail" for f in cases)),
            "errors": str(sum(f.verdict == "error" for f in cases)),
            "skipped": str(sum(f.source == "waiver" for f in cases)),
            "time": "0",
        })
        props = ET.SubElement(suite, "properties")
        for key, value in (("profile", n.profile), ("level", n.level or ""), ("rack", r.meta.rack),
                           ("operator", r.meta.operator), ("image", r.meta.image or ""),
                           ("verdict", n.verdict)):
            ET.SubElement(props, "property", {"name": key, "value": value})
        for w in n.waivers:
            ET.SubElement(props, "property", {"name": f"waiver.{w.check}", "value": words.waiver(w)})
        total = 0.0
        for f in cases:
            check = _check_of(f, inp)
            t = _seconds(check.started_at, check.ended_at) if check else 0.0
            total += t
            case = ET.SubElement(suite, "testcase", {
                "name": f.check, "classname": f"{r.meta.rack}.{n.node}", "time": f"{t:.3f}"})
            if f.source == "waiver":  # not run, by an operator's decision: a skipped test, not a pass
                ET.SubElement(case, "skipped", {"message": f.reason})
            elif f.verdict != "pass":
                body = json.dumps({"metric": f.metric, "measured": f.measured, "threshold": f.threshold,
                                   "source": f.source}, default=str)
                tag = "failure" if f.verdict == "fail" else "error"
                el = ET.SubElement(case, tag, {"message": f.reason, "type": f"{f.source}.{f.verdict}"})
                el.text = body
        suite.set("time", f"{total:.3f}")
        ET.SubElement(suite, "system-out").text = "\n".join(n.reasons())
        ET.SubElement(suite, "system-err").text = (inp.error or "") if inp else ""
    if r.judgement.groups:
        _junit_groups(root, r, stamp, len(r.judgement.nodes))
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def _junit_groups(root: ET.Element, r: ReportInput, stamp: str, idx: int) -> None:
    """The multi-node runs as one more suite: one test case per run."""
    groups = r.judgement.groups
    suite = ET.SubElement(root, "testsuite", {
        "name": "multi_node", "package": r.meta.rack, "id": str(idx), "timestamp": stamp,
        "hostname": "controller", "tests": str(len(groups)),
        "failures": str(sum(g.verdict == "fail" for g in groups)),
        "errors": str(sum(g.verdict == "error" for g in groups)), "time": "0"})
    ET.SubElement(suite, "properties")
    for g in groups:
        case = ET.SubElement(suite, "testcase", {"name": f"{g.run.kind}:{'+'.join(g.run.nodes)}",
                                                 "classname": f"{r.meta.rack}.multi_node", "time": "0"})
        if g.verdict != "pass":
            el = ET.SubElement(case, "failure" if g.verdict == "fail" else "error",
                               {"message": g.finding.reason, "type": f"multi_node.{g.verdict}"})
            el.text = json.dumps({"measured": g.finding.measured, "threshold": g.finding.threshold}, default=str)
    ET.SubElement(suite, "system-out").text = ""
    ET.SubElement(suite, "system-err").text = ""


def write_reports(out_dir: Path, r: ReportInput) -> dict[str, Path]:
    """Write ``report.json``, ``junit.xml`` and ``report.html`` into ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"json": out_dir / "report.json", "junit": out_dir / "junit.xml", "html": out_dir / "report.html"}
    paths["json"].write_text(to_json(r), encoding="utf-8")
    paths["junit"].write_text(to_junit(r), encoding="utf-8")
    paths["html"].write_text(to_html(r, out_dir), encoding="utf-8")
    return paths

"""Acceptance reports for three readers: machines (JSON), CI systems (JUnit XML), people (HTML).

All three are rendered from the same judgement, so they cannot disagree. The JUnit XML
follows the Ant/Jenkins schema (one ``testsuite`` per node, one ``testcase`` per node and
check, ``failure`` for a measured miss, ``error`` for what could not be measured) so any
CI shows a rack like a test run. The HTML page is one self-contained file — styles and
SVG plots inline, no scripts, no external assets — that opens from an archived bundle
years later, offline.
"""

from __future__ import annotations

import html
import json
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from acceptance import plots
from acceptance.evidence import BundleMeta, tool_versions
from acceptance.isolation import Isolation
from acceptance.judge import NodeFinding, NodeInput, NodeJudgement, RackJudgement, Waiver
from burnin.parsers.nccl import NcclReport
from burnin.result import CheckResult, ResultFormatError
from burnin.serde import from_dict

REPORT_SCHEMA = "racklife.acceptance.report"


@dataclass(frozen=True)
class ReportInput:
    judgement: RackJudgement
    inputs: Sequence[NodeInput]
    meta: BundleMeta
    isolation: Isolation | None = None
    evidence_digest: str | None = None
    waivers: Sequence[Waiver] = ()  # what the operator waived for this run (each node lists those it used)


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
            ET.SubElement(props, "property", {"name": f"waiver.{w.check}", "value": _waiver_text(w)})
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


def _waiver_text(w: Waiver) -> str:
    return f"{w.check} waived by {w.by} at {w.at}: {w.reason}"


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


# ------------------------------------------------------------------ HTML

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px;color:#212121;max-width:1100px}
h1{font-size:22px;margin:0 0 4px} h2{font-size:17px;margin-top:28px;border-bottom:1px solid #ddd}
.meta{color:#555;font-size:13px} .counts{font-size:18px;margin:12px 0}
.counts span{display:inline-block;padding:4px 12px;border-radius:4px;margin-right:8px;color:#fff}
.c-pass{background:#2e7d32} .c-fail{background:#c62828} .c-total{background:#455a64}
.rack{display:grid;grid-template-columns:60px 320px;gap:3px;margin:10px 0}
.u{font-size:12px;color:#555;text-align:right;padding:6px 8px}
.cell{padding:6px 10px;border-radius:3px;color:#fff;font-size:13px;font-weight:600}
.v-pass{background:#2e7d32} .v-fail{background:#c62828} .v-error{background:#ef6c00}
table{border-collapse:collapse;font-size:12px;width:100%} td,th{border:1px solid #ddd;padding:3px 6px;
vertical-align:top;text-align:left} th{background:#f5f5f5}
tr.f-fail td:nth-child(2){color:#c62828;font-weight:700} tr.f-error td:nth-child(2){color:#ef6c00;font-weight:700}
.waiver{color:#6a1b9a;font-weight:700}
details{margin:6px 0} summary{cursor:pointer;font-weight:600} code{font-size:11px;word-break:break-all}
"""


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _val(value: Any, limit: int = 160) -> str:
    text = json.dumps(value, default=str) if not isinstance(value, str) else value
    return _e(text if len(text) <= limit else text[: limit - 3] + "...")


def _curve(check: CheckResult | None) -> list[tuple[int, float]]:
    if check is None or check.data is None:
        return []
    try:
        report = from_dict(NcclReport, check.data)
    except ResultFormatError:
        return []
    return [(row.size_bytes, max(row.busbw_oop, row.busbw_ip)) for row in report.rows]


def _node_section(n: NodeJudgement, inp: NodeInput | None) -> str:
    rows = "".join(
        f'<tr class="f-{_e(f.verdict)}"><td>{_e(f.check)}</td><td>{_e(f.verdict)}</td><td>{_e(f.source)}</td>'
        f"<td><code>{_val(f.measured)}</code></td><td><code>{_val(f.threshold)}</code></td>"
        f"<td>{_e(f.reason)}</td></tr>"
        for f in sorted(n.findings, key=lambda f: (f.verdict == "pass", f.check)))
    versions = ", ".join(f"{k} {v}" for k, v in tool_versions(inp).items()) if inp else ""
    opened = " open" if not n.passed or n.waivers else ""
    waived = "".join(f'<p class="waiver">WAIVED: {_e(_waiver_text(w))}</p>' for w in n.waivers)
    return (f'<details class="node" data-node="{_e(n.node)}" data-verdict="{_e(n.verdict)}"{opened}>'
            f'<summary>{_e(n.node)} — {_e(n.verdict)} ({_e(n.profile)})</summary>'
            f'<p class="meta">tools: {_e(versions) or "none reported"}'
            f'{"; " + _e(inp.error) if inp and inp.error else ""}</p>{waived}'
            f"<table><tr><th>check</th><th>verdict</th><th>source</th><th>measured</th><th>threshold</th>"
            f"<th>why</th></tr>{rows}</table></details>")


def to_html(r: ReportInput) -> str:
    j = r.judgement
    by_input = {i.node: i for i in r.inputs}
    passed, not_passed = len(j.passed), len(j.not_passed)
    placed = sorted(j.nodes, key=lambda n: -(by_input[n.node].position or 0) if n.node in by_input else 0)
    grid = "".join(
        f'<div class="u">U{_e(by_input[n.node].position if n.node in by_input else "?")}</div>'
        f'<div class="cell v-{_e(n.verdict)}" data-node="{_e(n.node)}" data-verdict="{_e(n.verdict)}">'
        f"{_e(n.node)} · {_e(n.verdict)}</div>" for n in placed)
    curves: dict[str, list[tuple[int, float]]] = {}
    for n in j.nodes:
        inp = by_input.get(n.node)
        checks = [c for c in (inp.result.checks if inp and inp.result else [])
                  if c.kind == "nccl" and c.options.get("collective", "all_reduce") == "all_reduce"]
        curves[n.node] = _curve(checks[0] if checks else None)
    failing = {n.node for n in j.nodes if not n.passed}
    floor = next((f.threshold for n in j.nodes for f in n.findings
                  if f.check.startswith("nccl.all_reduce.single_node") and isinstance(f.threshold, int | float)), None)
    node_plot = plots.busbw_curves(curves, failing, "single-node all_reduce: busbw vs message size", floor)
    group_plot = ""
    if j.groups:
        gcurves = {"+".join(g.run.nodes): [(row.size_bytes, max(row.busbw_oop, row.busbw_ip)) for row in
                                           (g.run.report.rows if g.run.report else [])] for g in j.groups}
        gfail = {"+".join(g.run.nodes) for g in j.groups if g.verdict != "pass"}
        gfloor = next((g.finding.threshold for g in j.groups if isinstance(g.finding.threshold, int | float)), None)
        group_plot = ("<h2>Multi-node all_reduce</h2>"
                      + plots.busbw_curves(gcurves, gfail, "multi-node all_reduce: busbw vs message size", gfloor))
    flagged: dict[str, set[str]] = {}
    for n in j.nodes:
        for f in n.findings:
            if f.source == "fleet" and f.verdict == "fail":
                flagged.setdefault(f.metric, set()).add(n.node)
    fleet_plot = plots.fleet_distribution(j.fleet, flagged, j.policy)
    iso = ""
    if r.isolation is not None:
        i = r.isolation
        iso = (f"<h2>Isolation</h2><p>{i.n_rounds} rounds, {i.n_tests} runs. Bad nodes: "
               f"{_e(', '.join(sorted(i.bad_nodes)) or 'none')}; bad links: "
               f"{_e(', '.join('-'.join(x) for x in sorted(i.bad_links)) or 'none')}; unresolved: "
               f"{_e(', '.join(sorted(i.unresolved)) or 'none')}.</p>")
    details = "".join(_node_section(n, by_input.get(n.node)) for n in j.nodes)
    waivers = ""
    if r.waivers:
        items = "".join(f'<li data-waiver="{_e(w.check)}">{_e(_waiver_text(w))} — applied to '
                        f'{_e(", ".join(n.node for n in j.nodes if w in n.waivers) or "no node")}</li>'
                        for w in r.waivers)
        waivers = f'<h2>Waivers</h2><ul id="waivers">{items}</ul>'
    m = r.meta
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Acceptance {_e(m.rack)}</title>
<style>{_CSS}</style></head><body>
<h1>Rack acceptance: {_e(m.rack)}</h1>
<p class="meta">level {_e(m.level)} · operator {_e(m.operator)} · policy {_e(m.policy)} ·
{_e(m.started_at)} → {_e(m.ended_at)} · racklife {_e(m.racklife_version)} · image {_e(m.image or "-")}
{" · evidence sha256 <code>" + _e(r.evidence_digest) + "</code>" if r.evidence_digest else ""}</p>
<p class="counts"><span class="c-total">nodes <b id="count-total">{len(j.nodes)}</b></span>
<span class="c-pass">passed <b id="count-pass">{passed}</b></span>
<span class="c-fail">not passed <b id="count-fail">{not_passed}</b></span></p>
{waivers}
<h2>Rack overview</h2><div class="rack" id="rack-grid">{grid}</div>
<h2>busbw vs message size</h2>{node_plot}
{group_plot}
<h2>Fleet distribution</h2>{fleet_plot}
{iso}
<h2>Nodes</h2>{details}
</body></html>
"""


def write_reports(out_dir: Path, r: ReportInput) -> dict[str, Path]:
    """Write ``report.json``, ``junit.xml`` and ``report.html`` into ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"json": out_dir / "report.json", "junit": out_dir / "junit.xml", "html": out_dir / "report.html"}
    paths["json"].write_text(to_json(r), encoding="utf-8")
    paths["junit"].write_text(to_junit(r), encoding="utf-8")
    paths["html"].write_text(to_html(r), encoding="utf-8")
    return paths

"""The acceptance report for people: one self-contained HTML page (styles and SVG inline, no scripts).

What it says, section by section (each has an ``id`` a test checks in Chromium):

* ``links``: the JSON report, the JUnit XML and the evidence bundle, relative to
  the page, so an archived report directory still links to its evidence;
* ``rack-grid``: the rack, each node's verdict in its U;
* the single-node busbw curves, a node red only when its all_reduce check failed
  (a node that failed for its InfiniBand ports is in its own table, not red here);
* ``multi-node``: each pair, ring or block that ran (busbw, threshold, verdict,
  the Slurm job), the isolation rounds that found a bad node or link, and the
  nodes left out with why; when nothing ran, the reason it was skipped;
* per node: tool versions (or "unknown" with the reason), and each finding's
  measured value and threshold in words (``acceptance.words``), never raw JSON.
"""

from __future__ import annotations

import html
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from acceptance import plots, words
from acceptance.evidence import MANIFEST
from acceptance.judge import NodeInput, NodeJudgement, RackJudgement
from burnin.parsers.nccl import NcclReport
from burnin.result import CheckResult, ResultFormatError
from burnin.serde import from_dict

if TYPE_CHECKING:
    from acceptance.isolation import Isolation
    from acceptance.reports import MultiNodeStage, ReportInput

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px;color:#212121;max-width:1100px}
h1{font-size:22px;margin:0 0 4px} h2{font-size:17px;margin-top:28px;border-bottom:1px solid #ddd}
h3{font-size:14px;margin:16px 0 4px}
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
.waiver{color:#6a1b9a;font-weight:700} .skipped{color:#6d4c41;font-weight:600}
.links a{margin-right:14px} .unknown{color:#ef6c00}
details{margin:6px 0} summary{cursor:pointer;font-weight:600} code{font-size:11px;word-break:break-all}
"""


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _curve(check: CheckResult | None) -> list[tuple[int, float]]:
    if check is None or check.data is None:
        return []
    try:
        report = from_dict(NcclReport, check.data)
    except ResultFormatError:
        return []
    return [(row.size_bytes, max(row.busbw_oop, row.busbw_ip)) for row in report.rows]


def tools(inp: NodeInput | None) -> list[tuple[str, str | None, str]]:
    """(tool, version, why unknown) for each tool the node's burn-in ran, burnin itself first."""
    if inp is None or inp.result is None:
        return []
    out: dict[str, tuple[str, str | None, str]] = {"burnin": ("burnin", inp.result.burnin_version, "")}
    for c in inp.result.checks:
        if c.tool and (c.tool not in out or (out[c.tool][1] is None and c.tool_version)):
            out[c.tool] = (c.tool, c.tool_version,
                           c.tool_version_note or "the node did not record how its version was asked")
    return list(out.values())


def _tools_line(inp: NodeInput | None) -> str:
    shown = []
    for tool, version, why in tools(inp):
        if version:
            said = version if version.lower().startswith(tool.lower()) else f"{tool} {version}"
            shown.append(f'<span data-tool="{_e(tool)}">{_e(said)}</span>')
        else:
            shown.append(f'<span class="unknown" data-tool="{_e(tool)}">{_e(tool)} unknown ({_e(why)})</span>')
    return ", ".join(shown) or "none reported"


def _node_section(n: NodeJudgement, inp: NodeInput | None) -> str:
    rows = "".join(
        f'<tr class="f-{_e(f.verdict)}"><td>{_e(f.check)}</td><td>{_e(f.verdict)}</td><td>{_e(f.source)}</td>'
        f'<td class="measured">{_e(words.value(f.measured))}</td>'
        f'<td class="threshold">{_e(words.value(f.threshold))}</td><td class="why">{_e(f.reason)}</td></tr>'
        for f in sorted(n.findings, key=lambda f: (f.verdict == "pass", f.check)))
    opened = " open" if not n.passed or n.waivers else ""
    waived = "".join(f'<p class="waiver">WAIVED: {_e(words.waiver(w))}</p>' for w in n.waivers)
    return (f'<details class="node" data-node="{_e(n.node)}" data-verdict="{_e(n.verdict)}"{opened}>'
            f'<summary>{_e(n.node)} — {_e(n.verdict)} ({_e(n.profile)})</summary>'
            f'<p class="meta tools">tools: {_tools_line(inp)}'
            f'{"; " + _e(inp.error) if inp and inp.error else ""}</p>{waived}'
            f"<table><tr><th>check</th><th>verdict</th><th>source</th><th>measured</th><th>threshold</th>"
            f"<th>why</th></tr>{rows}</table></details>")


def _busbw_failed(n: NodeJudgement) -> bool:
    """Whether the node's own all_reduce busbw failed (the chart's red), not some other check."""
    return any(f.verdict != "pass" and (f.check.startswith("nccl.") or f.check.startswith("fleet.nccl."))
               for f in n.findings)


def _links(r: ReportInput, here: Path | None) -> str:
    items = ['<a id="link-json" href="report.json">report.json</a>',
             '<a id="link-junit" href="junit.xml">JUnit XML</a>']
    if r.evidence_dir:
        target = Path(r.evidence_dir)
        href = os.path.relpath(target, here) if here is not None else target.resolve().as_uri()
        href = href.replace(os.sep, "/")
        base = href.rstrip("/")
        items.append(f'<a id="link-evidence" href="{_e(base)}/{MANIFEST}">evidence bundle</a>'
                     f' (<a href="{_e(base)}/">{_e(target.name)}/</a>)')
    else:
        items.append('<span id="link-evidence">evidence bundle: none written with this report</span>')
    return f'<p class="links" id="links">{"".join(items)}</p>'


def _skip_reasons(stage: MultiNodeStage | None) -> str:
    if stage is None:
        return "<p class=\"skipped\">no multi-node stage was recorded with this report</p>"
    by_reason: dict[str, list[str]] = {}
    for node, why in sorted(stage.left_out.items()):
        by_reason.setdefault(why, []).append(node)
    items = "".join(f'<li data-left-out="{_e(",".join(ns))}">{_e(", ".join(ns))}: {_e(why)}</li>'
                    for why, ns in by_reason.items())
    error = f'<p class="skipped">the stage stopped: {_e(stage.error)}</p>' if stage.error else ""
    return error + (f'<ul class="left-out">{items}</ul>' if items else "")


def _isolation(i: Isolation) -> str:
    rounds = "".join(
        f'<tr data-round="{r.number}"><td>{r.number}</td><td>'
        + ", ".join(f'{_e("+".join(g))} {"slow" if slow else "ok"}' for g, slow in zip(r.groups, r.slow, strict=True))
        + "</td></tr>" for r in i.rounds)
    reasons = "".join(f"<li>{_e(n)}: {_e(why)}</li>" for n, why in sorted(i.reasons.items()))
    return (f'<div id="isolation"><h3>Isolation: {i.n_rounds} round(s), {i.n_tests} run(s)</h3>'
            f"<p>bad nodes: {_e(', '.join(sorted(i.bad_nodes)) or 'none')}; bad links: "
            f"{_e(', '.join('-'.join(x) for x in sorted(i.bad_links)) or 'none')}; unresolved: "
            f"{_e(', '.join(sorted(i.unresolved)) or 'none')}</p>"
            f"{'<ul>' + reasons + '</ul>' if reasons else ''}"
            f"<table><tr><th>round</th><th>runs (nodes: result)</th></tr>{rounds}</table></div>")


def _multi_node(r: ReportInput) -> str:
    j = r.judgement
    head = '<section id="multi-node"><h2>Multi-node all_reduce</h2>'
    if not j.groups:
        return (head + '<p class="skipped" id="multi-node-skipped">multi-node all_reduce did not run:</p>'
                + _skip_reasons(r.multi_node)
                + (_isolation(r.isolation) if r.isolation is not None else "") + "</section>")
    rows = "".join(
        f'<tr class="f-{_e(g.verdict)}" data-kind="{_e(g.run.kind)}"><td>{_e(g.run.kind)}</td>'
        f'<td>{_e(g.verdict)}</td><td>{_e(" + ".join(g.run.nodes))}</td>'
        f"<td>{_e(g.run.launcher)}{' job ' + _e(g.run.job_id) if g.run.job_id else ''}</td>"
        f'<td class="measured">{_e(words.value(g.finding.measured))}</td>'
        f'<td class="threshold">{_e(words.value(g.finding.threshold))}</td><td>{_e(g.finding.reason)}</td></tr>'
        for g in j.groups)
    kinds = ", ".join(f"{sum(g.run.kind == k for g in j.groups)} {k}(s)"
                      for k in dict.fromkeys(g.run.kind for g in j.groups))
    gcurves = {"+".join(g.run.nodes): [(row.size_bytes, max(row.busbw_oop, row.busbw_ip)) for row in
                                       (g.run.report.rows if g.run.report else [])] for g in j.groups}
    gfail = {"+".join(g.run.nodes) for g in j.groups if g.verdict != "pass"}
    gfloor = next((g.finding.threshold for g in j.groups if isinstance(g.finding.threshold, int | float)), None)
    left = _skip_reasons(r.multi_node) if r.multi_node is not None and (r.multi_node.left_out
                                                                             or r.multi_node.error) else ""
    return (head + f"<p>{_e(kinds)}</p>"
            "<table><tr><th>kind</th><th>verdict</th><th>nodes</th><th>ran as</th><th>busbw (GB/s)</th>"
            f"<th>threshold</th><th>why</th></tr>{rows}</table>"
            + plots.busbw_curves(gcurves, gfail, "multi-node all_reduce: busbw vs message size", gfloor)
            + (_isolation(r.isolation) if r.isolation is not None else "")
            + (f"<h3>Left out</h3>{left}" if left else "") + "</section>")


def _fleet_plot(j: RackJudgement) -> str:
    flagged: dict[str, set[str]] = {}
    for n in j.nodes:
        for f in n.findings:
            if f.source == "fleet" and f.verdict == "fail":
                flagged.setdefault(f.metric, set()).add(n.node)
    return plots.fleet_distribution(j.fleet, flagged, j.policy)


def _curves(j: RackJudgement, by_input: Mapping[str, NodeInput]) -> dict[str, list[tuple[int, float]]]:
    curves: dict[str, list[tuple[int, float]]] = {}
    for n in j.nodes:
        inp = by_input.get(n.node)
        checks = [c for c in (inp.result.checks if inp and inp.result else [])
                  if c.kind == "nccl" and c.options.get("collective", "all_reduce") == "all_reduce"]
        curves[n.node] = _curve(checks[0] if checks else None)
    return curves


def to_html(r: ReportInput, here: Path | None = None) -> str:
    """The page; ``here`` is the directory it is written to (for links relative to it)."""
    j = r.judgement
    by_input = {i.node: i for i in r.inputs}
    placed = sorted(j.nodes, key=lambda n: -(by_input[n.node].position or 0) if n.node in by_input else 0)
    grid = "".join(
        f'<div class="u">U{_e(by_input[n.node].position if n.node in by_input else "?")}</div>'
        f'<div class="cell v-{_e(n.verdict)}" data-node="{_e(n.node)}" data-verdict="{_e(n.verdict)}">'
        f"{_e(n.node)} · {_e(n.verdict)}</div>" for n in placed)
    floor = next((f.threshold for n in j.nodes for f in n.findings
                  if f.check.startswith("nccl.all_reduce.single_node") and isinstance(f.threshold, int | float)), None)
    red = {n.node for n in j.nodes if _busbw_failed(n)}
    node_plot = plots.busbw_curves(_curves(j, by_input), red, "single-node all_reduce: busbw vs message size", floor)
    waivers = ""
    if r.waivers:
        items = "".join(f'<li data-waiver="{_e(w.check)}">{_e(words.waiver(w))} — applied to '
                        f'{_e(", ".join(n.node for n in j.nodes if w in n.waivers) or "no node")}</li>'
                        for w in r.waivers)
        waivers = f'<h2>Waivers</h2><ul id="waivers">{items}</ul>'
    m = r.meta
    details = "".join(_node_section(n, by_input.get(n.node)) for n in j.nodes)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Acceptance {_e(m.rack)}</title>
<style>{_CSS}</style></head><body>
<h1>Rack acceptance: {_e(m.rack)}</h1>
<p class="meta">level {_e(m.level)} · operator {_e(m.operator)} · policy {_e(m.policy)} ·
{_e(m.started_at)} → {_e(m.ended_at)} · racklife {_e(m.racklife_version)} · image {_e(m.image or "-")}
{" · evidence sha256 <code>" + _e(r.evidence_digest) + "</code>" if r.evidence_digest else ""}</p>
{_links(r, here)}
<p class="counts"><span class="c-total">nodes <b id="count-total">{len(j.nodes)}</b></span>
<span class="c-pass">passed <b id="count-pass">{len(j.passed)}</b></span>
<span class="c-fail">not passed <b id="count-fail">{len(j.not_passed)}</b></span></p>
{waivers}
<h2>Rack overview</h2><div class="rack" id="rack-grid">{grid}</div>
<h2>busbw vs message size</h2>
<p class="meta" id="busbw-red" data-nodes="{_e(",".join(sorted(red)))}">red: a node whose own all_reduce busbw
failed its check ({_e(", ".join(sorted(red)) or "none")});
a node that failed another check (InfiniBand ports, DCGM, …) says so in its table below.</p>
{node_plot}
{_multi_node(r)}
<h2>Fleet distribution</h2>{_fleet_plot(j)}
<h2>Nodes</h2>{details}
</body></html>
"""

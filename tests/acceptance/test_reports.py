"""The three reports: JSON for machines, JUnit XML against the Ant/Jenkins schema, HTML in a real browser."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from collections.abc import Callable
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
import xmlschema

from acceptance.evidence import BundleMeta
from acceptance.isolation import FaultModel, isolate
from acceptance.judge import GroupRun, NodeInput, judge_rack
from acceptance.reports import ReportInput, to_json, write_reports
from burnin.parsers import nccl

Build = Callable[[list[Any] | None], list[tuple[NodeInput, Path]]]
META = BundleMeta(rack="rack-a", operator="alice@example.net", started_at="2026-11-30T02:00:00Z",
                  ended_at="2026-11-30T02:12:00Z", racklife_version="0.1.0", level="quick",
                  image="racklife-h100-ubuntu2204-2026.11.1")
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]


@pytest.fixture(scope="module")
def report(rack8: Build, fixtures_dir: Path) -> ReportInput:
    inputs = [inp for inp, _ in rack8(None)]
    degraded = (fixtures_dir / "nccl/h100x8_2node-16gpu_all_reduce_perf_ndr-ib_DEGRADED_issue290.txt").read_text()
    groups = [GroupRun(("gpu-a03", "gpu-a04"), "pair", nccl.parse(degraded, "all_reduce"), raw_output=degraded)]
    j = judge_rack(inputs, groups=groups, group_profile="h100-sxm-8")
    names = [i.node for i in inputs]
    iso = isolate(names, FaultModel(frozenset({"gpu-a03"})), split="pairs")
    return ReportInput(j, inputs, META, iso, evidence_digest="ab" * 32)


@pytest.fixture(scope="module")
def written(report: ReportInput, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return write_reports(tmp_path_factory.mktemp("reports"), report)


def test_json_report(report: ReportInput) -> None:
    doc = json.loads(to_json(report))
    assert doc["summary"] == {"nodes": 8, "passed": 5, "not_passed": 3, "waived": 0}
    a05 = next(n for n in doc["nodes"] if n["node"] == "gpu-a05")
    assert a05["verdict"] == "fail" and a05["position"] == 5
    assert any("ib.ports" in r for r in a05["reasons"])
    assert doc["isolation"]["bad_nodes"] == ["gpu-a03"] and doc["isolation"]["rounds"] == 3
    assert doc["multi_node"][0]["verdict"] == "fail"
    assert doc["evidence_sha256"] == "ab" * 32


def test_junit_validates_and_has_one_case_per_node_and_check(report: ReportInput, written: dict[str, Path]) -> None:
    paths = written
    schema = xmlschema.XMLSchema(Path(__file__).parent / "data" / "JUnit.xsd")
    schema.validate(str(paths["junit"]))
    root = ET.parse(paths["junit"]).getroot()
    *suites, multi = root.findall("testsuite")
    assert [s.get("name") for s in suites] == [n.node for n in report.judgement.nodes]
    assert multi.get("name") == "multi_node" and multi.get("failures") == "1"
    run = multi.find("testcase")
    assert run is not None and run.get("name") == "pair:gpu-a03+gpu-a04" and run.find("failure") is not None
    for suite, node in zip(suites, report.judgement.nodes, strict=True):
        cases = suite.findall("testcase")
        assert [c.get("name") for c in cases] == [f.check for f in node.findings]
        assert int(suite.get("failures", "-1")) == len(suite.findall("testcase/failure"))
        assert int(suite.get("errors", "-1")) == len(suite.findall("testcase/error"))
    a03 = suites[2].findall("testcase")
    failure = next(c for c in a03 if c.get("name") == "gpu.nvlink").find("failure")
    assert failure is not None and "GPU 3" in failure.get("message", "")
    assert json.loads(failure.text or "{}")["threshold"] == 18


def test_junit_schema_rejects_a_broken_document(written: dict[str, Path]) -> None:
    paths = written
    schema = xmlschema.XMLSchema(Path(__file__).parent / "data" / "JUnit.xsd")
    broken = paths["junit"].read_text().replace('hostname="gpu-a01" ', "", 1)
    assert not schema.is_valid(broken)  # the schema is strict enough to catch a missing attribute


class _Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.ids: dict[str, str] = {}
        self.cells: list[dict[str, str | None]] = []
        self.svgs = 0
        self._capture: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "svg":
            self.svgs += 1
        if a.get("class", "") and "cell" in (a.get("class") or "").split():
            self.cells.append(a)
        if a.get("id", "") and (a.get("id") or "").startswith("count-"):
            self._capture = a["id"]

    def handle_data(self, data: str) -> None:
        if self._capture:
            self.ids[self._capture] = data.strip()
            self._capture = None


def test_html_is_self_contained(written: dict[str, Path]) -> None:
    page = written["html"].read_text()
    assert "<script" not in page and "<link" not in page
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:|//)""", page)
    assert not re.search(r"xlink:href=\"(?!#)", page)  # SVG references stay inside the page


def test_html_renders_in_chromium(report: ReportInput, written: dict[str, Path], tmp_path: Path) -> None:
    chromium = shutil.which("chromium")
    assert chromium, "Debian package 'chromium' is required for this test"
    html_path = written["html"]
    profile = tmp_path / "chromium-profile"
    base = [chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}"]
    shot = tmp_path / "report.png"
    subprocess.run([*base, "--window-size=1200,2400", f"--screenshot={shot}", html_path.as_uri()],
                   check=True, capture_output=True, timeout=120)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000
    dom = subprocess.run([*base, "--dump-dom", html_path.as_uri()], check=True, capture_output=True,
                         timeout=120, text=True).stdout
    parsed = _Page()
    parsed.feed(dom)
    assert parsed.ids == {"count-total": "8", "count-pass": "5", "count-fail": "3"}
    verdicts = {c["data-node"]: c["data-verdict"] for c in parsed.cells}
    assert verdicts == {n.node: n.verdict for n in report.judgement.nodes}
    assert sum(v == "pass" for v in verdicts.values()) == 5
    assert parsed.svgs >= 3  # node curves, multi-node curves, fleet distribution


# ------------------------------------------------------------------ the HTML page's sections, in Chromium


class _Sections(HTMLParser):
    """What a reader sees: the text of each cell class, the links, the tools, the multi-node rows."""

    def __init__(self) -> None:
        super().__init__()
        self.text: dict[str, list[str]] = {}
        self.attrs: dict[str, dict[str, str | None]] = {}
        self.tools: dict[str, tuple[str, str]] = {}  # tool -> (class, text), for the first node
        self.rows: list[dict[str, str | None]] = []
        self._stack: list[tuple[str, str]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if a.get("id"):
            self.attrs[str(a["id"])] = a
        if "data-kind" in a or "data-round" in a or "data-left-out" in a:
            self.rows.append(a)
        key = str(a.get("class") or "")
        if tag == "span" and a.get("data-tool"):
            key = f"tool:{a['data-tool']}:{a.get('class') or ''}"
        self._stack.append((tag, key))

    def handle_endtag(self, tag: str) -> None:
        while self._stack and self._stack.pop()[0] != tag:
            pass

    def handle_data(self, data: str) -> None:
        if self._stack and self._stack[-1][1]:
            key = self._stack[-1][1]
            self.text.setdefault(key, []).append(data)
            if key.startswith("tool:"):
                _, tool, cls = key.split(":", 2)
                self.tools.setdefault(tool, (cls, data))


def _dom(chromium: str, page: Path, tmp_path: Path) -> str:
    base = [chromium, *CHROMIUM_FLAGS, "--host-resolver-rules=MAP * ~NOTFOUND",
            f"--user-data-dir={tmp_path / 'chromium-profile'}"]
    shot = tmp_path / f"{page.parent.name}.png"
    subprocess.run([*base, "--window-size=1200,4000", f"--screenshot={shot}", page.as_uri()],
                   check=True, capture_output=True, timeout=120)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000
    return subprocess.run([*base, "--dump-dom", page.as_uri()], check=True, capture_output=True, timeout=120,
                          text=True).stdout


def test_html_sections_read_as_words_in_chromium(report: ReportInput, tmp_path: Path) -> None:
    """Tool versions or "unknown" with why; values in words; red only for busbw; multi-node runs, isolation
    rounds and the nodes left out; links to the JSON, the JUnit XML and the evidence bundle that resolve."""
    from dataclasses import replace

    from acceptance.reports import MultiNodeStage

    chromium = shutil.which("chromium")
    assert chromium, "Debian package 'chromium' is required for this test"
    first = report.inputs[0]
    assert first.result is not None
    checks = [replace(c, tool_version=None, tool_version_note="`dcgmi --version` exited 2: Usage: dcgmi diag -r <1|2>")
              if c.tool == "dcgmi" else c for c in first.result.checks]
    inputs = [replace(first, result=replace(first.result, checks=checks)), *report.inputs[1:]]
    evidence = tmp_path / "work" / "evidence"
    evidence.mkdir(parents=True)
    (evidence / "manifest.json").write_text("{}")
    r = replace(report, inputs=inputs, evidence_dir=str(evidence),
                multi_node=MultiNodeStage({"gpu-a05": "failed burn-in: ib ports down"}))
    page = write_reports(tmp_path / "work" / "reports", r)["html"]
    parsed = _Sections()
    parsed.feed(_dom(chromium, page, tmp_path))

    assert parsed.tools["dcgmi"] == ("unknown", "dcgmi unknown (`dcgmi --version` exited 2: Usage: dcgmi diag -r <1|2>)")
    assert parsed.tools["all_reduce_perf"] == ("", "all_reduce_perf nccl-tests 2.13.9")
    assert parsed.tools["dmesg"][1] == "dmesg from util-linux 2.38.1"  # the tool's name said once
    cells = parsed.text["measured"] + parsed.text["threshold"]
    assert cells and not [c for c in cells if re.search(r"[{}\"]|\bTrue\b|\bFalse\b|\bNone\b", c)], cells
    assert "all 8 GPUs: yes" in cells and "min 520.61.05" in cells
    assert not [w for w in parsed.text["why"] if re.search(r"\{'|\bNone\b|\bTrue\b", w)], parsed.text["why"]

    red = set((parsed.attrs["busbw-red"]["data-nodes"] or "").split(","))
    assert "gpu-a03" in red and "gpu-a05" not in red  # gpu-a05 failed its InfiniBand ports, not busbw

    assert [x["data-kind"] for x in parsed.rows if "data-kind" in x] == ["pair"]
    assert report.isolation is not None
    assert [x["data-round"] for x in parsed.rows if "data-round" in x] == [
        str(i.number) for i in report.isolation.rounds]
    assert [x["data-left-out"] for x in parsed.rows if "data-left-out" in x] == ["gpu-a05"]
    assert "multi-node" in parsed.attrs and "multi-node-skipped" not in parsed.attrs

    for link in ("link-json", "link-junit", "link-evidence"):
        href = parsed.attrs[link]["href"]
        assert href and not href.startswith(("http", "//", "/")), href  # relative: the archive keeps working
        assert (page.parent / href).resolve().is_file(), href


def test_html_says_why_multi_node_was_skipped(rack8: Build, tmp_path: Path) -> None:
    from acceptance.reports import MultiNodeStage

    chromium = shutil.which("chromium")
    assert chromium, "Debian package 'chromium' is required for this test"
    inputs = [inp for inp, _ in rack8(None)]
    off = "multi-node runs were turned off (--no-multi-node)"
    r = ReportInput(judge_rack(inputs), inputs, META, multi_node=MultiNodeStage({i.node: off for i in inputs}))
    page = write_reports(tmp_path / "reports", r)["html"]
    dom = _dom(chromium, page, tmp_path)
    parsed = _Sections()
    parsed.feed(dom)
    assert "multi-node-skipped" in parsed.attrs
    [row] = [x for x in parsed.rows if "data-left-out" in x]
    assert row["data-left-out"] == ",".join(sorted(i.node for i in inputs))
    assert off in dom and "none written with this report" in dom  # no evidence bundle: said, not a dead link

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

"""Multi-node coverage: a run's verdict reaches its members; required testing is done or explicitly waived.

On the old judge a node left out of every multi-node run (Slurm unreachable, not
schedulable, no peer, a Kubernetes pool) was accepted on its single-node results, and a
node in a run that was slow or could not be judged carried nothing of it unless isolation
named it. The runs here are captured nccl-tests outputs judged with the H100 floor.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import xmlschema

from acceptance.coverage import MultiNodeDemand, judge_acceptance
from acceptance.evidence import BundleMeta
from acceptance.judge import GroupRun, NodeInput, Waiver
from acceptance.reports import ReportInput, to_html, to_json, to_junit
from burnin.parsers import nccl
from tests.acceptance.conftest import whole_aws_p5

Build = Callable[[list[Any] | None], list[tuple[NodeInput, Path]]]
PROFILE = "h100-sxm-8"
WAIVER = Waiver("multi-node", "alice@example.net", "fabric cabling of rack-a finishes next week; IB-only burn-in",
                "2026-11-30T02:00:00+00:00")
META = BundleMeta("rack-a", "alice@example.net", "2026-11-30T02:00:00Z", "2026-11-30T02:12:00Z", "0.1.0",
                  "standard")


@pytest.fixture
def runs(fixtures_dir: Path) -> dict[str, nccl.NcclReport]:
    degraded = (fixtures_dir / "nccl/h100x8_2node-16gpu_all_reduce_perf_ndr-ib_DEGRADED_issue290.txt").read_text()
    aws = (fixtures_dir / "nccl/aws-p5_2node-16xH100_all_reduce_perf_efa-32x100G.txt").read_text()
    healthy = whole_aws_p5(aws)
    return {"slow": nccl.parse(degraded, "all_reduce"), "fast": nccl.parse(healthy, "all_reduce")}


def _inputs(rack8: Build) -> list[NodeInput]:
    return [inp for inp, _ in rack8(None)]


def test_required_multi_node_not_done_is_an_error(rack8: Build) -> None:
    left = {"gpu-a01": "Slurm does not know the node: scontrol: error: Unable to contact slurm controller"}
    j = judge_acceptance(_inputs(rack8), demand=MultiNodeDemand("standard", left))
    a01 = j.by_node()["gpu-a01"]
    assert a01.verdict == "error"
    req = next(f for f in a01.findings if f.check == "multi_node.required")
    assert req.verdict == "error" and "required at level standard" in req.reason
    assert "Unable to contact slurm controller" in req.reason and "--waive multi-node" in req.reason
    a02 = j.by_node()["gpu-a02"]  # never in a run, no reason recorded: still not accepted
    assert a02.verdict == "error" and "no multi-node run included it" in a02.reasons()[-1]


def test_not_required_at_quick_says_so(rack8: Build) -> None:
    j = judge_acceptance(_inputs(rack8), demand=MultiNodeDemand("quick", {}))
    a01 = j.by_node()["gpu-a01"]
    req = next(f for f in a01.findings if f.check == "multi_node.required")
    assert a01.passed and req.verdict == "pass" and "not required at level quick" in req.reason


def test_an_explicit_waiver_is_recorded_with_who_and_why(rack8: Build) -> None:
    left = {n.node: "no second node of profile h100-sxm-8 in pool 'inference' to run with" for n in _inputs(rack8)}
    j = judge_acceptance(_inputs(rack8), demand=MultiNodeDemand("standard", left, (WAIVER,)))
    a01 = j.by_node()["gpu-a01"]
    assert a01.passed and a01.waivers == (WAIVER,)
    req = next(f for f in a01.findings if f.check == "multi_node.required")
    assert req.source == "waiver" and "WAIVED by alice@example.net: fabric cabling" in req.reason
    assert j.by_node()["gpu-a03"].waivers == (WAIVER,) and not j.by_node()["gpu-a03"].passed  # a waiver lifts
    # nothing else: gpu-a03's NVLink still fails it


def test_waivers_are_in_every_report(rack8: Build, repo_dir: Path) -> None:
    inputs = _inputs(rack8)
    j = judge_acceptance(inputs, demand=MultiNodeDemand("standard", {}, (WAIVER,)))
    r = ReportInput(j, inputs, META, waivers=(WAIVER,))
    doc = json.loads(to_json(r))
    assert doc["waivers"][0]["by"] == "alice@example.net" and doc["waivers"][0]["reason"] == WAIVER.reason
    assert doc["waivers"][0]["nodes"] == [i.node for i in inputs] and doc["summary"]["waived"] == 8
    assert doc["nodes"][0]["waivers"][0]["check"] == "multi-node"
    junit = to_junit(r)
    xmlschema.XMLSchema(repo_dir / "tests" / "acceptance" / "data" / "JUnit.xsd").validate(junit)
    root = ET.fromstring(junit)
    suite = root.find("testsuite[@name='gpu-a01']")
    assert suite is not None and suite.get("skipped") == "1"
    prop = suite.find("properties/property[@name='waiver.multi-node']")
    assert prop is not None and "alice@example.net" in (prop.get("value") or "")
    skipped = suite.find("testcase[@name='multi_node.required']/skipped")
    assert skipped is not None and "WAIVED" in (skipped.get("message") or "")
    page = to_html(r)
    assert '<ul id="waivers">' in page and "waived by alice@example.net" in page and "WAIVED:" in page


def test_a_groups_verdict_reaches_each_member(rack8: Build, runs: dict[str, nccl.NcclReport]) -> None:
    groups = [GroupRun(("gpu-a01", "gpu-a02"), "pair", runs["fast"], profile=PROFILE),
              GroupRun(("gpu-a04", "gpu-a06"), "pair", runs["slow"], profile=PROFILE),
              GroupRun(("gpu-a06", "gpu-a08"), "pair", runs["fast"], profile=PROFILE),
              GroupRun(("gpu-a05", "gpu-a07"), "pair", None, error="srun exited 1: Unable to allocate resources",
                       profile=PROFILE)]
    j = judge_acceptance(_inputs(rack8), groups=groups, demand=MultiNodeDemand("standard", {}))
    by = j.by_node()
    verdict = {n: next(f for f in by[n].findings if f.check == "multi_node.runs").verdict
               for n in ("gpu-a01", "gpu-a04", "gpu-a05", "gpu-a06")}
    assert verdict == {"gpu-a01": "pass", "gpu-a04": "fail", "gpu-a05": "error", "gpu-a06": "pass"}
    assert by["gpu-a01"].passed
    assert by["gpu-a04"].verdict == "fail" and "slow in every multi-node run" in by["gpu-a04"].reasons()[0]
    assert "could not be judged" in " ".join(by["gpu-a05"].reasons())
    six = next(f for f in by["gpu-a06"].findings if f.check == "multi_node.runs")
    assert "cleared by pair gpu-a06+gpu-a08" in six.reason and "put down to its peers" in six.reason


@pytest.mark.parametrize(("args", "words"), [
    (["--waive", "dcgm", "--reason", "x"], "only multi-node can be waived"),
    (["--waive", "multi-node"], "--waive needs --reason"),
    (["--waive", "multi-node", "--reason", "  "], "--waive needs --reason"),
    (["--reason", "because"], "--reason is the reason for a --waive"),
])
def test_accept_refuses_a_waiver_that_is_not_explicit(args: list[str], words: str) -> None:
    from typer.testing import CliRunner

    from lifecycle.cli import app

    res = CliRunner().invoke(app, ["accept", "rack-1", "--level", "standard", *args])
    assert res.exit_code == 2 and words in res.output


def test_a_run_with_no_profile_to_judge_it_is_an_error_for_its_members(rack8: Build,
                                                                      runs: dict[str, nccl.NcclReport]) -> None:
    groups = [GroupRun(("gpu-a01", "gpu-a02"), "pair", runs["fast"], profile="no-such-sku")]
    j = judge_acceptance(_inputs(rack8), groups=groups, demand=MultiNodeDemand("quick", {}))
    assert [g.verdict for g in j.groups] == ["error"] and "cannot be judged" in j.groups[0].finding.reason
    assert j.by_node()["gpu-a01"].verdict == "error"

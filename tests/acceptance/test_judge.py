"""Judging a rack: the SKU profile, the fleet's robust baseline, multi-node runs, and failing closed."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from acceptance.isolation import FaultModel, isolate, link
from acceptance.judge import (
    GroupRun,
    NodeInput,
    OutlierPolicy,
    RackJudgement,
    judge_group,
    judge_rack,
    modified_z,
    robust_stats,
)
from burnin import profiles
from burnin.parsers import nccl
from tests.acceptance.conftest import whole_aws_p5

PROFILE = "h100-sxm-8"
Build = Callable[[list[Any] | None], list[tuple[NodeInput, Path]]]


def judged(rack8: Build, specs: list[Any] | None = None) -> RackJudgement:
    return judge_rack([inp for inp, _ in rack8(specs)])


def test_lab_rack_verdicts_and_reasons(rack8: Build) -> None:
    j = judged(rack8)
    assert j.passed == ["gpu-a01", "gpu-a02", "gpu-a04", "gpu-a06", "gpu-a08"]
    by = j.by_node()
    a03 = {f.check: f for f in by["gpu-a03"].findings}
    assert a03["gpu.nvlink"].verdict == "fail" and a03["gpu.nvlink"].threshold == 18
    assert "GPU 3" in a03["gpu.nvlink"].reason and "12" in a03["gpu.nvlink"].reason
    assert a03["nccl.all_reduce.single_node"].verdict == "fail"
    assert a03["nccl.all_reduce.single_node"].threshold == 460.0
    a05 = {f.check: f for f in by["gpu-a05"].findings}
    assert a05["ib.ports"].verdict == "fail" and "mlx5_2:1 Down" in a05["ib.ports"].reason


def test_node_above_the_floor_but_far_below_peers_is_flagged(rack8: Build) -> None:
    j = judged(rack8)
    a07 = j.by_node()["gpu-a07"]
    assert a07.verdict == "fail"
    failing = [f for f in a07.findings if f.verdict != "pass"]
    assert [f.check for f in failing] == ["fleet.nccl.all_reduce.busbw"]
    f = failing[0]
    assert f.source == "fleet" and f.measured > 460.0  # clears the profile floor …
    assert f.threshold["z_min"] == -3.5 and f.measured < f.threshold["value_max_for_flag"]
    assert "far below its 8 peers" in f.reason and "median" in f.reason and "MAD" in f.reason
    profile_nccl = next(x for x in a07.findings if x.check == "nccl.all_reduce.single_node")
    assert profile_nccl.verdict == "pass"  # … which the fixed threshold alone would have let through


def test_every_finding_names_number_threshold_and_why(rack8: Build) -> None:
    for n in judged(rack8).nodes:
        for f in n.findings:
            assert f.metric and f.reason, f
            assert f.source in ("profile", "fleet", "record", "multi_node")


def test_small_spread_is_not_an_outlier(rack8: Build, node_spec: Any) -> None:
    specs = [node_spec(f"gpu-b{i:02d}", busbw_scale=1 - 0.003 * i) for i in range(8)]  # 0 … 2.1 % slower
    j = judged(rack8, specs)
    assert j.not_passed == []
    stat = next(s for s in j.fleet if s.metric == "nccl.all_reduce.busbw")
    assert stat.applied and stat.median is not None


def test_missing_result_and_missing_check_fail_closed(rack8: Build, node_spec: Any, rack8_specs: list[Any]) -> None:
    specs = [*rack8_specs[:5], node_spec("gpu-a06", missing_result=True),
             node_spec("gpu-a07", drop_check="stress"), rack8_specs[7]]
    j = judged(rack8, specs)
    by = j.by_node()
    assert by["gpu-a06"].verdict == "error"
    assert by["gpu-a06"].reasons() == ["result: ssh: connection refused"]
    a07 = by["gpu-a07"]
    assert a07.verdict == "error"
    assert any(f.check == "stress" and "lacks it" in f.reason for f in a07.findings)
    assert any(f.check == "fleet.stress.hbm_gbps.min_gpu" and f.verdict == "error" for f in a07.findings)


def test_too_few_peers_means_no_fleet_verdict(rack8: Build, rack8_specs: list[Any]) -> None:
    j = judged(rack8, [rack8_specs[0], rack8_specs[1], rack8_specs[6]])
    assert all(not s.applied and "needs 5" in s.note for s in j.fleet)
    assert j.by_node()["gpu-a07"].verdict == "pass"


def test_unknown_profile_is_an_error(rack8: Build) -> None:
    inp, _ = rack8(None)[0]
    j = judge_rack([NodeInput(inp.node, "no-such-sku", inp.result)])
    assert j.nodes[0].verdict == "error" and "unknown profile" in j.nodes[0].reasons()[0]


def test_rejudged_against_another_profile(rack8: Build) -> None:
    inp, _ = rack8(None)[0]
    j = judge_rack([NodeInput(inp.node, "h200-sxm-8", inp.result)])
    reasons = " ".join(j.nodes[0].reasons())
    assert j.nodes[0].verdict == "fail" and "H100" in reasons  # an H100 node is not an H200


def test_multi_node_runs_from_captures(fixtures_dir: Path) -> None:
    profile = profiles.load(PROFILE)
    degraded = (fixtures_dir / "nccl/h100x8_2node-16gpu_all_reduce_perf_ndr-ib_DEGRADED_issue290.txt").read_text()
    run = GroupRun(("node005", "node007"), "pair", nccl.parse(degraded, "all_reduce"), raw_output=degraded)
    g = judge_group(run, profile)
    assert g.verdict == "fail"
    assert g.finding.threshold == pytest.approx(46.0 * 8)
    assert "155.57" in g.finding.reason and "node005+node007" in g.finding.reason
    # the AWS capture is an excerpt without the closing "Avg bus bandwidth" line: not proof of a pass
    aws = (fixtures_dir / "nccl/aws-p5_2node-16xH100_all_reduce_perf_efa-32x100G.txt").read_text()
    cut = judge_group(GroupRun(("p5-a", "p5-b"), "pair", nccl.parse(aws, "all_reduce")), profile)
    assert cut.verdict == "error" and "did not finish" in cut.finding.reason
    no_ranks = judge_group(GroupRun(("p5-a", "p5-b"), "pair", nccl.parse(
        aws + "0: # Out of bounds values : 0 OK\n0: # Avg bus bandwidth    : 187.3\n", "all_reduce")), profile)
    assert no_ranks.verdict == "error" and "which GPUs took part is unknown" in no_ranks.finding.reason
    healthy = whole_aws_p5(aws)
    ok = judge_group(GroupRun(("p5-a", "p5-b"), "pair", nccl.parse(healthy, "all_reduce")), profile)
    assert ok.verdict == "pass" and ok.finding.measured == pytest.approx(487.26)
    lost = judge_group(GroupRun(("x", "y"), "pair", None, error="srun: timed out"), profile)
    assert lost.verdict == "error" and lost.finding.reason == "srun: timed out"


def test_isolation_culprits_are_quarantined_with_the_reason(rack8: Build) -> None:
    inputs = [inp for inp, _ in rack8(None)]
    names = [i.node for i in inputs]
    iso = isolate(names, FaultModel(frozenset({"gpu-a02"}), frozenset({link("gpu-a06", "gpu-a08")})), confirm=2)
    assert iso.bad_nodes == {"gpu-a02"} and iso.bad_links == {("gpu-a06", "gpu-a08")}
    j = judge_rack(inputs, culprits=iso.culprits())
    a02 = j.by_node()["gpu-a02"]
    assert a02.verdict == "fail"
    assert a02.reasons() == ["multi_node.isolation: isolation: slow with proven-good node(s) gpu-a03, gpu-a04 (round 3)"]
    assert j.by_node()["gpu-a06"].verdict == "pass"  # a bad link is not either node's fault


def test_robust_statistics() -> None:
    med, mad = robust_stats([10.0, 10.0, 11.0, 12.0, 100.0])
    assert (med, mad) == (11.0, 1.0)
    assert modified_z(100.0, med, mad) == pytest.approx(0.6745 * 89)
    assert modified_z(5.0, 5.0, 0.0) == 0.0
    assert OutlierPolicy().z_max == 3.5


def test_a_group_run_whose_ranks_ran_on_another_number_of_hosts_is_an_error(fixtures_dir: Path) -> None:
    """issue290's run lists ranks on node005 and node007: as the run of a three-node ring it proves
    nothing of the third node (it was judged on its bandwidth alone, against a floor it clears)."""
    text = (fixtures_dir / "nccl/h100x8_2node-16gpu_all_reduce_perf_ndr-ib_DEGRADED_issue290.txt").read_text()
    text = text.replace(" N/A", "   0")  # the one fact under test: a validated run of two hosts
    low = profiles.load(PROFILE)
    low = replace(low, nccl=replace(low.nccl, multi_node_per_nic_busbw_min_gbps=18.0))
    pair = judge_group(GroupRun(("node005", "node007"), "pair", nccl.parse(text, "all_reduce")), low)
    assert pair.verdict == "pass"
    ring = judge_group(GroupRun(("node005", "node007", "node009"), "ring", nccl.parse(text, "all_reduce")), low)
    assert ring.verdict == "error" and "ranks on 2 host(s) (node005, node007) for a group of 3" in ring.finding.reason

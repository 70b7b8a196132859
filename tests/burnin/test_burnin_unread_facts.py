"""Facts the parsers expose that the judge used to ignore, each of which let a bad run pass.

Every test judges a real capture (or a real capture with the one fact changed that the
test is about) and fails on the judge before this change: DCGM's skipped tests and the
GPUs it named, nccl-tests' out-of-bounds count, an unvalidated run (``-c 0``), the
ranks and hosts that took part, and, in a stored result, a tool's exit status and an
HCA's announced port count.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import asdict, replace
from pathlib import Path

import pytest

from burnin import profiles
from burnin.judge import judge_dcgm, judge_ib, judge_nccl
from burnin.parsers import dcgm, infiniband, nccl
from burnin.result import CheckResult, Finding, RunResult, Verdict, worst
from burnin.runner import rejudge

Fx = Callable[[str], Path]
H100 = profiles.load("h100-sxm-8")
ONE_GPU = replace(H100, gpu=replace(H100.gpu, count=1))  # the GB10 and VirtualClient captures are one-GPU machines
GB10 = "dcgm/gb10_dcgmi-diag-r3_dcgm-4.4.2_all-skip_repo-unidentified_TOP-BORDER-MISSING-IN-SOURCE.txt"
SINGLE = "nccl/h100x8_all_reduce_perf_single-node_nvls_issue290.txt"
TWO_NODE_UNVALIDATED = "nccl/h100x8_2node-16gpu_all_reduce_perf_ndr-ib_DEGRADED_issue290.txt"
FIVE = "nccl/xxrjun_nccl_N1_G8_cnode3-003_h100x8_5-collectives.log"
OOB_OK = "# Out of bounds values : 0 OK"
OOB_BAD = "# Out of bounds values : 4 FAILED"  # nccl-tests common.cu: "%d %s", errors ? "FAILED" : "OK"


def _verdict(findings: list[Finding]) -> Verdict:
    return worst([f.verdict for f in findings])


# ---------------------------------------------------------------- DCGM: skipped tests


@pytest.mark.parametrize("level", ["standard", "full"])
def test_dcgm_run_whose_required_tests_all_skipped_is_an_error(nfx: Fx, level: str) -> None:
    """GB10, DCGM 4.4.2, dcgmi diag -r 3: only `software` passed, every plugin skipped. It judged PASS."""
    report = dcgm.parse(nfx(GB10).read_text())
    found = judge_dcgm(report, ONE_GPU, level)
    skipped = next(f for f in found if f.name == "dcgm.skipped")
    assert _verdict(found) == "error" and skipped.verdict == "error"
    assert "pcie" in skipped.measured and "memory" in skipped.measured
    if level == "full":
        assert {"targeted_stress", "targeted_power", "memory_bandwidth", "diagnostic"} <= set(skipped.measured)
    assert "a skipped test was not run" in skipped.reason


def test_dcgm_skip_in_a_test_the_required_level_does_not_run_does_not_weaken_it(nfx: Fx) -> None:
    """At quick (r1) only `software` is required, and it passed: the r3 plugins' skips are not r1's."""
    found = judge_dcgm(dcgm.parse(nfx(GB10).read_text()), ONE_GPU, "quick")
    assert _verdict(found) == "pass"


def test_dcgm_without_a_level_judges_the_skips_of_the_level_that_ran(nfx: Fx) -> None:
    found = judge_dcgm(dcgm.parse(nfx(GB10).read_text()), ONE_GPU)
    assert next(f for f in found if f.name == "dcgm.skipped").verdict == "error"


# ---------------------------------------------------------------- DCGM: GPUs covered


def test_dcgm_results_for_fewer_gpus_than_the_sku_has_are_an_error(fx: Fx) -> None:
    """VirtualClient's r3 JSON names GPU 0 only: a pass for one GPU is not a pass for an 8-GPU node."""
    found = judge_dcgm(dcgm.parse(fx("dcgm/virtualclient/DCGMIDiag_r3_results.json").read_text()), H100, "full")
    gpus = next(f for f in found if f.name == "dcgm.gpus")
    assert gpus.verdict == "error" and gpus.measured["PCIe"] == ["0"] and "PCIe: GPU 0" in gpus.reason
    assert _verdict(judge_dcgm(dcgm.parse(fx("dcgm/virtualclient/DCGMIDiag_r3_results.json").read_text()),
                               ONE_GPU, "full")) == "pass"


def test_dcgm_test_that_left_out_one_gpu_is_an_error(nfx: Fx) -> None:
    """B200 x8, DCGM 4.4.1 r2: every plugin test lists GPU0..GPU7; one GPU row deleted under one
    test (the other tests still name all eight) is a GPU that test did not diagnose."""
    text = nfx("dcgm/b200x8_dcgmi-diag-r2_dcgm-4.4.1_pcie-FAIL_issue253.txt").read_text()
    report = dcgm.parse(text)
    assert all(len(t.gpus) == 8 for t in report.tests if t.gpus)
    lines = text.splitlines(keepends=True)
    first_gpu7 = next(i for i, ln in enumerate(lines) if "GPU7:" in ln)
    cut = dcgm.parse("".join(lines[:first_gpu7] + lines[first_gpu7 + 1:]))
    b200 = profiles.load("b200-8")
    assert next(f for f in judge_dcgm(report, b200, "standard") if f.name == "dcgm.gpus").verdict == "pass"
    gpus = next(f for f in judge_dcgm(cut, b200, "standard") if f.name == "dcgm.gpus")
    assert gpus.verdict == "error" and len(gpus.measured) == 1 and "GPU 0, 1, 2, 3, 4, 5, 6" in gpus.reason


# ---------------------------------------------------------------- nccl-tests: out of bounds


def test_nccl_out_of_bounds_values_fail(fx: Fx) -> None:
    text = fx(SINGLE).read_text()
    assert OOB_OK in text
    found = judge_nccl(nccl.parse(text.replace(OOB_OK, OOB_BAD), "all_reduce"), H100)
    oob = next(f for f in found if f.name == "nccl.all_reduce")
    assert _verdict(found) == "fail" and oob.verdict == "fail" and "4 out-of-bounds values" in oob.reason


@pytest.mark.parametrize("which", range(5))
def test_nccl_out_of_bounds_in_one_collective_of_five_fails_that_collective(nfx: Fx, which: int) -> None:
    text = nfx(FIVE).read_text()
    at = [m.start() for m in re.finditer(re.escape(OOB_OK), text)]
    assert len(at) == 5
    text = text[:at[which]] + OOB_BAD + text[at[which] + len(OOB_OK):]
    verdicts = [_verdict(judge_nccl(r, H100, "single_node")) for r in nccl.parse_all(text)]
    assert verdicts == ["fail" if i == which else "pass" for i in range(5)]


def test_nccl_without_an_out_of_bounds_line_is_an_error(fx: Fx) -> None:
    text = fx(SINGLE).read_text().replace(OOB_OK + "\n", "")
    found = judge_nccl(nccl.parse(text, "all_reduce"), H100)
    assert _verdict(found) == "error" and any("Out of bounds" in f.reason for f in found)


# ---------------------------------------------------------------- nccl-tests: validation off


def _wrong_to_na(text: str, rows: int | None = None) -> str:
    """Replace the out-of-place and in-place #wrong of the first ``rows`` result rows with N/A."""
    out, done = [], 0
    for line in text.splitlines(keepends=True):
        cells = line.split()
        if len(cells) == 13 and cells[0].isdigit() and (rows is None or done < rows):
            line = re.sub(r"^(\s*(?:\S+\s+){8})\S+(\s+(?:\S+\s+){3})\S+", r"\g<1>N/A\g<2>N/A", line)
            done += 1
        out.append(line)
    return "".join(out)


def test_real_unvalidated_two_node_run_is_an_error_even_above_the_floor(fx: Fx) -> None:
    """issue290's 2-node capture ran with validation: 0 (every #wrong N/A). Against a floor it clears
    (18 GB/s x 8 NICs = 144 < 155.57) it judged PASS: 0 wrong results read as correct."""
    report = nccl.parse(fx(TWO_NODE_UNVALIDATED).read_text(), "all_reduce")
    assert not report.validated and report.wrong_results == 0
    low = replace(H100, nccl=replace(H100.nccl, multi_node_per_nic_busbw_min_gbps=18.0))
    found = judge_nccl(report, low, "multi_node")
    assert _verdict(found) == "error"
    assert any(f.verdict == "error" and "-c 0" in f.reason for f in found)
    assert next(f for f in found if f.name == "nccl.all_reduce.multi_node").verdict == "pass"  # bandwidth still judged


@pytest.mark.parametrize("level", ["quick", "standard", "full"])
def test_unvalidated_single_node_run_is_an_error_at_every_level(fx: Fx, level: str) -> None:
    report = nccl.parse(_wrong_to_na(fx(SINGLE).read_text()), "all_reduce")
    assert not report.validated
    assert level in H100.checks and "nccl" in H100.checks[level]  # every level judges correctness
    assert _verdict(judge_nccl(report, H100, "single_node")) == "error"


def test_partly_validated_run_is_an_error(fx: Fx) -> None:
    report = nccl.parse(_wrong_to_na(fx(SINGLE).read_text(), rows=2), "all_reduce")
    assert report.validated  # the parser's flag: some rows were checked
    found = judge_nccl(report, H100, "single_node")
    assert _verdict(found) == "error" and any("2 message size(s)" in f.reason for f in found)


def test_unvalidated_collective_judged_on_correctness_only_is_an_error(nfx: Fx) -> None:
    """all_gather etc. have no busbw floor: with #wrong N/A nothing at all was judged."""
    runs = nccl.parse_all(_wrong_to_na(nfx(FIVE).read_text()))
    assert [_verdict(judge_nccl(r, H100, "single_node")) for r in runs] == ["error"] * 5


# ---------------------------------------------------------------- nccl-tests: who took part


def test_single_node_run_on_fewer_ranks_than_gpus_is_an_error(nfx: Fx) -> None:
    """A collective over 2 of the 8 GPUs says nothing of the other 6 (judged on correctness only, it passed)."""
    text = "".join(ln for ln in nfx(FIVE).read_text().splitlines(keepends=True)
                   if not re.match(r"#\s+Rank\s+[2-7]\s", ln))
    runs = nccl.parse_all(text)
    assert all(r.ranks == 2 for r in runs)
    found = judge_nccl(runs[1], H100, "single_node")  # all_gather
    assert _verdict(found) == "error" and "2 rank(s) took part" in found[0].reason


def test_run_judged_as_multi_node_whose_ranks_ran_on_one_host_is_an_error(nfx: Fx) -> None:
    """A single-node log handed in as a multi-node run clears the lower multi-node floor (368 < 482)."""
    report = nccl.parse_all(nfx(FIVE).read_text())[0]
    found = judge_nccl(report, H100, "multi_node")
    assert _verdict(found) == "error" and any("every rank ran on cnode3-003" in f.reason for f in found)


def test_real_captures_that_were_whole_and_checked_still_pass(fx: Fx, nfx: Fx) -> None:
    assert _verdict(judge_nccl(nccl.parse(fx(SINGLE).read_text(), "all_reduce"), H100)) == "pass"
    assert [_verdict(judge_nccl(r, H100, "single_node")) for r in nccl.parse_all(nfx(FIVE).read_text())] == [
        "pass"] * 5


# ---------------------------------------------------------------- result.json: re-judged facts

IBSTAT_PASS = "infiniband/gpud_ibstat.47.0.h100.all.active.0.txt"


def _one_check_result(check: CheckResult) -> RunResult:
    return RunResult("h100-sxm-8", "quick", "node", "t0", "t1", check.verdict, [check], "0.1.0")


def test_rejudged_check_whose_tool_exited_non_zero_is_an_error_whatever_the_document_says(fx: Fx) -> None:
    """The node turns "exit 255 with healthy-looking output" into an error; a document that says pass
    for such a check (older burnin, hand-edited) passed when re-judged on the controller."""
    report = infiniband.parse(fx(IBSTAT_PASS).read_text())
    check = CheckResult("ib", "ib", "pass", tool="ibstat", exit_code=255, data=asdict(report))
    found = [f for f in rejudge(_one_check_result(check), H100).findings if f.name == "ib"]
    assert [(f.verdict, f.measured) for f in found] == [("error", 255)] and "exited 255" in found[0].reason
    healthy = CheckResult("ib", "ib", "pass", tool="ibstat", exit_code=0, data=asdict(report))
    assert [f.verdict for f in rejudge(_one_check_result(healthy), H100).findings if f.name.startswith("ib")] == [
        "pass"]


def test_stored_ib_report_listing_fewer_ports_than_announced_is_an_error(fx: Fx) -> None:
    report = infiniband.parse(fx(IBSTAT_PASS).read_text())
    assert report.cas[0].ports_announced == 1
    short = replace(report, cas=[replace(report.cas[0], ports=[]), *report.cas[1:]])
    extra = replace(H100, ib=replace(H100.ib, ports_min=7))
    assert judge_ib(report, extra)[0].verdict == "pass"
    found = judge_ib(short, extra)[0]
    assert found.verdict == "error" and "announces 1 port(s), lists 0" in found.reason

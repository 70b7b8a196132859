"""nccl-tests logs holding several collectives back to back, and runs cut short.

Fixture: tests/fixtures/nccl (xxrjun/nccl-tests-cluster, H100x8, nccl-tests 2.17.8).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from burnin import profiles
from burnin.cli import parse_file
from burnin.judge import judge_nccl
from burnin.parsers import ParseError, nccl

Fx = Callable[[str], Path]
FIVE = "nccl/xxrjun_nccl_N1_G8_cnode3-003_h100x8_5-collectives.log"
H100 = profiles.load("h100-sxm-8")


def test_one_result_per_collective_never_merged(nfx: Fx) -> None:
    runs = nccl.parse_all(nfx(FIVE).read_text())
    assert [r.collective for r in runs] == ["all_reduce", "all_gather", "reduce_scatter", "alltoall", "sendrecv"]
    assert [r.avg_busbw for r in runs] == [437.722, 327.443, 330.946, 313.261, 279.957]
    assert all(len(r.rows) == 10 and r.out_of_bounds == 0 and r.complete and r.concluded for r in runs)
    assert [r.peak_busbw for r in runs] == [482.04, 365.23, 365.30, 347.83, 366.96]
    assert {r.rows[0].redop for r in runs} == {"sum", "none"} and runs[1].rows[0].count == 524288
    assert runs[3].rows[0].wrong_ip is None and runs[3].rows[0].wrong_oop == 0  # alltoall in-place: N/A
    assert all(r.ranks == 8 and r.hosts == ["cnode3-003"] for r in runs)


def test_single_parse_refuses_a_log_of_several(nfx: Fx) -> None:
    with pytest.raises(ParseError, match="holds 5 collective runs"):
        nccl.parse(nfx(FIVE).read_text())
    with pytest.raises(ParseError, match="expected all_reduce output, but the log holds all_gather"):
        nccl.parse_all(nfx(FIVE).read_text(), "all_reduce")


def _section(text: str, name: str) -> str:
    start = text.index(f"# Collective test starting: {name}_perf\n")
    end = f"# Collective test concluded: {name}_perf\n#\n"
    return text[text.rindex("# nccl-tests version", 0, start): text.index(end) + len(end)]


def test_a_framed_run_reads_alone_with_its_name(nfx: Fx) -> None:
    text = _section(nfx(FIVE).read_text(), "all_gather")
    r = nccl.parse(text, "all_gather")
    assert (r.collective, r.avg_busbw, r.complete) == ("all_gather", 327.443, True)
    with pytest.raises(ParseError, match="expected all_reduce"):
        nccl.parse(text, "all_reduce")


def test_cut_before_avg_bus_bandwidth_is_an_error_for_that_collective(nfx: Fx) -> None:
    text = nfx(FIVE).read_text()
    cut = text[: text.index("# Avg bus bandwidth    : 279.957")]
    runs = nccl.parse_all(cut)
    assert [r.complete for r in runs] == [True, True, True, True, False]
    (f,) = judge_nccl(runs[-1], H100, "single_node")
    assert f.verdict == "error" and "did not finish" in f.reason


def test_started_but_never_concluded_is_incomplete(nfx: Fx) -> None:
    text = nfx(FIVE).read_text()
    cut = text[: text.index("# Collective test concluded: all_reduce")]
    r = nccl.parse(cut)
    assert r.avg_busbw == 437.722 and r.concluded is False and r.complete is False
    assert judge_nccl(r, H100, "single_node")[0].verdict == "error"


def test_rows_after_the_summary_are_an_error(nfx: Fx) -> None:
    text = _section(nfx(FIVE).read_text(), "all_reduce")
    row = "  4294967296     536870912    double     sum      -1  15668.5  274.12  479.70       0  15665.5  274.17  479.79       0\n"
    with pytest.raises(ParseError, match="after the run's summary"):
        nccl.parse(text + row)


def test_burnin_parse_prints_one_document_per_collective(nfx: Fx) -> None:
    code, doc = parse_file("nccl", nfx(FIVE))
    assert code == 0
    assert [d["collective"] for d in doc["collectives"]] == ["all_reduce", "all_gather", "reduce_scatter",
                                                              "alltoall", "sendrecv"]
    json.dumps(doc)


def test_validation_off_is_recorded(fx: Fx, nfx: Fx) -> None:
    off = nccl.parse(fx("nccl/h100x8_2node-16gpu_all_reduce_perf_ndr-ib_DEGRADED_issue290.txt").read_text())
    assert off.wrong_results == 0 and off.validated is False  # every #wrong is N/A: nothing was checked
    # alltoall prints N/A only in place (not applicable there): still validated
    assert all(r.validated for r in nccl.parse_all(nfx(FIVE).read_text()))

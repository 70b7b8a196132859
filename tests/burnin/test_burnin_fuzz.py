"""Fuzz every parser: arbitrary or mangled input never crashes and never reads as healthy.

"Healthy" is what the judge would pass: a DCGM report that passed, an NCCL run that
completed, an nvidia-smi report with GPUs. Garbage may parse only into something the
judge refuses, or raise ParseError — nothing else.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from burnin import profiles
from burnin.judge import judge_dcgm, judge_ib, judge_nccl
from burnin.parsers import ParseError, dcgm, infiniband, nccl, nvidia_smi, xid

FUZZ = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
H100 = profiles.load("h100-sxm-8")

junk = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=400)
tool_like = st.lists(
    st.sampled_from([
        "| Persistence Mode          | Pass |", "|-----  Deployment  --------+-----|", "{", "}", "[",
        '"DCGM GPU Diagnostic"', '"status" : "Pass"', '"tests": [', "CA 'mlx5_0'", "\tPort 1:",
        "\t\tState: Active", "\t\tRate: 400", "# Avg bus bandwidth    : 400.1",
        "   1073741824   268435456  float  sum  -1  4038.8  265.85  465.25  0  4043.6  265.54  464.70  0",
        "NVRM: Xid (PCI:0000:19:00): 48, pid=1, name=x, DBE", "GPU 00000000:18:00.0",
        "    Product Name : NVIDIA H100 80GB HBM3", "Attached GPUs : 8", "<nvidia_smi_log>", "0: ",
    ]),
    max_size=30,
).map("\n".join)


def _mangle(text: str, data: st.DataObject) -> str:
    """Cut, splice or corrupt a real capture at a random place."""
    i = data.draw(st.integers(0, len(text)))
    j = data.draw(st.integers(i, len(text)))
    how = data.draw(st.sampled_from(["cut", "drop", "dup", "noise"]))
    if how == "cut":
        return text[:i]
    if how == "drop":
        return text[:i] + text[j:]
    if how == "dup":
        return text[:j] + text[i:j] + text[j:]
    return text[:i] + data.draw(junk) + text[j:]


def _dcgm_ok(text: str) -> None:
    try:
        r = dcgm.parse(text)
    except ParseError:
        return
    if r.passed:  # a pass needs at least one test DCGM itself called Pass, none failing
        assert any(t.result == "pass" for t in r.tests)
        assert all(t.result in ("pass", "skip") for t in r.tests)


def _nccl_ok(text: str) -> None:
    try:
        r = nccl.parse(text, "all_reduce")
    except ParseError:
        return
    verdicts = {f.verdict for f in judge_nccl(r, H100, "single_node")}
    if "pass" in verdicts:
        assert r.complete and r.wrong_results == 0 and r.rows


def _ib_ok(text: str) -> None:
    try:
        r = infiniband.parse(text)
    except ParseError:
        return
    if judge_ib(r, H100)[0].verdict == "pass":
        assert sum(p.state == "Active" for c in r.cas for p in c.ports) >= 8


def _xid_ok(text: str) -> None:
    try:
        r = xid.parse(text)
    except ParseError:
        return
    for e in r.events:
        assert e.action and e.bucket


def _smi_ok(text: str) -> None:
    try:
        r = nvidia_smi.parse(text)
    except ParseError:
        return
    assert r.gpus


CHECKERS: dict[str, tuple[Callable[[str], None], str]] = {
    "dcgm-text": (_dcgm_ok, "dcgm/h200x8_dcgmi-diag-r1_dcgm-3.1.8_persistence-mode-FAIL.txt"),
    "dcgm-json": (_dcgm_ok, "dcgm/virtualclient/DCGMIDiag_r3_results.json"),
    "nccl": (_nccl_ok, "nccl/h100x8_all_reduce_perf_single-node_nvls_issue290.txt"),
    "ibstat": (_ib_ok, "infiniband/gpud_ibstat.47.0.h100.all.active.0.txt"),
    "xid": (_xid_ok, "xid/gpud_tail_dmesg.0.log"),
    "smi-text": (_smi_ok, "nvidia-smi/thamada_H100SXMx8_nvidia-smi-q.txt"),
    "smi-xml": (_smi_ok, "nvidia-smi/telegraf_a100-sxm4-v12_nvidia-smi-q-x.xml"),
}


@pytest.mark.parametrize("name", sorted(CHECKERS))
@FUZZ
@given(text=st.one_of(junk, tool_like))
def test_garbage_never_crashes_or_passes(name: str, text: str) -> None:
    CHECKERS[name][0](text)


@pytest.mark.parametrize("name", sorted(CHECKERS))
@FUZZ
@given(data=st.data())
def test_mangled_captures_never_crash(name: str, data: st.DataObject, fixtures_dir: Path) -> None:
    check, rel = CHECKERS[name]
    check(_mangle((fixtures_dir / rel).read_text(), data))


@FUZZ
@given(text=st.one_of(junk, tool_like))
def test_garbage_is_never_a_dcgm_pass(text: str) -> None:
    try:
        r = dcgm.parse(text)
    except ParseError:
        return
    verdicts = {f.verdict for f in judge_dcgm(r, H100)}
    if verdicts == {"pass"}:
        assert r.passed and any(t.result == "pass" for t in r.tests)


def test_the_fuzz_checks_can_fail() -> None:
    """The property checks above must be able to catch a parser that lies."""
    lying = nccl.NcclReport("all_reduce", 8, [], 500.0, 500.0, 3, [], 0, True, [])
    assert judge_nccl(lying, H100, "single_node")[0].verdict == "fail"
    with pytest.raises(AssertionError):
        _smi_ok_lie()


def _smi_ok_lie() -> None:
    r = nvidia_smi.SmiReport("text", None, None, [])
    assert r.gpus

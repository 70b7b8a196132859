"""A run's kernel log cut-off: kernel_xid judges only the lines from then on, and says what it left out.

A real kernel log keeps an Xid after ``nvidia-smi -r``; a repair's re-test records a cut-off (the node's
clock before the reset) so the repaired Xid does not fail it, while an Xid logged after it still does. The
log is a real capture (gpud's tail of dmesg in ``--time-format iso``: Xid 48 and 63 at 12:02:03.47 and .50,
then nine Xid 94 lines).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from acceptance.judge import Request, binding_findings
from burnin import kernel_window, profiles, runner
from burnin.cli import judge_file, run_node
from burnin.nvml import FakeNvml, GpuInventory, healthy_gpu
from burnin.parsers import ParseError, xid
from burnin.result import RunResult, load_result
from burnin.tools import ToolRunner
from tests.burnin.test_burnin_run import _good_stress

Fx = Callable[[str], Path]
FakeBin = Callable[..., Path]
H100 = profiles.load("h100-sxm-8")
AFTER_ALL = "2024-11-15T12:02:04,000000000+00:00"  # after every Xid line of the capture
BETWEEN = "2024-11-15T12:02:03.5+00:00"  # after Xid 48 and 63, before the first Xid 94
BEFORE = "2024-11-15T12:02:03.470068+00:00"  # Xid 48's own time: a line at the cut-off is judged


def _run(tmp_path: Path, env: dict[str, str], since: str | None) -> RunResult:
    out = tmp_path / "out"
    inv = GpuInventory("nvml", "565.57.01", "12.7", "12.565.57.01",
                       [healthy_gpu(i, "NVIDIA H100 80GB HBM3") for i in range(8)])
    return runner.run(H100, "quick", out, nvml=FakeNvml(inv), stress=_good_stress,
                      tools=ToolRunner(out, env=env), host="node005", kernel_log_since=since)


def _xid_check(result: RunResult) -> dict[str, object]:
    c = next(c for c in result.checks if c.name == "kernel_xid")
    return {"verdict": c.verdict, "reason": c.reason, "measured": c.measured, "argv": c.argv,
            "findings": [(f.name, f.verdict) for f in c.findings], "notes": [f.reason for f in c.findings]}


def test_a_cutoff_judges_only_later_xid_lines_and_records_what_it_ignored(
        fx: Fx, healthy_tools: Path, fake_bin: FakeBin, fake_path: dict[str, str], tmp_path: Path) -> None:
    fake_bin("dmesg", fx("xid/gpud_tail_dmesg.0.log"))
    whole = _xid_check(_run(tmp_path / "whole", fake_path, None))
    assert whole["verdict"] == "fail" and whole["argv"] == ["dmesg"]  # no cut-off: the whole log (as before)
    assert whole["measured"] == {"xids": [48, 63, 94], "events": 11, "window": "whole log",  # type: ignore[comparison-overlap]
                                 "ignored_before_cutoff": 0, "ignored_xids": []}

    after = _run(tmp_path / "after", fake_path, AFTER_ALL)
    got = _xid_check(after)
    assert got["verdict"] == "pass" and got["argv"] == ["dmesg", "--time-format", "iso"]
    assert got["measured"] == {"xids": [], "events": 0, "window": f"since {AFTER_ALL}",  # type: ignore[comparison-overlap]
                               "ignored_before_cutoff": 11, "ignored_xids": [48, 63, 94]}
    finding = next(f for f in next(c for c in after.checks if c.name == "kernel_xid").findings)
    assert "since 2024-11-15T12:02:04" in finding.reason and "11 older Xid line(s) ignored" in finding.reason
    # The controller re-judges the stored document with the window it records, and agrees.
    code, judged = judge_file(tmp_path / "after" / "out" / "result.json", "h100-sxm-8")
    assert code == 0 and judged["passed"] is True, judged

    between = _xid_check(_run(tmp_path / "between", fake_path, BETWEEN))
    assert between["verdict"] == "pass"  # what is left is Xid 94 (NVIDIA: restart the application)
    assert between["measured"]["ignored_xids"] == [48, 63] and between["measured"]["xids"] == [94]  # type: ignore[index]
    assert between["notes"] == ["9 harmless Xid event(s); judged the kernel log since 2024-11-15T12:02:03.5+00:00 "
                                "(the run's cut-off); 2 older Xid line(s) ignored; Xid 48, 63"]
    before = _xid_check(_run(tmp_path / "before", fake_path, BEFORE))
    assert before["verdict"] == "fail"  # an Xid logged from the cut-off on still fails the node
    assert before["measured"]["ignored_before_cutoff"] == 0 and "Xid 48" in str(before["reason"])  # type: ignore[index]


def test_an_xid_line_whose_time_cannot_be_read_is_judged_and_an_error(
        healthy_tools: Path, fake_bin: FakeBin, fake_path: dict[str, str], tmp_path: Path) -> None:
    log = tmp_path / "plain.log"  # a dmesg that ignored --time-format: seconds since boot, not a time
    log.write_text("[    4.112000] nvidia: loading out-of-tree module taints kernel.\n"
                   "[   30.000000] NVRM: Xid (PCI:0000:18:00): 13, pid='<unknown>', name=<unknown>, Graphics "
                   "SM Warp Exception\n")
    fake_bin("dmesg", log)
    got = _xid_check(_run(tmp_path, fake_path, AFTER_ALL))
    assert got["verdict"] == "error" and ("kernel_xid.window", "error") in got["findings"]  # type: ignore[operator]
    assert "cannot be placed against the cut-off" in str(got["reason"])
    report = xid.parse(log.read_text())
    assert kernel_window.split(report, "2024-11-15T12:02:04").error.startswith("the run's kernel log cut-off")


def test_the_cutoff_is_checked_on_the_node_and_bound_by_the_controller(
        fx: Fx, healthy_tools: Path, fake_bin: FakeBin, fake_path: dict[str, str], tmp_path: Path) -> None:
    code, why = run_node("h100-sxm-8", "quick", tmp_path / "x", kernel_log_since="yesterday", progress=False)
    assert code == 2 and "not an ISO 8601 time" in str(why)
    fake_bin("dmesg", fx("xid/gpud_tail_dmesg.0.log"))
    _run(tmp_path, fake_path, AFTER_ALL)
    doc = json.loads((tmp_path / "out" / "result.json").read_text())
    result = load_result(json.dumps(doc))

    def window(want: str | None) -> list[tuple[str, object]]:
        return [(f.verdict, f.measured) for f in binding_findings(result, Request("r", "n", "quick", None, want))
                if f.check == "result.kernel_log_since"]

    assert window(AFTER_ALL) == [("pass", AFTER_ALL)]
    assert window(None)[0][0] == "error"  # the run asked for the whole log: a narrower window hides Xids
    assert window(BETWEEN)[0][0] == "error"


def _judged_xids(text: str, since: str) -> tuple[set[int], str]:
    w = kernel_window.split(xid.parse(text), since)
    return {e.xid for e in w.judged}, w.error


def test_mutated_captures_never_move_a_judged_xid_behind_the_cutoff(fx: Fx) -> None:
    """The real capture with the cut-off at Xid 48's own time: truncated, with garbage appended, or with a
    line's time edited, Xid 48 (a fatal one) is still judged, and an unreadable time is an error."""
    text = fx("xid/gpud_tail_dmesg.0.log").read_text()
    lines = text.splitlines(keepends=True)
    at = next(i for i, line in enumerate(lines) if "Xid" in line and ": 48," in line)
    assert _judged_xids(text, BEFORE)[0] >= {48, 63, 94}
    for end in range(at + 1, len(lines) + 1):  # every cut that keeps the Xid 48 line
        assert 48 in _judged_xids("".join(lines[:end]), BEFORE)[0], end
    for tail in ("garbage\n", "2024-11-15T12:02:05,000000+00:00 NVRM: ok\n", "Xid\n", "\xff\n"):
        assert 48 in _judged_xids(text + tail, BEFORE)[0], tail
    with pytest.raises(ParseError, match="NUL"):  # not a text log: an error, never a window
        xid.parse(text + "\x00\n")
    stamp = lines[at].split(" ", 1)[0]
    edited = "".join([*lines[:at], lines[at].replace(stamp, "not-a-time", 1), *lines[at + 1:]])
    judged, error = _judged_xids(edited, BEFORE)
    assert 48 in judged and "no readable wall-clock time" in error, (judged, error)

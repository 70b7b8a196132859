"""``dcgmi diag`` text tables as DCGM 2.x, 3.x and 4.x really print them (tests/fixtures/dcgm).

Per-GPU results over several rows, Warning/Info/Error rows under their test, separators
drawn with ``+``, the level read off the categories, and every way a table can be cut
short or contradict itself, which must never judge as a pass.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from burnin import profiles
from burnin.judge import judge_dcgm
from burnin.parsers import ParseError, dcgm
from burnin.result import worst

Fx = Callable[[str], Path]
H200 = profiles.load("h200-sxm-8")
R1_FAIL = "dcgm/h200x8_dcgmi-diag-r1_dcgm-3.1.8_persistence-mode-FAIL.txt"
A10G = "dcgm/a10g-x4_dcgmi-diag-r3_dcgm-3.3.9_targeted-power-FAIL_repo-unidentified.txt"


def verdict(text: str, level: str = "quick") -> str:
    """parse + the burn-in judge, as ``burnin run`` would reach it; a ParseError is an error."""
    try:
        report = dcgm.parse(text)
    except ParseError:
        return "error"
    return worst([f.verdict for f in judge_dcgm(report, H200, level)])


def test_no_line_cut_of_a_failing_r1_capture_passes(fx: Fx) -> None:
    # Before: 4 of the 44 cuts (tables ending after Denylist .. Permissions) judged pass.
    lines = fx(R1_FAIL).read_text().splitlines(keepends=True)
    assert len(lines) + 1 == 44
    passing = [k for k in range(len(lines) + 1) if verdict("".join(lines[:k])) == "pass"]
    assert passing == []


def test_cut_before_the_closing_border_is_an_error(fx: Fx) -> None:
    text = fx(R1_FAIL).read_text()
    with pytest.raises(ParseError, match="no closing border"):
        dcgm.parse(text[: text.index("| Environment Variables")])


def test_dcgm3_per_gpu_rows_warning_and_info_belong_to_their_test(nfx: Fx) -> None:
    r = dcgm.parse(nfx(A10G).read_text())
    assert (r.format, r.dcgm_version, r.driver_version) == ("text", "3.3.9", "570.195.03")
    assert [t.category for t in r.tests if t.name.startswith("Targeted")] == ["Stress", "Stress"]  # '+' separators
    tp = next(t for t in r.tests if t.name == "Targeted Power")
    assert tp.result == "fail" and tp.gpus == {"0": "pass", "2": "pass", "3": "pass", "1": "fail"}
    assert tp.details.startswith("GPU 1 Max power of 224.1 did not reach desired power minimum")
    assert "GPU 3 max power: 225.6 W" in tp.details  # the Info rows, after the warning
    assert next(t for t in r.tests if t.name == "Memory Bandwidth").result == "pass"
    assert r.failed_gpus == [1] and not r.passed
    # no command line in this capture: the level comes from the categories, a lower bound
    assert (r.level, r.level_inferred, r.level_basis) == (3, True, "content")
    assert "Stress" in r.level_evidence
    assert verdict(nfx(A10G).read_text(), "full") == "fail"


def test_dcgm4_entity_rows_under_their_test(nfx: Fx) -> None:
    r = dcgm.parse(nfx("dcgm/b200x8_dcgmi-diag-r2_dcgm-4.4.1_pcie-FAIL_issue253.txt").read_text())
    assert r.dcgm_version == "4.4.1" and [t.name for t in r.tests] == ["software", "memory", "pcie"]
    pcie = r.tests[-1]
    assert pcie.result == "fail" and pcie.gpus == {str(i): "pass" for i in range(8)}
    assert "couldn't be parsed" in pcie.details
    assert r.tests[0].gpus == {str(i): "pass" for i in range(8)} and r.tests[0].result == "pass"
    assert (r.level, r.level_inferred) == (2, True)


def test_dcgm4_r3_with_every_plugin_skipped_is_not_passed(nfx: Fx) -> None:
    r = dcgm.parse(nfx("dcgm/gb10_dcgmi-diag-r3_dcgm-4.4.2_all-skip_repo-unidentified_TOP-BORDER-MISSING-IN-SOURCE.txt")
                   .read_text())
    assert (r.level, r.level_basis) == (3, "content")
    assert r.skipped_required == ["memory", "diagnostic", "pcie", "memory_bandwidth", "targeted_stress",
                                  "targeted_power"]
    assert r.passed is False


def test_dcgm2_r4_from_the_command_line(nfx: Fx) -> None:
    r = dcgm.parse(nfx("dcgm/gcm_dcgmi-diag-r4_dcgm-2.x_docstring.txt").read_text())
    assert (r.level, r.level_inferred, r.level_basis) == (4, False, "command")
    assert len(r.tests) == 18 and r.passed and r.tests[0].name == "Blacklist"


def test_dcgm4_capture_cut_in_its_source_is_an_error(nfx: Fx) -> None:
    with pytest.raises(ParseError, match="no closing border"):
        dcgm.parse(nfx("dcgm/l40s-x4_dcgmi-diag-r2_dcgm-4.2.3_pcie-FAIL_issue253_CUT-IN-SOURCE.txt").read_text())


def test_error_row_fails_a_test_whose_cell_says_pass(fx: Fx) -> None:
    text = fx(R1_FAIL).read_text().replace("| Persistence Mode          | Fail ", "| Persistence Mode          | Pass ")
    r = dcgm.parse(text)
    pm = next(t for t in r.tests if t.name == "Persistence Mode")
    assert pm.result == "fail" and "currently disabled" in pm.details
    assert verdict(text) == "fail"


def test_warning_row_under_a_passing_test_is_not_a_pass(nfx: Fx) -> None:
    text = nfx(A10G).read_text().replace("| Pass - GPUs: 0, 2, 3    ", "| Pass - All              ").replace(
        "|                           | Fail - GPU: 1                                  |\n", "")
    tp = next(t for t in dcgm.parse(text).tests if t.name == "Targeted Power")
    assert tp.result == "warn"
    assert verdict(text, "full") == "fail"


def test_dcgmi_error_after_a_partial_table_quotes_dcgmi(nfx: Fx) -> None:
    text = nfx(A10G).read_text()
    cut = text[: text.index("| Targeted Power")]
    err = "Error: Unable to complete diagnostic for group 2147483647. Return: (-15) : Timeout\n"
    with pytest.raises(ParseError, match=r"dcgmi reported: Error: Unable to complete diagnostic .*Timeout"):
        dcgm.parse(cut + err)


@pytest.mark.parametrize(
    ("old", "new", "why"),
    [
        ("| Denylist                  | Pass                                           |\n", "",
         "lacks test"),  # a deleted row: r1 runs Denylist
        ("| Inforom                   | Pass                                           |\n",
         "| Inforom                   | Pass                                           |\nnoise\n", "truncated or garbled"),
        ("| Inforom                   | Pass                                           |\n",
         "|                           | something else                                 |\n", "not understood"),
        ("| Inforom                   | Pass                                           |",
         "| Inforom                   | Pass                                          |", "width"),
        ("$ dcgmi diag -r 1\n", "$ dcgmi diag -r 1\n", "after the table"),
    ],
)
def test_unreadable_rows_inside_the_table_are_errors(fx: Fx, old: str, new: str, why: str) -> None:
    text = fx(R1_FAIL).read_text()
    assert old in text
    text = text.replace(old, new)
    if why == "after the table":
        text += "Successfully ran diagnostic for group.\n"
    with pytest.raises(ParseError, match=why):
        dcgm.parse(text)


def test_command_line_contradicting_the_categories_is_an_error(nfx: Fx) -> None:
    with pytest.raises(ParseError, match="contradictory"):
        dcgm.parse("$ dcgmi diag -r 1\n" + nfx(A10G).read_text())


def test_r3_missing_a_stress_test_is_an_error(nfx: Fx) -> None:
    text = nfx(A10G).read_text().replace("| Memory Bandwidth          | Pass - All                                     |\n", "")
    with pytest.raises(ParseError, match=r"lacks test.*memory bandwidth"):
        dcgm.parse(text)

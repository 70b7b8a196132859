"""The read-back's judgement of a drive's own Sanitize Status log, on real nvme-cli output and mutations of it.

Real captures (tests/fixtures/nvme, provenance in tests/fixtures/SOURCES.md) are sanitizes in progress and a
truncated completed log; a completed, successful log is derived from them by editing SPROG/SSTAT, as said
where it is done. Every cut, every unknown line, every contradiction is refused (not verified), never passed.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from lifecycle.lab.gputools import nvme as fake_nvme
from lifecycle.workflows import sanitize_log as sl
from lifecycle.workflows.erase_readback import judge_log

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "nvme"
IN_PROGRESS_2X = (FIXTURES / "nvme-cli-3027_sanitize-log_block-erase-in-progress.txt").read_text()
IN_PROGRESS_OLD = (FIXTURES / "nvme-cli-1784_sanitize-log_crypto-erase-in-progress.txt").read_text()
COMPLETED_EXCERPT = (FIXTURES / "nvme-cli-752_sanitize-log_completed-excerpt.txt").read_text()
LIST_1_12 = (FIXTURES / "nvme-cli-752_nvme-list_1.12.txt").read_text()


def completed(text: str, sstat: str = "0x101", sprog: str = "65535") -> str:
    """A real capture edited to what the drive says once the sanitize has ended (see the module docstring)."""
    return (text.replace("(SPROG) :  655\n", f"(SPROG) :  {sprog}\n")
            .replace("(SSTAT) :  0x2\n", f"(SSTAT) :  {sstat}\n"))


def test_real_captures_parse_to_their_fields() -> None:
    assert sl.parse_sanitize_log(IN_PROGRESS_2X) == sl.SanitizeLog(655, 0x2, 0x2)
    assert sl.parse_sanitize_log(IN_PROGRESS_OLD) == sl.SanitizeLog(655, 0x2, 0x4)
    [row] = sl.parse_list(LIST_1_12)
    assert row == sl.ListedDrive("/dev/nvme0n1", "/dev/nvme0", "BTNH936500NS512A", "INTEL SSDPEKNW512G8")


@pytest.mark.parametrize(("text", "verified", "method", "words"), [
    (IN_PROGRESS_2X, False, None, "still in progress"),
    (IN_PROGRESS_OLD, False, None, "still in progress"),
    (COMPLETED_EXCERPT, False, None, "missing SCDW10"),  # real, truncated: no method, so no verdict
    (completed(IN_PROGRESS_2X), True, "block-erase", "completed successfully: block-erase, Global Data Erased"),
    (completed(IN_PROGRESS_OLD), True, "crypto-erase", "crypto-erase"),
    (completed(IN_PROGRESS_2X, sstat="0x104"), True, "block-erase", "with deallocation"),
    (completed(IN_PROGRESS_2X, sstat="0"), False, None, "never been sanitized"),
    (completed(IN_PROGRESS_2X, sstat="0x100"), False, None, "never been sanitized"),
    (completed(IN_PROGRESS_2X, sstat="0x103"), False, None, "failed"),
    (completed(IN_PROGRESS_2X, sstat="0x105"), False, None, "reserved sanitize status"),
    (completed(IN_PROGRESS_2X, sstat="0x1"), False, None, "written to since the last sanitize"),
    (completed(IN_PROGRESS_2X, sprog="655"), False, None, "contradictory"),
    (completed(IN_PROGRESS_2X).replace("(SCDW10) :  0x2", "(SCDW10) :  0x1"), False, None, "was no erase"),
    (completed(IN_PROGRESS_2X).replace("(SCDW10) :  0x2", "(SCDW10) :  0"), False, None, "was no erase"),
    (completed(IN_PROGRESS_2X).replace("(SSTAT) :  0x101", "(SSTAT) :  257"), False, None, "not a hexadecimal"),
    (completed(IN_PROGRESS_2X).replace("(SPROG) :  65535", "(SPROG) :  70000"), False, None, "16-bit"),
    (completed(IN_PROGRESS_2X) + "Sanitize Status                        (SSTAT) :  0x101\n", False, None,
     "SSTAT given twice"),
    (completed(IN_PROGRESS_2X) + "NVMe status: Invalid Log Page\n", False, None, "not 'field : value'"),
    (completed(IN_PROGRESS_2X) + "Sanitize Foo (SFOO) :  1\n", False, None, "unknown field"),
    (completed(IN_PROGRESS_2X) + "garbage\n", False, None, "not 'field : value'"),
    (completed(IN_PROGRESS_2X).replace("\n", "\x00\n", 1), False, None, "NUL"),
    ("", False, None, "missing SPROG"),
])
def test_the_judgement_table(text: str, verified: bool, method: str | None, words: str) -> None:
    got = sl.judge_text(text)
    assert (got.verified, got.method) == (verified, method) and words in got.reason, got


def test_every_cut_of_a_completed_log_before_scdw10_is_refused() -> None:
    text = completed(IN_PROGRESS_2X)
    whole = text.index("0x2\n", text.index("(SCDW10)")) + len("0x2")  # the end of SCDW10's value
    assert [n for n in range(whole) if sl.judge_text(text[:n]).verified] == []
    assert sl.judge_text(text[:whole]).verified and sl.judge_text(text).verified


@pytest.mark.parametrize(("text", "words"), [
    ("", "no header and rule"),
    (LIST_1_12.splitlines()[0] + "\n", "no header and rule"),
    (LIST_1_12.replace("/dev/nvme0n1", "/dev/sda     "), "not a namespace row"),
    (LIST_1_12.replace("Node ", "Path "), "no Node column"),
])
def test_nvme_list_that_cannot_be_read_is_refused(text: str, words: str) -> None:
    with pytest.raises(sl.ParseError, match=words):
        sl.parse_list(text)


def test_a_serial_listed_by_two_controllers_is_contradictory() -> None:
    rows = LIST_1_12 + LIST_1_12.splitlines()[2].replace("/dev/nvme0n1", "/dev/nvme1n1") + "\n"
    assert "contradictory" in str(sl.find(sl.parse_list(rows), "BTNH936500NS512A"))
    assert "no NVMe drive" in str(sl.find(sl.parse_list(LIST_1_12), "OTHER"))


def _answer(code: int, out: str, err: str = "") -> dict[str, object]:
    return {"exit_code": code, "stdout": out, "stderr": err}


def _back(list_out: str, log: dict[str, object] | None) -> dict[str, object]:
    return {"ok": True, "reads": {"list": _answer(0, list_out), "logs": {"/dev/nvme0": log} if log else {}}}


@pytest.mark.parametrize(("back", "protocol", "verified", "words"), [
    (_back(LIST_1_12, _answer(0, completed(IN_PROGRESS_2X))), "NVMe", True, "block-erase"),
    ({"ok": False, "reason": "the maintenance boot failed: no phone-home"}, "NVMe", False, "no phone-home"),
    ({}, "NVMe", False, "no read-back"),
    (_back(LIST_1_12, _answer(0, completed(IN_PROGRESS_2X))), "SATA", False, "no NVMe Sanitize Status log"),
    ({"ok": True, "reads": {"list": _answer(127, "", "nvme: command not found")}}, "NVMe", False,
     "nvme list failed (exit 127): nvme: command not found"),
    (_back(LIST_1_12, _answer(1, "", "Invalid Log Page")), "NVMe", False, "sanitize-log /dev/nvme0 failed"),
    (_back(LIST_1_12, None), "NVMe", False, "failed (exit None)"),
    (_back("garbage\n", None), "NVMe", False, "unreadable nvme list"),
])
def test_a_drive_is_verified_only_on_its_own_log(back: dict[str, object], protocol: str, verified: bool,
                                                 words: str) -> None:
    got = judge_log("BTNH936500NS512A", protocol, back)
    assert got["verified"] is verified and words in got["reason"], got


def test_the_lab_fake_prints_what_the_parser_reads(tmp_path: Path) -> None:
    """The lab's nvme is judged by the same parser: never sanitized until the BMC's erase reaches the drive."""
    fake_nvme.install_drives(tmp_path, [fake_nvme.Drive("EMUNVME0000", "SAMSUNG MZQL23T8HCLS-00A07", 3_840_755_982_336),
                                        fake_nvme.Drive("EMUNVME0001", "SAMSUNG MZQL23T8HCLS-00A07", 3_840_755_982_336)])
    listed, code = fake_nvme.main(["list"], tmp_path)
    assert code == 0 and [d.serial for d in sl.parse_list(listed)] == ["EMUNVME0000", "EMUNVME0001"]
    before, _ = fake_nvme.main(["sanitize-log", "/dev/nvme1"], tmp_path)
    assert "never been sanitized" in sl.judge_text(before).reason
    assert fake_nvme.record_sanitize(tmp_path, "EMUNVME0001", ok=True)
    after, _ = fake_nvme.main(["sanitize-log", "/dev/nvme1"], tmp_path)
    assert sl.judge_text(after).verified and not sl.judge_text(fake_nvme.main(["sanitize-log", "/dev/nvme0"],
                                                                               tmp_path)[0]).verified
    assert fake_nvme.record_sanitize(tmp_path, "EMUNVME0000", ok=False)
    assert "failed" in sl.judge_text(fake_nvme.main(["sanitize-log", "/dev/nvme0"], tmp_path)[0]).reason
    assert fake_nvme.main(["sanitize-log", "/dev/nvme7"], tmp_path)[1] != 0

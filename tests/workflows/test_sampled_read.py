"""The sampled-read verifier of an erase: its scripts run by busybox (as the maintenance image runs them) on a
sysfs-shaped tree and plain files, the parsing of what they print (cut and edited output too), the judgement
table, and how a drive's two verifiers (its sanitize log, its samples) combine."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from dataclasses import asdict
from pathlib import Path

import pytest

from lifecycle.lab.gputools import nvme as fake_nvme
from lifecycle.workflows import sampled_read as sr
from lifecycle.workflows.erase_readback import SampleAsk, judge_drive, sample_of
from lifecycle.workflows.repair_actions import Answer

BB_APPLETS = ("sh", "dd", "sha256sum", "wc", "cat", "tr", "rm", "printf", "echo")
MIB = 1 << 20


@pytest.fixture(scope="module")
def busybox_path(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A PATH of busybox applets only (busybox-static: scripts/bootstrap.sh), as the maintenance image has."""
    busybox = shutil.which("busybox")
    assert busybox, "busybox (busybox-static) is needed: scripts/bootstrap.sh installs it"
    bindir = tmp_path_factory.mktemp("bb")
    for applet in BB_APPLETS:
        (bindir / applet).symlink_to(busybox)
    return str(bindir)


def run(busybox_path: str, argv: list[str], **env: str) -> Answer:
    done = subprocess.run([str(Path(busybox_path) / "sh"), *argv[1:]], capture_output=True, text=True, timeout=30,
                          env={"PATH": busybox_path, **env}, check=False)
    return Answer(done.returncode, done.stdout, done.stderr)


def drive_tree(root: Path) -> tuple[Path, Path]:
    """A sysfs with an NVMe namespace (serial padded, as the kernel pads it), a SATA disk (serial in VPD page
    80h) and a loop device (no ``device``: not a drive), and the devices as plain files."""
    sys, dev = root / "sys", root / "dev"
    for name, size in (("nvme0n1", 2 * MIB), ("sda", MIB), ("loop0", MIB)):
        (sys / "block" / name).mkdir(parents=True)
        (sys / "block" / name / "size").write_text(f"{size // 512}\n")
        dev.mkdir(exist_ok=True)
        (dev / name).write_bytes(os.urandom(size))
    (sys / "block" / "nvme0n1" / "device").mkdir()
    (sys / "block" / "nvme0n1" / "device" / "serial").write_text("S64GNE0R812345      \n")
    (sys / "block" / "sda" / "device").mkdir()
    serial = b"  WD-WCC4N1234567"
    (sys / "block" / "sda" / "device" / "vpd_pg80").write_bytes(b"\x00\x80\x00" + bytes([len(serial)]) + serial)
    return sys, dev


def test_the_list_script_finds_each_drive_by_serial_in_sysfs(busybox_path: str, tmp_path: Path) -> None:
    sys, dev = drive_tree(tmp_path)
    got = run(busybox_path, ["sh", "-c", sr.LIST_SCRIPT], RACKLIFE_SYSFS=str(sys), RACKLIFE_DEV=str(dev))
    assert got.exit_code == 0, got.stderr
    assert sr.parse_drives(got.stdout) == [sr.BlockDevice(f"{dev}/nvme0n1", 2 * MIB, "S64GNE0R812345"),
                                           sr.BlockDevice(f"{dev}/sda", MIB, "WD-WCC4N1234567")]


def test_the_sample_script_reads_each_block_and_says_which_it_could_not(busybox_path: str, tmp_path: Path) -> None:
    data = os.urandom(MIB)
    disk = tmp_path / "disk"
    disk.write_bytes(data)
    offs = (0, 7, 255, 256, 100000)  # 256 and 100000 lie past the end of a 1 MiB drive
    got = run(busybox_path, sr.sample_argv(str(disk), offs))
    assert got.exit_code == 0, got.stderr
    hashes = sr.parse_blocks(got.stdout, offs)
    want = [hashlib.sha256(data[o * 4096:(o + 1) * 4096]).hexdigest() for o in offs[:3]]
    assert hashes == (*want, None, None)
    missing = run(busybox_path, sr.sample_argv(str(tmp_path / "gone"), (0, 1)))
    assert sr.parse_blocks(missing.stdout, (0, 1)) == (None, None)


def test_offsets_spread_over_the_whole_drive_and_follow_the_seed() -> None:
    size = 3_840_755_982_336
    offs = sr.offsets("seed-a", "S1", size, 64)
    blocks = size // sr.BLOCK_BYTES
    assert len(offs) == 64 and offs == tuple(sorted(offs))
    assert [o * 64 // blocks for o in offs] == list(range(64))  # one in each 64th of the drive
    assert sr.offsets("seed-a", "S1", size, 64) == offs
    assert sr.offsets("seed-b", "S1", size, 64) != offs and sr.offsets("seed-a", "S2", size, 64) != offs
    assert sr.offsets("s", "S1", 3 * 4096, 64) == (0, 1, 2)  # a drive smaller than N blocks: every block
    assert sr.offsets("s", "S1", 100, 64) == ()


H = [hashlib.sha256(bytes([i])).hexdigest() for i in range(8)]
OK = "".join(f"block {o} 4096 {H[o]}\n" for o in (1, 2, 3)) + "end\n"


@pytest.mark.parametrize(("text", "error"), [
    (OK.replace("end\n", ""), "no 'end' line"),  # cut
    ("".join(OK.splitlines(keepends=True)[:2]) + "end\n", "2 block lines for 3 blocks asked"),  # a line cut out
    (OK.replace("block 2 ", "block 5 "), "block 5 where block 2 was asked"),  # edited offset
    (OK.replace(H[2], H[2][:-1]), "line 2: not a block line"),  # a hash cut short
    (OK.replace(H[2], H[2].upper()), "line 2: not a block line"),
    (OK.replace("block 3 4096", "block 3 4096 4096"), "line 3: not a block line"),
    ("block 1 4096 " + H[1] + "\nwarning\n" + OK.split("\n", 1)[1], "4 block lines"),
    ("\x00" + OK, "NUL"),
    ("", "no 'end' line"),
])
def test_cut_or_edited_sample_output_is_refused(text: str, error: str) -> None:
    assert sr.parse_blocks(OK, (1, 2, 3)) == (H[1], H[2], H[3])
    with pytest.raises(sr.ParseError, match=error):
        sr.parse_blocks(text, (1, 2, 3))


def test_a_short_read_is_unreadable() -> None:
    assert sr.parse_blocks(OK.replace("block 2 4096", "block 2 512"), (1, 2, 3)) == (H[1], None, H[3])


@pytest.mark.parametrize(("text", "error"), [
    ("drive\t/dev/sda\t1000\tS1\n", "no 'end' line"),
    ("drive\t/dev/sda\t10x0\tS1\nend\n", "line 1: not a drive line"),
    ("drive /dev/sda 1000 S1\nend\n", "line 1: not a drive line"),
    ("drive\tsda\t1000\tS1\nend\n", "line 1: not a drive line"),
])
def test_cut_or_edited_drive_lists_are_refused(text: str, error: str) -> None:
    with pytest.raises(sr.ParseError, match=error):
        sr.parse_drives(text)


ZERO = hashlib.sha256(bytes(4096)).hexdigest()
ONES = hashlib.sha256(b"\xff" * 4096).hexdigest()


def sample(hashes: list[str | None], size: int = MIB, offs: tuple[int, ...] = (1, 2, 3),
           device: str = "/dev/sda") -> sr.Sample:
    return sr.Sample("S1", device, size, offs, tuple(hashes))


BEFORE = sample([H[1], H[2], H[3]])


@pytest.mark.parametrize(("before", "after", "verified", "why"), [
    (BEFORE, sample([H[4], H[5], H[6]]), True, "3 changed, 0 read as an erase pattern"),  # crypto erase
    (BEFORE, sample([ZERO, ZERO, ZERO]), True, "0 changed, 3 read as an erase pattern"),  # block erase
    (BEFORE, sample([ZERO, ONES, H[7]]), True, "1 changed, 2 read as an erase pattern"),
    (sample([ZERO, H[2], H[3]]), sample([ZERO, ZERO, ZERO]), True, "3 read as an erase pattern"),
    (BEFORE, sample([H[4], H[2], ZERO]), False, "1 of 3 sampled blocks unchanged by the erase (block 2): data left"),
    (BEFORE, sample([H[1], H[2], H[3]]), False, "3 of 3 sampled blocks unchanged by the erase (block 1, 2, 3)"),
    (BEFORE, sample([H[4], None, ZERO]), False, "1 sampled blocks not read whole before or after the erase (block 2)"),
    (sample([None, H[2], H[3]]), sample([ZERO, ZERO, ZERO]), False, "(block 1)"),
    (BEFORE, sample([ZERO, ZERO, ZERO], size=2 * MIB), False, "the size changed: 1048576 bytes before"),
    (BEFORE, sample([ZERO, ZERO], offs=(1, 2)), False, "not the same blocks"),
    (sample([], offs=()), sample([], offs=()), False, "no blocks sampled"),
    (sample([ZERO, ONES, ZERO]), sample([ZERO, ZERO, ZERO]), False, "cannot tell an erase from none"),
    (BEFORE, "the booted node has no drive with serial 'S1'", False, "after the erase: the booted node has no"),
    ("listing the drives failed (exit 1): x", BEFORE, False, "before the erase: listing the drives failed"),
    (BEFORE, None, False, "after the erase: not read"),
])
def test_the_judgement_table(before: sr.Sample | str | None, after: sr.Sample | str | None, verified: bool,
                             why: str) -> None:
    got = sr.judge(before, after)
    assert got.verified is verified and why in got.reason, got
    assert got.inconclusive is ("cannot tell" in why)


def test_every_block_is_kept_with_both_hashes() -> None:
    got = sr.judge(BEFORE, sample([H[4], ZERO, H[3]]))
    assert got.blocks == [{"offset": 1, "before": H[1], "after": H[4], "result": "changed"},
                          {"offset": 2, "before": H[2], "after": ZERO, "result": "pattern"},
                          {"offset": 3, "before": H[3], "after": H[3], "result": "unchanged"}]


# ------------------------------------------------------------------ the two verifiers of one drive

ASK = SampleAsk("0123abcd", 3)
SIZE = 1 << 30
OFFS = sr.offsets(ASK.seed, "S1", SIZE, ASK.count)
NVME_LIST = ("Node             SN                   Model\n"
             "---------------- -------------------- ----------------------------------------\n"
             "/dev/nvme0n1     S1                   SAMSUNG MZQL23T8HCLS-00A07\n")
LOG_ERASED = ("Sanitize Progress                      (SPROG) :  65535\n"
              "Sanitize Status                        (SSTAT) :  0x101\n"
              "Sanitize Command Dword 10 Information (SCDW10) :  0x2\n")
LOG_NEVER = LOG_ERASED.replace("0x101", "0").replace("0x2", "0")


def samples(hashes: list[str], serial: str = "S1", size: int = SIZE, device: str = "/dev/nvme0n1") -> dict[str, object]:
    listing = Answer(0, f"drive\t{device}\t{size}\t{serial}\nend\n", "")
    blocks = "".join(f"block {o} 4096 {h}\n" for o, h in zip(OFFS, hashes, strict=True)) + "end\n"
    return {"list": asdict(listing), "drives": {device: {"offsets": list(OFFS), "read": asdict(Answer(0, blocks, ""))}}}


def back(log: Answer | None, hashes: list[str], **kw: object) -> dict[str, object]:
    logs = {"/dev/nvme0": asdict(log)} if log else {}
    return {"ok": True, "reads": {"list": asdict(Answer(0, NVME_LIST, "")), "logs": logs},
            "samples": samples(hashes, **kw)}  # type: ignore[arg-type]


BEFORE_READ = {"ok": True, "samples": samples([H[1], H[2], H[3]])}
REFUSED = Answer(1, "", "NVMe status: Invalid Log Page in Get Log Page(0x4109)")


@pytest.mark.parametrize(("protocol", "after", "verified", "method", "why"), [
    ("NVMe", back(Answer(0, LOG_ERASED, ""), [ZERO] * 3), True, "block-erase", "0 changed, 3 read as"),
    ("NVMe", back(REFUSED, [ZERO] * 3), True, "sampled-read", "(no sanitize log: nvme sanitize-log /dev/nvme0 failed"),
    ("SATA", back(None, [H[4], H[5], H[6]]), True, "sampled-read", "3 changed"),
    ("SATA", back(None, [H[1], H[5], H[6]]), False, None, "1 of 3 sampled blocks unchanged"),
    ("NVMe", back(Answer(0, LOG_NEVER, ""), [H[1], H[2], H[3]]), False, None, "never been sanitized"),
    # The log says erased, the media says not: contradictory, not erased.
    ("NVMe", back(Answer(0, LOG_ERASED, ""), [H[1], ZERO, ZERO]), False, None, "unchanged by the erase"),
    # A log that is there but cut is no absent log: not erased (the samples do not stand in for it).
    ("NVMe", back(Answer(0, LOG_ERASED.splitlines()[0], ""), [ZERO] * 3), False, None, "unreadable sanitize log"),
    ("SATA", back(None, [ZERO] * 3, serial="S2"), False, None, "no drive with serial 'S1'"),
    ("SATA", back(None, [ZERO] * 3, size=SIZE // 2), False, None, "the blocks read from /dev/nvme0n1 are not"),
    ("SATA", {"ok": False, "reason": "the maintenance boot failed: x"}, False, None, "after the erase: the maint"),
])
def test_a_drive_is_erased_only_when_its_verifiers_agree(protocol: str, after: dict[str, object], verified: bool,
                                                         method: str | None, why: str) -> None:
    got = judge_drive("S1", protocol, after, BEFORE_READ, ASK)
    assert got["verified"] is verified and got["method"] == method and why in got["reason"], got
    assert got["sampled"]["seed"] == ASK.seed and got["sampled"]["samples"] == 3
    assert got["sampled"]["method"] == "sampled-read" and "dd" in got["sampled"]["verifier"]


def test_a_drive_blank_before_the_erase_is_left_to_its_log() -> None:
    blank = {"ok": True, "samples": samples([ZERO] * 3)}
    assert judge_drive("S1", "NVMe", back(Answer(0, LOG_ERASED, ""), [ZERO] * 3), blank, ASK)["verified"]
    alone = judge_drive("S1", "NVMe", back(REFUSED, [ZERO] * 3), blank, ASK)
    assert not alone["verified"] and "cannot tell" in alone["reason"]


def test_no_samples_before_the_erase_is_not_erased() -> None:
    got = judge_drive("S1", "NVMe", back(Answer(0, LOG_ERASED, ""), [ZERO] * 3), None, None)
    assert not got["verified"] and "no sampled reads before the erase" in got["reason"]
    assert sample_of(None, "S1", ASK) == "no sampled reads"


def test_the_lab_drives_are_files_the_erase_overwrites(busybox_path: str, tmp_path: Path) -> None:
    """The lab's drives as the read-back sees them: listed from their sysfs by serial, blocks read with dd; an
    erase that reached the drive zeroes it, one that failed (or never reached it) leaves every block."""
    fake_nvme.install_drives(tmp_path, [fake_nvme.Drive(f"EMUNVME000{i}", "M", 3_840_755_982_336) for i in (0, 1)])
    env = {"RACKLIFE_SYSFS": str(tmp_path / "sys"), "RACKLIFE_DEV": str(tmp_path / "dev")}
    ask = SampleAsk("lab-seed", 16)

    def read() -> dict[str, object]:
        listed = run(busybox_path, ["sh", "-c", sr.LIST_SCRIPT], **env)
        drives = {}
        for d in sr.parse_drives(listed.stdout):
            offs = sr.offsets(ask.seed, d.serial, d.size_bytes, ask.count)
            drives[d.device] = {"offsets": list(offs), "read": asdict(run(busybox_path, sr.sample_argv(d.device, offs)))}
        return {"list": asdict(listed), "drives": drives}

    before = read()
    assert [sample_of(before, s, ask).size_bytes for s in ("EMUNVME0000", "EMUNVME0001")] == [  # type: ignore[union-attr]
        fake_nvme.MEDIA_BYTES] * 2
    assert fake_nvme.record_sanitize(tmp_path, "EMUNVME0000", ok=True)
    assert fake_nvme.record_sanitize(tmp_path, "EMUNVME0001", ok=False)
    after = read()
    erased = sr.judge(sample_of(before, "EMUNVME0000", ask), sample_of(after, "EMUNVME0000", ask))
    assert erased.verified and "0 changed, 16 read as an erase pattern" in erased.reason, erased
    kept = sr.judge(sample_of(before, "EMUNVME0001", ask), sample_of(after, "EMUNVME0001", ask))
    assert not kept.verified and "16 of 16 sampled blocks unchanged" in kept.reason, kept
    fake_nvme.install_drives(tmp_path, [])  # a lab restart keeps what the drives hold
    assert sr.judge(sample_of(after, "EMUNVME0000", ask), sample_of(read(), "EMUNVME0000", ask)).inconclusive

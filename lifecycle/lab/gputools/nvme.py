"""A fake ``nvme`` (nvme-cli) for lab nodes: ``nvme list`` and ``nvme sanitize-log``, from the node's drives.

A lab node has no NVMe drive, yet the decommission's read-back asks the booted
node what its drives say about their last sanitize (NVMe's Sanitize Status log
page, log identifier 81h). The drives' state lives in the node's directory
(``drives.json``), written by the lab: each drive's serial, model and capacity
(the ones its emulated BMC reports) and its Sanitize Status log (SPROG, SSTAT,
SCDW10). The lab's Redfish emulator changes it when it runs
``Drive.SecureErase``: a sanitize that ended well sets SSTAT to "completed
successfully" with the Global Data Erased bit, one that failed to "failed", and
a BMC that only *says* it erased (the ``erase_not_done`` fault) leaves the log
as it was — never sanitized. The state survives power cycles, as a disk does.

Each drive's media is a plain file too, so that the other read-back, sampled
blocks read with busybox ``dd`` before and after the erase
(:mod:`lifecycle.workflows.sampled_read`), reads bytes the erase really changed:
``dev/nvmeNn1`` in the node's directory (:data:`MEDIA_BYTES`, random at first,
as a used drive), with a sysfs-shaped ``sys/block/nvmeNn1`` beside it (``size``
in 512-byte sectors, ``device/serial``) that the read-back's drive list reads
(the node's SSH sessions point it there: RACKLIFE_SYSFS and RACKLIFE_DEV). The
BMC's capacity is the drive's as reported; the file holds only its first
MEDIA_BYTES. A sanitize that ends well writes zeros over it (a block erase);
one that fails, or one the BMC only says it ran, leaves it as it was. The
``no-sanitize-log`` fault makes ``nvme sanitize-log`` refuse, as a drive without
the Sanitize feature (QEMU's emulated controller) does: only the samples can
then tell.

The output is nvme-cli's normal format as captured on real drives
(tests/fixtures/nvme/, provenance in tests/fixtures/SOURCES.md): ``nvme list``
as nvme-cli 1.12 prints it, ``nvme sanitize-log`` as nvme-cli 2.x does.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from lifecycle.lab.faults import read_fault

DRIVES_FILE = "drives.json"
MEDIA_BYTES = 2 << 20
NO_LOG = "no-sanitize-log"

# SSTAT values (NVMe Base Specification, Sanitize Status log page, SSTAT bits 2:0 and bit 8).
NEVER_SANITIZED = 0x0
COMPLETED = 0x1
FAILED = 0x3
GLOBAL_DATA_ERASED = 0x100
SPROG_IDLE = 65535  # SPROG when no sanitize is in progress
BLOCK_ERASE = 0x2  # SANACT in SCDW10: what the lab's BMC asks its drives for
NO_TIME = 4294967295


@dataclass
class Drive:
    serial: str
    model: str
    capacity_bytes: int
    sprog: int = SPROG_IDLE
    sstat: int = NEVER_SANITIZED
    scdw10: int = 0


def read_drives(node_dir: Path) -> list[Drive]:
    path = node_dir / DRIVES_FILE
    if not path.is_file():
        return []
    return [Drive(**d) for d in json.loads(path.read_text(encoding="utf-8"))]


def write_drives(node_dir: Path, drives: list[Drive]) -> None:
    tmp = node_dir / f".{DRIVES_FILE}.tmp"
    tmp.write_text(json.dumps([asdict(d) for d in drives], indent=2) + "\n", encoding="utf-8")
    tmp.replace(node_dir / DRIVES_FILE)


def media(node_dir: Path, index: int) -> Path:
    """Drive ``index``'s media: the file the node's block device ``nvme{index}n1`` reads."""
    return node_dir / "dev" / f"nvme{index}n1"


def install_drives(node_dir: Path, drives: list[Drive]) -> None:
    """The node's drives as the lab builds it (kept when already there: a disk outlives a lab restart)."""
    if not (node_dir / DRIVES_FILE).is_file():
        write_drives(node_dir, drives)
    for i, d in enumerate(read_drives(node_dir)):
        block = node_dir / "sys" / "block" / f"nvme{i}n1"
        (block / "device").mkdir(parents=True, exist_ok=True)
        (block / "size").write_text(f"{MEDIA_BYTES // 512}\n")
        (block / "device" / "serial").write_text(f"{d.serial:<20}\n")  # the kernel pads it, as the drive does
        path = media(node_dir, i)
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(os.urandom(MEDIA_BYTES))


def record_sanitize(node_dir: Path, serial: str, ok: bool, sanact: int = BLOCK_ERASE) -> bool:
    """What a sanitize the BMC ran did to the drive ``serial``; False when the node has no such drive."""
    drives = read_drives(node_dir)
    for i, d in enumerate(drives):
        if d.serial == serial:
            d.sprog, d.scdw10 = SPROG_IDLE, sanact
            d.sstat = (COMPLETED | GLOBAL_DATA_ERASED) if ok else FAILED
            write_drives(node_dir, drives)
            path = media(node_dir, i)
            if ok and path.exists():  # the block erase itself: zeros over the whole media
                with path.open("r+b") as f:
                    f.write(bytes(path.stat().st_size))
            return True
    return False


def _gb(n: int) -> str:
    return f"{n / 1e9:.2f}"


def _list(drives: list[Drive]) -> str:
    head = (f"{'Node':<16} {'SN':<20} {'Model':<40} {'Namespace':<9} {'Usage':<26} {'Format':<16} {'FW Rev':<8}")
    rule = " ".join("-" * w for w in (16, 20, 40, 9, 26, 16, 8))
    rows = [f"{f'/dev/nvme{i}n1':<16} {d.serial:<20} {d.model:<40} {'1':<9} "
            f"{f'{_gb(d.capacity_bytes)}  TB / {_gb(d.capacity_bytes)}  TB':<26} {'512   B +  0 B':<16} {'GDC5902Q':<8}"
            for i, d in enumerate(drives)]
    return "\n".join([head, rule, *rows]) + "\n"


def _hex(v: int) -> str:
    """C's ``%#x``, as nvme-cli prints SSTAT and SCDW10: ``0`` for zero (no prefix), else ``0x…``."""
    return f"{v:#x}" if v else "0"


def _sanitize_log(d: Drive) -> str:
    return "\n".join([
        f"Sanitize Progress                      (SPROG) :  {d.sprog}",
        f"Sanitize Status                        (SSTAT) :  {_hex(d.sstat)}",
        f"Sanitize Command Dword 10 Information (SCDW10) :  {_hex(d.scdw10)}",
        f"Estimated Time For Overwrite                   :  {NO_TIME} (No time period reported)",
        f"Estimated Time For Block Erase                 :  {NO_TIME} (No time period reported)",
        f"Estimated Time For Crypto Erase                :  {NO_TIME} (No time period reported)",
        "Estimated Time For Overwrite (No-Deallocate)   :  0",
        "Estimated Time For Block Erase (No-Deallocate) :  0",
        "Estimated Time For Crypto Erase (No-Deallocate):  0",
        "Estimated Time For Post-Verification Deallocation:  0",
        "Sanitize State Information               (SSI) : 0",
    ]) + "\n"


def _device_index(arg: str) -> int | None:
    """``/dev/nvme3`` or ``/dev/nvme3n1`` -> 3."""
    name = arg.removeprefix("/dev/nvme")
    digits = name.split("n", 1)[0]
    return int(digits) if name != arg and digits.isdigit() else None


def main(argv: list[str], node_dir: Path) -> tuple[str, int]:
    drives = read_drives(node_dir)
    if argv == ["list"]:
        return _list(drives), 0
    if len(argv) == 2 and argv[0] == "sanitize-log":
        index = _device_index(argv[1])
        if index is None or index >= len(drives):
            return f"Failed to open {argv[1]}: No such file or directory\n", 2
        if read_fault(node_dir).profile == NO_LOG:  # nvme-cli's words as QEMU's controller refuses log page 81h
            return ("NVMe status: Invalid Field in Command: A reserved coded value or an unsupported value in a "
                    "defined field(0x4002)\n"), 1
        return _sanitize_log(drives[index]), 0
    return "nvme: only 'list' and 'sanitize-log DEVICE' are simulated in the lab\n", 1

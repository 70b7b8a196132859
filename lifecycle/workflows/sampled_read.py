"""The other read-back of an erase: sampled blocks of each drive, read before and after, compared.

A SATA or SAS drive has no NVMe Sanitize Status log, and some NVMe drives keep
none (QEMU's emulated controller refuses ``nvme sanitize-log``). What such a
drive can still show is its media: before the BMC's erase, a maintenance boot
of the node (:mod:`lifecycle.workflows.erase_readback`) reads N blocks of
every drive, at offsets spread over the whole device and chosen from a seed
recorded in the run, and keeps each block's SHA-256; after the erase, a second
maintenance boot reads the same blocks again. Everything runs in busybox:
``dd`` reads each block, ``sha256sum`` and ``wc -c`` say what was read, and the
drive's serial and size come from sysfs (:data:`LIST_SCRIPT`). A fresh boot
reads through an empty page cache, so the second read is the media's.

A drive verifies as erased only if every row of :data:`TABLE` passes (fail
closed): listed once by its serial both times, the same size, the same blocks
asked, every block read whole both times, no block unchanged unless it now reads
as an erase pattern (zeros or all ones: an overwrite, a block erase, deallocated
blocks), and not every block the erase pattern already before (a drive blank
before the erase tells nothing). A crypto erase passes by every block changing
(new, indeterminate data); an overwrite or block erase by the pattern.

What it cannot show: the blocks not sampled. N blocks of a drive of B blocks
miss a region left intact with probability about (1 - r)^N for a region that is
a fraction r of the drive (r = 10%, N = 64: 0.1%); the seed is chosen at the
run, so no one knows the offsets before the erase.
"""

from __future__ import annotations

import hashlib
import random
import re
from collections.abc import Callable
from dataclasses import dataclass, field

METHOD = "sampled-read"
VERIFIER = ("sampled reads (busybox dd and sha256sum) of each drive's blocks, before and after the erase, "
            "over SSH from a maintenance boot")
BLOCK_BYTES = 4096
DEFAULT_SAMPLES = 64

# The drives the booted node sees, from sysfs: one ``drive<TAB>DEVICE<TAB>BYTES<TAB>SERIAL`` line per block
# device with a ``device`` (no loop or ram devices), then ``end``. NVMe: the controller's ``serial``;
# SCSI/SATA: the unit serial number VPD page (80h), whose 4-byte header is skipped. RACKLIFE_SYSFS and
# RACKLIFE_DEV move the roots (the lab's emulated nodes keep their drives under their own directory);
# a maintenance boot sets neither.
LIST_SCRIPT = r"""s="${RACKLIFE_SYSFS:-/sys}"; d="${RACKLIFE_DEV:-/dev}"
for b in "$s"/block/*; do
  [ -e "$b/device" ] || continue
  n="${b##*/}"; sn=""
  if [ -r "$b/device/serial" ]; then sn="$(cat "$b/device/serial")"
  elif [ -r "$b/device/vpd_pg80" ]; then sn="$(dd if="$b/device/vpd_pg80" bs=1 skip=4 2>/dev/null | tr -d '\000')"
  fi
  printf 'drive\t%s/%s\t%s\t%s\n' "$d" "$n" "$(( $(cat "$b/size") * 512 ))" "$(echo $sn)"
done
echo end"""

# One drive's blocks: ``sh -c SAMPLE_SCRIPT sh DEVICE OFFSET...``; one ``block OFFSET BYTES SHA256`` line
# (or ``block OFFSET unreadable``) per offset, in order, then ``end``.
SAMPLE_SCRIPT = r"""dev="$1"; shift; t="${TMPDIR:-/tmp}/racklife-sample.$$"
for off in "$@"; do
  if dd if="$dev" of="$t" bs=4096 skip="$off" count=1 2>/dev/null; then
    h="$(sha256sum < "$t")"; echo "block $off $(wc -c < "$t") ${h%% *}"
  else echo "block $off unreadable"; fi
done
rm -f "$t"; echo end"""

PATTERNS = {hashlib.sha256(bytes([b]) * BLOCK_BYTES).hexdigest(): f"{b:#04x}" for b in (0x00, 0xFF)}
"""The erase patterns a block may read as after an overwrite or a block erase: zeros, all ones."""

_DRIVE = re.compile(r"^drive\t(/\S+)\t(\d{1,20})\t(.*)$")
_BLOCK = re.compile(r"^block (\d{1,20}) (?:(\d{1,10}) ([0-9a-f]{64})|(unreadable))$")


class ParseError(ValueError):
    """The node's output is not what the scripts print: nothing is concluded from it."""


@dataclass(frozen=True)
class BlockDevice:
    device: str
    size_bytes: int
    serial: str


@dataclass(frozen=True)
class Sample:
    """One drive's blocks as read in one boot: ``hashes[i]`` of ``offsets[i]`` (None: not read whole)."""

    serial: str
    device: str
    size_bytes: int
    offsets: tuple[int, ...]
    hashes: tuple[str | None, ...]


@dataclass(frozen=True)
class Verdict:
    verified: bool
    reason: str
    blocks: list[dict[str, object]] = field(default_factory=list)
    """Per block: offset, before and after hash, and what it did (changed, pattern, unchanged, unreadable)."""
    inconclusive: bool = False
    """Only the last row failed (blank before the erase): no contradiction of a drive's own sanitize log."""


def offsets(seed: str, serial: str, size_bytes: int, n: int = DEFAULT_SAMPLES) -> tuple[int, ...]:
    """N block offsets spread over the whole device: one at random in each of N equal strata (from the run's
    seed and the drive's serial and size, so the read after the erase asks the same blocks)."""
    blocks = size_bytes // BLOCK_BYTES
    if blocks <= 0 or n <= 0:
        return ()
    rng = random.Random(f"{seed}/{serial}/{size_bytes}")  # spread, not secrecy: the seed is the run's secret
    k = min(n, blocks)
    return tuple(sorted({rng.randrange(i * blocks // k, (i + 1) * blocks // k) for i in range(k)}))


def sample_argv(device: str, offs: tuple[int, ...]) -> list[str]:
    return ["sh", "-c", SAMPLE_SCRIPT, "sh", device, *(str(o) for o in offs)]


def _ended(text: str) -> list[str]:
    if "\x00" in text:
        raise ParseError("a NUL byte in the output")
    lines = [line.rstrip("\r") for line in text.splitlines() if line.strip()]
    if not lines or lines[-1] != "end":
        raise ParseError("no 'end' line (cut output?)")
    return lines[:-1]


def parse_drives(text: str) -> list[BlockDevice]:
    """The block devices :data:`LIST_SCRIPT` printed; ParseError on a line it does not print."""
    out = []
    for n, line in enumerate(_ended(text), 1):
        m = _DRIVE.match(line)
        if m is None:
            raise ParseError(f"line {n}: not a drive line: {line[:80]!r}")
        out.append(BlockDevice(m[1], int(m[2]), m[3].strip()))
    return out


def parse_blocks(text: str, offs: tuple[int, ...]) -> tuple[str | None, ...]:
    """Each asked block's SHA-256 (None: unreadable or short), in order; ParseError unless every block asked,
    and only those, is answered once in order."""
    lines = _ended(text)
    if len(lines) != len(offs):
        raise ParseError(f"{len(lines)} block lines for {len(offs)} blocks asked")
    out: list[str | None] = []
    for n, (line, want) in enumerate(zip(lines, offs, strict=True), 1):
        m = _BLOCK.match(line)
        if m is None:
            raise ParseError(f"line {n}: not a block line: {line[:80]!r}")
        if int(m[1]) != want:
            raise ParseError(f"line {n}: block {m[1]} where block {want} was asked")
        out.append(m[3] if m[4] is None and int(m[2]) == BLOCK_BYTES else None)
    return tuple(out)


def find(listed: list[BlockDevice], serial: str) -> BlockDevice | str:
    hits = [d for d in listed if d.serial == serial.strip()]
    if len(hits) == 1:
        return hits[0]
    if not hits:
        return f"the booted node has no drive with serial {serial!r}"
    return f"contradictory: the booted node lists serial {serial!r} {len(hits)} times"


def _block(before: str | None, after: str | None) -> str:
    if before is None or after is None:
        return "unreadable"
    if after in PATTERNS:
        return "pattern"
    return "unchanged" if after == before else "changed"


def _bad(blocks: list[dict[str, object]], what: str) -> list[object]:
    return [b["offset"] for b in blocks if b["result"] == what]


def _first(offs: list[object]) -> str:
    return ", ".join(str(o) for o in offs[:5]) + (f" and {len(offs) - 5} more" if len(offs) > 5 else "")


Blocks = list[dict[str, object]]
Row = tuple[Callable[[Sample, Sample, Blocks], bool], Callable[[Sample, Sample, Blocks], str]]

TABLE: list[Row] = [
    (lambda b, a, _: b.size_bytes == a.size_bytes,
     lambda b, a, _: f"the size changed: {b.size_bytes} bytes before the erase, {a.size_bytes} after"),
    (lambda b, a, _: b.offsets == a.offsets and bool(b.offsets),
     lambda b, a, _: "not the same blocks read before and after the erase" if b.offsets else "no blocks sampled"),
    (lambda b, a, bl: not _bad(bl, "unreadable"),
     lambda b, a, bl: f"{len(_bad(bl, 'unreadable'))} sampled blocks not read whole before or after the erase "
                      f"(block {_first(_bad(bl, 'unreadable'))})"),
    (lambda b, a, bl: not _bad(bl, "unchanged"),
     lambda b, a, bl: f"{len(_bad(bl, 'unchanged'))} of {len(bl)} sampled blocks unchanged by the erase "
                      f"(block {_first(_bad(bl, 'unchanged'))}): data left"),
    (lambda b, a, _: not all(h in PATTERNS for h in b.hashes),
     lambda b, a, _: "every sampled block read as an erase pattern before the erase: the samples cannot tell "
                     "an erase from none"),
]
"""(passes, why not) in order; the first row that fails is the verdict."""


def judge(before: Sample | str | None, after: Sample | str | None) -> Verdict:
    """Whether one drive's samples show an erase (the table above); a str is why that read found no drive."""
    if not isinstance(before, Sample):
        return Verdict(False, f"before the erase: {before or 'not read'}")
    if not isinstance(after, Sample):
        return Verdict(False, f"after the erase: {after or 'not read'}")
    pairs = zip(before.offsets, before.hashes, after.hashes, strict=False) if before.offsets == after.offsets else ()
    blocks: list[dict[str, object]] = [{"offset": o, "before": hb, "after": ha, "result": _block(hb, ha)}
                                       for o, hb, ha in pairs]
    for i, (passes, why) in enumerate(TABLE):
        if not passes(before, after, blocks):
            return Verdict(False, why(before, after, blocks), blocks, inconclusive=i == len(TABLE) - 1)
    changed, pattern = len(_bad(blocks, "changed")), len(_bad(blocks, "pattern"))
    return Verdict(True, f"all {len(blocks)} sampled blocks of {after.device} erased: {changed} changed, "
                         f"{pattern} read as an erase pattern", blocks)

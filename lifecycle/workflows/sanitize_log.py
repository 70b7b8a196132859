"""What a drive says about its last sanitize, read from the node itself, and what racklife makes of it.

The BMC's account of an erase (its Task ended Completed, the Drive reads back
healthy) is only the BMC's word; a BMC that lies passes it. The drive keeps its
own record: NVMe's Sanitize Status log page (log identifier 81h), which
nvme-cli prints with ``nvme sanitize-log /dev/nvmeX``. A decommission boots the
node into the maintenance image and reads it (:mod:`lifecycle.workflows.erase_readback`);
this module parses nvme-cli's normal output (``nvme list`` to find each drive
by its serial, ``nvme sanitize-log`` for its log; real captures in
tests/fixtures/nvme) and judges each drive through one table.

Verified only when the log shows all of (fail closed; anything else, or a log
missing a field, repeating one or holding a line it does not know, is *not
verified*):

- SSTAT bits 2:0 say the most recent sanitize completed successfully (001b, or
  100b: completed with deallocation); never sanitized (000b) is the BMC that
  said it erased and did not; in progress or failed are not an erase;
- SPROG is 65535 (no sanitize in progress): a log that says "completed" and
  "in progress" at once is contradictory;
- the Global Data Erased bit (SSTAT bit 8) is set: nothing was written to the
  media since that sanitize;
- SCDW10's Sanitize Action (bits 2:0) names an erase: block erase (010b),
  overwrite (011b) or crypto erase (100b), recorded as the method. Exit
  Failure Mode (001b) or a reserved value is not an erase.

Sampled reads of the media are the other verifier
(:mod:`lifecycle.workflows.sampled_read`): the only one of a drive with no
log, and a cross-check of one with a log (:func:`lifecycle.workflows.erase_readback.judge_drive`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

SANITIZE_LOG_CMD = ("nvme", "sanitize-log")
LIST_CMD = ("nvme", "list")
VERIFIER = "nvme-cli sanitize-log (NVMe Sanitize Status log page 81h) read over SSH from a maintenance boot"

SPROG_IDLE = 65535
GLOBAL_DATA_ERASED = 0x100

# SSTAT bits 2:0 -> (the words, whether it is a finished sanitize).
STATUS: dict[int, tuple[str, bool]] = {
    0b000: ("the drive has never been sanitized (the erase did not reach it)", False),
    0b001: ("the most recent sanitize completed successfully", True),
    0b010: ("a sanitize is still in progress", False),
    0b011: ("the most recent sanitize failed", False),
    0b100: ("the most recent sanitize completed successfully, with deallocation", True),
}

# SCDW10 bits 2:0 (Sanitize Action) -> the method, or None: not an erase.
SANACT: dict[int, str | None] = {
    0b001: None,  # Exit Failure Mode
    0b010: "block-erase",
    0b011: "overwrite",
    0b100: "crypto-erase",
}

# The normal output's fields racklife reads: abbreviation -> how its value is written.
_DECIMAL = re.compile(r"^\d{1,10}$")
_HEX = re.compile(r"^(0|0x[0-9a-fA-F]{1,8})$")
_LINE = re.compile(r"^(?P<label>[A-Za-z][A-Za-z0-9 ()/-]*?)\s*:\s+(?P<value>\S+)(?:\s+\(.*\))?\s*$")
_ABBR = re.compile(r"\((SPROG|SSTAT|SCDW10|SSI)\)\s*$")
_KNOWN = re.compile(r"^Estimated Time For [A-Za-z -]+(\([A-Za-z -]+\))?$")


class ParseError(ValueError):
    """nvme-cli's output is not what racklife can read: nothing is concluded from it."""


@dataclass(frozen=True)
class SanitizeLog:
    sprog: int
    sstat: int
    scdw10: int


@dataclass(frozen=True)
class ListedDrive:
    device: str
    """The namespace's block device as listed (``/dev/nvme0n1``)."""
    controller: str
    """The controller's character device, which ``nvme sanitize-log`` takes (``/dev/nvme0``)."""
    serial: str
    model: str


@dataclass(frozen=True)
class Judgement:
    verified: bool
    reason: str
    method: str | None = None


def parse_sanitize_log(text: str) -> SanitizeLog:
    """The SPROG, SSTAT and SCDW10 of ``nvme sanitize-log DEV`` (normal output); ParseError otherwise."""
    if "\x00" in text:
        raise ParseError("a NUL byte in the output")
    seen: dict[str, str] = {}
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line:
            continue
        m = _LINE.match(line)
        if m is None:
            raise ParseError(f"line {n}: not 'field : value': {line[:80]!r}")
        label = m["label"].strip()
        abbr = _ABBR.search(label)
        if abbr is None:
            if not _KNOWN.match(label):
                raise ParseError(f"line {n}: unknown field {label[:60]!r}")
            continue
        key = abbr.group(1)
        if key in seen:
            raise ParseError(f"line {n}: {key} given twice")
        seen[key] = m["value"]
    missing = [k for k in ("SPROG", "SSTAT", "SCDW10") if k not in seen]
    if missing:
        raise ParseError(f"missing {', '.join(missing)} (truncated output?)")
    if not _DECIMAL.match(seen["SPROG"]) or int(seen["SPROG"]) > 0xFFFF:
        raise ParseError(f"SPROG {seen['SPROG']!r} is not a 16-bit decimal")
    for key, bits in (("SSTAT", 0xFFFF), ("SCDW10", 0xFFFFFFFF)):
        if not _HEX.match(seen[key]) or int(seen[key], 16) > bits:
            raise ParseError(f"{key} {seen[key]!r} is not a hexadecimal value in range")
    return SanitizeLog(int(seen["SPROG"]), int(seen["SSTAT"], 16), int(seen["SCDW10"], 16))


_NS = re.compile(r"^(/dev/nvme\d+)n\d+$")


def parse_list(text: str) -> list[ListedDrive]:
    """The rows of ``nvme list`` (normal output: a header, a rule of dashes, fixed-width rows)."""
    lines = text.splitlines()
    rule = next((i for i, line in enumerate(lines) if line.strip() and set(line.strip()) <= {"-", " "}), None)
    if rule is None or rule == 0:
        raise ParseError("no header and rule of dashes: not nvme list's table")
    spans = [(m.start(), m.end()) for m in re.finditer(r"-+", lines[rule])]
    header = lines[rule - 1]

    def cells(line: str) -> list[str]:
        return [line[a:b if i < len(spans) - 1 else None].strip() for i, (a, b) in enumerate(spans)]

    names = cells(header)
    for need in ("Node", "SN", "Model"):
        if need not in names:
            raise ParseError(f"nvme list has no {need} column (header {header.strip()[:80]!r})")
    at = {k: names.index(k) for k in ("Node", "SN", "Model")}
    out: list[ListedDrive] = []
    for n, line in enumerate(lines[rule + 1:], rule + 2):
        if not line.strip():
            continue
        row = cells(line)
        ns = _NS.match(row[at["Node"]])
        if ns is None or not row[at["SN"]]:
            raise ParseError(f"line {n}: not a namespace row: {line.strip()[:80]!r}")
        out.append(ListedDrive(row[at["Node"]], ns.group(1), row[at["SN"]], row[at["Model"]]))
    return out


def judge(log: SanitizeLog) -> Judgement:
    """Whether the drive's own log shows a finished, successful erase (the table in the module docstring)."""
    words, finished = STATUS.get(log.sstat & 0b111, (f"reserved sanitize status {log.sstat & 0b111:#05b}", False))
    if not finished:
        return Judgement(False, f"{words} (SSTAT {log.sstat:#x})")
    if log.sprog != SPROG_IDLE:
        return Judgement(False, f"contradictory: SSTAT {log.sstat:#x} says completed, SPROG {log.sprog} says a "
                                "sanitize is in progress")
    if not log.sstat & GLOBAL_DATA_ERASED:
        return Judgement(False, f"written to since the last sanitize (Global Data Erased clear, SSTAT {log.sstat:#x})")
    action = log.scdw10 & 0b111
    method = SANACT.get(action)
    if method is None:
        return Judgement(False, f"the last sanitize was no erase (Sanitize Action {action:#05b}, SCDW10 "
                                f"{log.scdw10:#x})")
    return Judgement(True, f"{words}: {method}, Global Data Erased (SSTAT {log.sstat:#x}, SCDW10 {log.scdw10:#x})",
                     method)


def judge_text(text: str) -> Judgement:
    try:
        return judge(parse_sanitize_log(text))
    except ParseError as exc:
        return Judgement(False, f"unreadable sanitize log: {exc}")


def find(listed: list[ListedDrive], serial: str) -> ListedDrive | str:
    """The one listed controller with ``serial``, or why not (none; two controllers is contradictory)."""
    hits = {d.controller: d for d in listed if d.serial == serial.strip()}  # one row per namespace
    if len(hits) == 1:
        return next(iter(hits.values()))
    if not hits:
        return f"the booted node lists no NVMe drive with serial {serial!r}"
    return f"contradictory: the booted node lists serial {serial!r} {len(hits)} times"

"""Extract ``NVRM: Xid`` events from a kernel log and map each code to NVIDIA's action.

The catalog shipped in ``burnin/data/xid_catalog.csv`` is NVIDIA's own machine-readable
XID table (code, mnemonic, resolution bucket, FATAL/NONFATAL) copied unchanged from
NVIDIA/NVSentinel @6f8b0fcfa8e502bdda78fabf96facef729a9285b
``distros/kubernetes/nvsentinel/charts/gpu-health-monitor/xiderrorsmapping.csv``
(Apache-2.0). The buckets are the "Resolution Bucket (Immediate Action)" column of
https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html ; the sentences in
``ACTIONS`` paraphrase that page. A code the catalog does not know maps to
``UNKNOWN`` and is treated by the judge as needing attention, not as harmless.

"No Xid" is only a finding when the log was read: a booted node's kernel log is never
empty, so an empty log, or one that holds only the reader's complaint (``dmesg: read
kernel buffer failed``), is an error, never a clean bill of health.
"""

from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from functools import cache
from importlib import resources

from burnin.parsers import ParseError


@dataclass(frozen=True)
class XidCatalogEntry:
    xid: int
    mnemonic: str
    bucket: str
    severity: str  # FATAL | NONFATAL


@dataclass(frozen=True)
class XidEvent:
    xid: int
    pci: str
    message: str
    action: str
    bucket: str
    mnemonic: str
    severity: str
    timestamp: str | None = None
    pid: str | None = None
    process: str | None = None


@dataclass
class XidReport:
    events: list[XidEvent]


# Resolution bucket → what an operator does (NVIDIA XID catalog, "Immediate Action").
ACTIONS: dict[str, str] = {
    "IGNORE": "none: informational",
    "RESTART_APP": "restart the application; no node action",
    "RESET_GPU": "drain the node, reset the GPU (nvidia-smi -r) and re-run diagnostics",
    "RESTART_BM": "drain the node and reboot the bare-metal host",
    "RESTART_VM": "restart the virtual machine",
    "CHECK_MECHANICALS": "drain the node; check power delivery and cooling (hardware/RMA path)",
    "CHECK_UVM": "check the UVM driver and the application's memory use",
    "UPDATE_SWFW": "update the GPU driver and firmware",
    "WORKFLOW_XID_48": "double-bit ECC error: if followed by Xid 63/64 reset the GPU, else drain and reset",
    "WORKFLOW_XID_45": "follow the guidance for the Xid that preceded it",
    "WORKFLOW_NVLINK_ERR": "NVLink error: decode, reseat/run field diagnostics; report if persistent",
    "WORKFLOW_NVLINK5_ERR": "NVLink5 error: decode, reseat/run field diagnostics; report if persistent",
    "UNEXPECTED_ERR_REPORT_ISSUE": "unexpected on data-centre GPUs: drain and open an NVIDIA case",
    "UNKNOWN": "not in the XID catalog: drain and investigate",
}
# Buckets after which the node needs no action (used by profiles as the default allow-list).
HARMLESS_BUCKETS = ("IGNORE", "RESTART_APP")


@cache
def catalog() -> dict[int, XidCatalogEntry]:
    text = resources.files("burnin.data").joinpath("xid_catalog.csv").read_text(encoding="utf-8")
    out: dict[int, XidCatalogEntry] = {}
    for row in csv.reader(io.StringIO(text)):
        if len(row) != 4 or not row[0].strip().isdigit():
            continue
        bucket = row[2].strip()
        if bucket not in ACTIONS:
            # One upstream row spells its bucket as prose ("Follow guidance as it
            # aapplies to another Xid"); it is the Xid-45 workflow in the HTML catalog.
            bucket = "WORKFLOW_XID_45" if "another Xid" in bucket else "UNKNOWN"
        out[int(row[0])] = XidCatalogEntry(int(row[0]), row[1].strip(), bucket, row[3].strip())
    return out


def lookup(code: int) -> XidCatalogEntry:
    return catalog().get(code, XidCatalogEntry(code, "", "UNKNOWN", "FATAL"))


# "NVRM: Xid (PCI:0000:19:00): 48, pid='<unknown>', name=<unknown>, An uncorrectable …"
# Older drivers: "NVRM: Xid (0000:3b:00): 79, GPU has fallen off the bus."
_XID = re.compile(
    r"NVRM: Xid \((?:PCI:)?(?P<pci>[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.\d)?)\):\s*"
    r"(?P<code>\d+),\s*(?P<rest>.*)$"
)
_PID = re.compile(r"^pid=(?P<pid>'[^']*'|[^,]*),\s*")
_NAME = re.compile(r"^name=(?P<name>[^,]*),\s*")
_TIMESTAMP = re.compile(r"^(?:\[(?P<bracket>[^\]]+)\]|(?P<iso>\d{4}-\d\d-\d\dT\S+))")


# An instant as ``dmesg --time-format iso`` and ``date --iso-8601=ns`` print it: 2024-11-15T05:39:15,491363+00:00
_INSTANT = re.compile(r"^(?P<base>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:[.,](?P<frac>\d{1,9}))?"
                      r"(?:(?P<z>Z)|(?P<sign>[+-])(?P<hh>\d\d):?(?P<mm>\d\d))$")


def instant(text: str | None) -> datetime | None:
    """The instant an ISO 8601 time with its UTC offset names, or None (no offset, or not such a time).

    A time without an offset could be any zone's, so it is no instant: a kernel log window is only
    judged against times that can be compared."""
    m = _INSTANT.match((text or "").strip())
    if m is None:
        return None
    try:
        base = datetime.strptime(m.group("base"), "%Y-%m-%dT%H:%M:%S")
    except ValueError:
        return None
    frac = (m.group("frac") or "0")[:6].ljust(6, "0")
    offset = timedelta(0) if m.group("z") else (1 if m.group("sign") == "+" else -1) * timedelta(
        hours=int(m.group("hh")), minutes=int(m.group("mm")))
    if abs(offset) >= timedelta(hours=24):
        return None
    return base.replace(microsecond=int(frac), tzinfo=timezone(offset))


def event_for(code: int, pci: str, message: str, **extra: str | None) -> XidEvent:
    entry = lookup(code)
    return XidEvent(
        xid=code,
        pci=pci,
        message=message,
        action=ACTIONS[entry.bucket],
        bucket=entry.bucket,
        mnemonic=entry.mnemonic,
        severity=entry.severity,
        **extra,
    )


# What dmesg / journalctl print instead of a log they could not read.
_READ_FAILURE = re.compile(
    r"^\s*(?:dmesg: |journalctl: |-- No entries --|No journal files were (?:found|opened)"
    r"|Failed to (?:open|read|get) )"
)


# A kernel log line as dmesg (plain, -T, --time-format iso, -x) or journalctl -k print it.
_KERNEL_LINE = re.compile(
    r"^(?:\[\s*\d+\.\d+\]"                               # [   12.345678]
    r"|\[[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \d{4}\]"  # [Sun Feb 23 16:24:18 2025]
    r"|\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d"                    # 2024-11-15T05:39:15,491363+00:00
    r"|[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \S+ kernel: "        # Feb 23 16:24:18 host kernel: (journalctl)
    r"|[a-z]+ *:[a-z]+ *: )"                                 # kern  :err   : (dmesg -x)
)


def parse(text: str) -> XidReport:
    """Every Xid line in a kernel log (dmesg, journalctl -k); an empty list is a clean log."""
    if "\x00" in text:
        raise ParseError("kernel log contains NUL bytes: not a text log")
    if not text.strip():
        raise ParseError("kernel log is empty: a booted node's kernel log never is, so it was not read")
    for line in text.splitlines():
        if _READ_FAILURE.match(line):
            raise ParseError(f"the kernel log could not be read: {line.strip()[:300]}")

    events: list[XidEvent] = []
    for line in text.splitlines():
        m = _XID.search(line)
        if not m:
            if "NVRM: Xid" in line:
                raise ParseError(f"unreadable Xid line: {line.strip()[:160]!r}")
            continue
        rest = m.group("rest")
        pid = name = None
        if pm := _PID.match(rest):
            pid, rest = pm.group("pid").strip("'"), rest[pm.end() :]
        if nm := _NAME.match(rest):
            name, rest = nm.group("name"), rest[nm.end() :]
        ts = _TIMESTAMP.match(line)
        events.append(
            event_for(
                int(m.group("code")),
                m.group("pci").lower(),
                rest.strip(),
                timestamp=(ts.group("bracket") or ts.group("iso")) if ts else None,
                pid=pid,
                process=name,
            )
        )
    if not events and not any(_KERNEL_LINE.match(line) for line in text.splitlines()):
        # "no Xid" is a finding only about a kernel log; an Xid line is kernel log content itself
        raise ParseError("not a kernel log: no Xid line and no line with a dmesg or journalctl timestamp "
                         f"({text.strip().splitlines()[0][:120]!r} …)")
    return XidReport(events=events)

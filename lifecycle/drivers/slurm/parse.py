"""Parsers for what Slurm 22.05 prints: scontrol records, fixed-format sinfo/squeue, REST JSON.

Pure functions over text or decoded JSON, tested against captured output in
``../shared/fixtures/slurm`` and against the lab's real daemons. No I/O here.

``scontrol show`` prints ``Key=Value`` pairs separated by spaces, one record
per line with ``-o`` or indented over several lines without it. Values may
contain spaces (``OS=Linux 6.1 #1 SMP``), so a value runs until the next
``Key=``; a node's ``Reason`` is always last and may contain anything.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from lifecycle.drivers.slurm.hostlist import expand
from lifecycle.drivers.slurm.types import NodeState, Reservation, SlurmJob, SlurmNode

_KEY = re.compile(r"(?:^|(?<=\s))([A-Za-z][A-Za-z0-9_/:]*)=")
_RECORD_START = re.compile(r"^(NodeName|JobId|PartitionName|ReservationName)=")
_REASON_TAIL = re.compile(r"^(?P<text>.*?)\s*\[(?P<user>[^@\]]+)@(?P<time>[^\]]+)\]\s*$", re.S)

Record = dict[str, str]


def _pairs(line: str, rest_of_line: frozenset[str]) -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    matches = list(_KEY.finditer(line))
    i = 0
    while i < len(matches):
        m = matches[i]
        key = m.group(1)
        if key in rest_of_line:
            found.append((key, line[m.end() :].strip()))
            break
        end = matches[i + 1].start() if i + 1 < len(matches) else len(line)
        found.append((key, line[m.end() : end].strip()))
        i += 1
    return found


def parse_records(text: str, rest_of_line: frozenset[str] = frozenset()) -> list[Record]:
    """Split ``scontrol show`` output into records of key → value (first occurrence wins)."""
    records: list[Record] = []
    current: Record | None = None
    for line in text.splitlines():
        if not line.strip():
            continue
        if _RECORD_START.match(line):
            current = {}
            records.append(current)
        elif current is None:
            continue
        for key, value in _pairs(line, rest_of_line):
            current.setdefault(key, value)
    return records


def _int(value: str | None) -> int:
    try:
        return int(value or 0)
    except ValueError:
        return 0


def _list(value: str | None) -> tuple[str, ...]:
    if not value or value in ("(null)", "N/A", "none"):
        return ()
    return tuple(v for v in value.split(",") if v)


def _hosts(value: str | None) -> tuple[str, ...]:
    if not value or value in ("(null)", "None assigned"):
        return ()
    return tuple(expand(value))


def split_reason(reason: str) -> tuple[str, str | None, str | None]:
    """``"replace [root@2022-06-02T05:54:34]"`` → ``("replace", "root", "2022-06-02T05:54:34")``."""
    m = _REASON_TAIL.match(reason)
    if m:
        return m.group("text"), m.group("user"), m.group("time")
    return reason, None, None


def node_from_record(rec: Mapping[str, str]) -> SlurmNode:
    reason, user, when = split_reason(rec.get("Reason", ""))
    return SlurmNode(
        name=rec["NodeName"],
        state=NodeState.from_scontrol(rec.get("State", "UNKNOWN")),
        reason=reason,
        reason_user=user,
        reason_time=when,
        partitions=_list(rec.get("Partitions")),
        features=_list(rec.get("AvailableFeatures")),
        gres=rec.get("Gres", ""),
        cpus=_int(rec.get("CPUTot")),
        alloc_cpus=_int(rec.get("CPUAlloc")),
        real_memory_mb=_int(rec.get("RealMemory")),
        slurmd_start=rec.get("SlurmdStartTime") if rec.get("SlurmdStartTime") not in (None, "", "None") else None,
    )


def parse_nodes(text: str) -> list[SlurmNode]:
    """``scontrol show node [-o]`` → nodes."""
    return [node_from_record(r) for r in parse_records(text, frozenset({"Reason"}))]


def job_from_record(rec: Mapping[str, str]) -> SlurmJob:
    return SlurmJob(
        job_id=rec["JobId"],
        state=rec.get("JobState", "UNKNOWN").upper(),
        nodes=_hosts(rec.get("NodeList")),
        partition=rec.get("Partition", ""),
        user=rec.get("UserId", "").split("(", 1)[0],
        name=rec.get("JobName", ""),
        reason=rec.get("Reason", ""),
        restarts=_int(rec.get("Restarts")),
        requeue=rec.get("Requeue", "1") == "1",
    )


def parse_jobs(text: str) -> list[SlurmJob]:
    """``scontrol show job [-o]`` → jobs."""
    return [job_from_record(r) for r in parse_records(text)]


def parse_partitions(text: str) -> dict[str, tuple[str, ...]]:
    """``scontrol show partition -o`` → partition → member nodes."""
    return {r["PartitionName"]: _hosts(r.get("Nodes")) for r in parse_records(text)}


def parse_reservations(text: str) -> list[Reservation]:
    if text.strip().startswith("No reservations"):
        return []
    return [
        Reservation(
            name=r["ReservationName"],
            nodes=_hosts(r.get("Nodes")),
            start=r.get("StartTime", ""),
            end=r.get("EndTime", ""),
            flags=_list(r.get("Flags")),
            users=_list(r.get("Users")),
        )
        for r in parse_records(text)
    ]


def parse_table(text: str, sep: str = "|", columns: Sequence[str] | None = None) -> list[Record]:
    """Separator-delimited ``sinfo``/``squeue`` output → rows keyed by column name.

    Without ``columns`` the first line is the header (as ``sinfo -o`` prints
    it); names are stripped. When a header repeats a name (``sinfo -o %all``
    has two ``PARTITION``), the first wins. The last column takes any extra
    separators, so a free-text reason there cannot shift the columns.
    """
    lines = [line for line in text.splitlines() if line.strip()]
    if columns is None:
        if not lines:
            return []
        columns = [c.strip() for c in lines[0].split(sep)]
        lines = lines[1:]
    rows: list[Record] = []
    for line in lines:
        values = line.split(sep, len(columns) - 1)
        row: Record = {}
        for col, value in zip(columns, values, strict=False):
            row.setdefault(col, value.strip())
        rows.append(row)
    return rows


SINFO_NODE_FORMAT = ("%N", "%P", "%T", "%f", "%G", "%E")
SINFO_NODE_COLUMNS = ("NODELIST", "PARTITION", "STATE", "AVAIL_FEATURES", "GRES", "REASON")


def nodes_from_sinfo(rows: Sequence[Mapping[str, str]]) -> list[SlurmNode]:
    """Rows of ``sinfo -N`` (header names as sinfo prints them) → nodes, one per name.

    A node in several partitions appears once per partition; the rows merge.
    """
    merged: dict[str, SlurmNode] = {}
    for row in rows:
        name = row.get("HOSTNAMES") or row["NODELIST"]
        reason_raw = row.get("REASON", "")
        reason = "" if reason_raw == "none" else reason_raw
        part = row.get("PARTITION", "").rstrip("*")
        node = SlurmNode(
            name=name,
            state=NodeState.from_sinfo(row.get("STATE", "unknown")),
            reason=reason,
            reason_user=(row.get("USER") or None) if reason else None,
            partitions=(part,) if part else (),
            features=_list(row.get("AVAIL_FEATURES")),
            gres=row.get("GRES", ""),
        )
        if name in merged:
            prev = merged[name]
            parts = tuple(dict.fromkeys(prev.partitions + node.partitions))
            node = replace(prev, partitions=parts)
        merged[name] = node
    return list(merged.values())


SQUEUE_FORMAT = "%i|%T|%P|%u|%j|%N|%r"
SQUEUE_COLUMNS = ("JOBID", "STATE", "PARTITION", "USER", "NAME", "NODELIST", "REASON")


def jobs_from_squeue(text: str) -> list[SlurmJob]:
    return [
        SlurmJob(
            job_id=r["JOBID"],
            state=r["STATE"].upper(),
            partition=r["PARTITION"],
            user=r["USER"],
            name=r["NAME"],
            nodes=_hosts(r["NODELIST"]),
            reason=r["REASON"],
        )
        for r in parse_table(text, columns=SQUEUE_COLUMNS)
    ]


# ------------------------------------------------------------- slurmrestd v0.0.38


def node_from_rest(obj: Mapping[str, Any]) -> SlurmNode:
    return SlurmNode(
        name=str(obj["name"]),
        state=NodeState.from_rest(
            str(obj.get("state", "unknown")), list(obj.get("state_flags", []))
        ),
        reason=str(obj.get("reason") or ""),
        reason_user=(str(obj["reason_set_by_user"]) if obj.get("reason_set_by_user") else None),
        partitions=tuple(str(p) for p in obj.get("partitions") or ()),
        features=_list(str(obj.get("features") or "")),
        gres=str(obj.get("gres") or ""),
        cpus=int(obj.get("cpus") or 0),
        alloc_cpus=int(obj.get("alloc_cpus") or 0),
        real_memory_mb=int(obj.get("real_memory") or 0),
        slurmd_start=_rest_time(obj.get("slurmd_start_time")),
    )


def _rest_time(value: Any) -> str | None:
    """A slurmrestd time: a number (v0.0.39) or ``{"set", "number"}`` (v0.0.40 and later); None when unset."""
    if isinstance(value, dict):
        value = value.get("number") if value.get("set", True) else None
    return str(value) if value not in (None, 0, "") else None


def job_from_rest(obj: Mapping[str, Any]) -> SlurmJob:
    return SlurmJob(
        job_id=str(obj["job_id"]),
        state=str(obj.get("job_state", "UNKNOWN")).upper(),
        nodes=_hosts(str(obj.get("nodes") or "")),
        partition=str(obj.get("partition") or ""),
        user=str(obj.get("user_name") or ""),
        name=str(obj.get("name") or ""),
        reason=str(obj.get("state_reason") or ""),
        restarts=int(obj.get("restart_cnt") or 0),
        requeue=bool(obj.get("requeue", True)),
    )

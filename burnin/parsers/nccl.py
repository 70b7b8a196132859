"""Parse nccl-tests output (``all_reduce_perf``, ``all_gather_perf``, ``reduce_scatter_perf``,
``alltoall_perf`` …): every result row, the ``Avg bus bandwidth`` line, the rank list.

Output often arrives through a launcher that prefixes each line (``srun -l`` → ``0: ``,
Open MPI ``--tag-output`` → ``[1,0]<stdout>:``); those prefixes are stripped first.
A row that starts like a result but does not have the thirteen columns is a truncated
or garbled run and raises, and so does output with no rows at all.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from burnin.parsers import ParseError, strip_rank_prefix

# nccl-tests prints the binary name nowhere, so it is taken from the caller, or from a
# "Collective test starting: all_reduce_perf" banner where newer builds print one.
_BANNER = re.compile(r"Collective test starting:\s*(?P<name>[a-z_]+?)(?:_perf)?\b")
_RANK = re.compile(r"^#\s+Rank\s+(?P<rank>\d+)\s+Group\s+\d+\s+Pid\s+\d+\s+on\s+(?P<host>\S+)")
_AVG = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*(?P<v>\S+)")
_OOB = re.compile(r"^#\s*Out of bounds values\s*:\s*(?P<n>\d+)")
_NUM = r"(\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)"
_WRONG = r"(\d+|N/A)"
_ROW = re.compile(
    r"^\s*(?P<size>\d+)\s+(?P<count>\d+)\s+(?P<type>[a-z0-9_]+)\s+(?P<redop>[a-z]+)\s+"
    r"(?P<root>-?\d+)\s+"
    + r"\s+".join([_NUM, _NUM, _NUM, _WRONG, _NUM, _NUM, _NUM, _WRONG])
    + r"\s*$"
)
_LOOKS_LIKE_ROW = re.compile(r"^\s*\d+\s+\d+\s")
_FAILURE = re.compile(r"(Test NCCL failure|NCCL failure|Test CUDA failure|NCCL WARN .*failed)")


@dataclass(frozen=True)
class NcclRow:
    size_bytes: int
    count: int
    type: str
    redop: str
    root: int
    time_oop_us: float
    algbw_oop: float
    busbw_oop: float
    wrong_oop: int | None  # None: the run had validation off (N/A)
    time_ip_us: float
    algbw_ip: float
    busbw_ip: float
    wrong_ip: int | None


@dataclass
class NcclReport:
    collective: str
    ranks: int | None
    rows: list[NcclRow]
    avg_busbw: float | None
    peak_busbw: float
    wrong_results: int
    hosts: list[str]
    out_of_bounds: int | None
    complete: bool  # the closing "Avg bus bandwidth" line was printed
    failures: list[str]


def _wrong(value: str) -> int | None:
    return None if value == "N/A" else int(value)


def parse(text: str, collective: str | None = None) -> NcclReport:
    rows: list[NcclRow] = []
    ranks: dict[int, str] = {}
    avg: float | None = None
    oob: int | None = None
    failures: list[str] = []
    found = collective
    for raw in text.splitlines():
        line = strip_rank_prefix(raw).rstrip()
        if not line.strip():
            continue
        if (m := _BANNER.search(line)) and found is None:
            found = m.group("name")
        if m := _RANK.match(line):
            ranks[int(m.group("rank"))] = m.group("host")
            continue
        if m := _AVG.match(line):
            try:
                avg = float(m.group("v"))
            except ValueError as exc:
                raise ParseError(f"unreadable average bus bandwidth {m.group('v')!r}") from exc
            continue
        if m := _OOB.match(line):
            oob = int(m.group("n"))
            continue
        if _FAILURE.search(line):
            failures.append(line.strip())
            continue
        if line.lstrip().startswith("#"):
            continue
        if m := _ROW.match(line):
            g = m.groups()
            rows.append(
                NcclRow(
                    size_bytes=int(g[0]),
                    count=int(g[1]),
                    type=g[2],
                    redop=g[3],
                    root=int(g[4]),
                    time_oop_us=float(g[5]),
                    algbw_oop=float(g[6]),
                    busbw_oop=float(g[7]),
                    wrong_oop=_wrong(g[8]),
                    time_ip_us=float(g[9]),
                    algbw_ip=float(g[10]),
                    busbw_ip=float(g[11]),
                    wrong_ip=_wrong(g[12]),
                )
            )
        elif _LOOKS_LIKE_ROW.match(line):
            raise ParseError(f"truncated or garbled nccl-tests row: {line.strip()[:120]!r}")
    if not rows:
        detail = f" ({failures[0]})" if failures else ""
        raise ParseError(f"no nccl-tests result rows in output{detail}")
    hosts = sorted(set(ranks.values()))
    return NcclReport(
        collective=found or "unknown",
        ranks=len(ranks) if ranks else None,
        rows=rows,
        avg_busbw=avg,
        peak_busbw=max(max(r.busbw_oop, r.busbw_ip) for r in rows),
        wrong_results=sum((r.wrong_oop or 0) + (r.wrong_ip or 0) for r in rows),
        hosts=hosts,
        out_of_bounds=oob,
        complete=avg is not None,
        failures=failures,
    )

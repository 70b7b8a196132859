"""Parse nccl-tests output (``all_reduce_perf``, ``all_gather_perf``, ``reduce_scatter_perf``,
``alltoall_perf`` …): every result row, the ``Avg bus bandwidth`` line, the rank list.

One log often holds several collectives run back to back; builds since 2.17 frame each
between ``# Collective test starting: X`` and ``# Collective test concluded: X``. Each
framed run is one report with its own rows, average and out-of-bounds count, never
merged with its neighbours; a run that was started but never concluded is incomplete.

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
_BANNER = re.compile(r"Collective test starting:\s*(?P<name>[a-z_]+?)(?:_perf(?:_mpi)?)?\s*$")
_CONCLUDED = re.compile(r"Collective test concluded:\s*(?P<name>[a-z_]+?)(?:_perf(?:_mpi)?)?\s*$")
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
    complete: bool  # the closing "Avg bus bandwidth" line (and the "concluded" banner, if framed) was printed
    failures: list[str]
    concluded: bool | None = None  # None: this build prints no "Collective test" banners
    # False when every out-of-place #wrong is N/A: the run had validation off (-c 0), so
    # wrong_results == 0 says nothing about correctness.
    validated: bool = True


def _wrong(value: str) -> int | None:
    return None if value == "N/A" else int(value)


def _sections(text: str) -> list[tuple[str | None, list[str]]]:
    """Split a log at each "Collective test starting" banner; what precedes the first one
    (version line, launcher noise) belongs to the first run."""
    out: list[tuple[str | None, list[str]]] = [(None, [])]
    for raw in text.splitlines():
        line = strip_rank_prefix(raw).rstrip()
        if m := _BANNER.search(line):
            name, lines = out[-1]
            if name is not None or any(_LOOKS_LIKE_ROW.match(ln) for ln in lines):
                out.append((m.group("name"), []))
            else:
                out[-1] = (m.group("name"), lines)
        out[-1][1].append(line)
    return out


def _parse_section(lines: list[str], collective: str | None, framed: bool) -> NcclReport:
    rows: list[NcclRow] = []
    ranks: dict[int, str] = {}
    avg: float | None = None
    oob: int | None = None
    concluded = False
    failures: list[str] = []
    for line in lines:
        if not line.strip():
            continue
        if m := _CONCLUDED.search(line):
            if m.group("name") != collective:
                raise ParseError(f"nccl-tests run of {collective} concluded as {m.group('name')}: garbled log")
            concluded = True
            continue
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
            if avg is not None or concluded:
                raise ParseError(f"{collective or 'nccl-tests'}: a result row after the run's summary: "
                                 f"{line.strip()[:120]!r}")
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
        raise ParseError(f"no nccl-tests result rows in {collective or 'the'} output{detail}")
    hosts = sorted(set(ranks.values()))
    return NcclReport(
        collective=collective or "unknown",
        ranks=len(ranks) if ranks else None,
        rows=rows,
        avg_busbw=avg,
        peak_busbw=max(max(r.busbw_oop, r.busbw_ip) for r in rows),
        wrong_results=sum((r.wrong_oop or 0) + (r.wrong_ip or 0) for r in rows),
        hosts=hosts,
        out_of_bounds=oob,
        complete=avg is not None and (concluded or not framed),
        failures=failures,
        concluded=concluded if framed else None,
        validated=any(r.wrong_oop is not None for r in rows),
    )


def parse_all(text: str, collective: str | None = None) -> list[NcclReport]:
    """Every run in a log, one report per collective run, in the order they ran.

    ``collective`` names the run of a log that prints no banner (nccl-tests before 2.17
    never prints its own name); a banner that names another collective contradicts it.
    """
    sections = _sections(text)
    framed = any(name is not None for name, _ in sections)
    if collective is not None and framed:
        others = sorted({name for name, _ in sections if name is not None and name != collective})
        if others:
            raise ParseError(f"expected {collective} output, but the log holds {', '.join(others)}")
    return [_parse_section(lines, name or collective, name is not None) for name, lines in sections]


def parse(text: str, collective: str | None = None) -> NcclReport:
    """The one run of a single collective binary's output; a log of several is refused."""
    reports = parse_all(text, collective)
    if len(reports) > 1:
        names = ", ".join(r.collective for r in reports)
        raise ParseError(f"the log holds {len(reports)} collective runs ({names}): read it with parse_all")
    return reports[0]

"""GPU-hours Slurm's own accounting (slurmdbd, read with ``sacct``) says jobs were allocated.

racklife's capacity ledger says how many GPU-hours a pool had *in service*;
Slurm's accounting says how many of them jobs *used*. Putting the two side
by side (``lifecycle/service/reconcile.py``) shows the idle share and catches
a ledger that disagrees with the scheduler. One ``sacct`` call per
partition, allocations only (``--allocations``: a job's own record, not its
steps, so a job is counted once), every user's, ``--parsable2`` with a fixed
``--format`` (``AllocTRES`` last: its commas cannot shift a column).

A job's GPUs are the ``gres/gpu`` count of its ``AllocTRES``
(``billing=16,cpu=16,gres/gpu=8,mem=64G,node=1``; a typed
``gres/gpu:h100=8`` entry repeats the same GPUs and is not added again; a
site tracking only typed GPUs has only those, and they are summed). Its
hours are its ``Start`` to ``End`` clipped to the window; a running job's
``End`` is ``Unknown`` and counts until the window's end (or now); a job
that never started (``Start`` ``Unknown`` or ``None``) has none. ``sacct``
prints and reads times in the local time of the process, without a zone:
they are converted here, both ways, with this process's zone.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from lifecycle.drivers.errors import OperationFailed
from lifecycle.drivers.slurm.runner import Runner

FIELDS = ("JobIDRaw", "Partition", "State", "Start", "End", "AllocTRES")
_GPU = re.compile(r"(?:^|,)gres/gpu=(\d+)(?:,|$)")
_TYPED_GPU = re.compile(r"(?:^|,)gres/gpu:[^=,]+=(\d+)")
_NO_TIME = ("Unknown", "None", "")


@dataclass(frozen=True)
class JobAllocation:
    job_id: str
    partition: str
    state: str  # COMPLETED, RUNNING, CANCELLED by 0, FAILED, ...
    start: datetime | None  # None: never started
    end: datetime | None  # None: still running
    gpus: int

    def gpu_hours(self, since: datetime, until: datetime) -> float:
        if self.start is None or self.gpus == 0:
            return 0.0
        lo, hi = max(self.start, since), min(self.end or until, until)
        return self.gpus * max(0.0, (hi - lo).total_seconds()) / 3600


def _local(when: datetime) -> str:
    """A time as sacct reads it: local, without a zone."""
    return when.astimezone().replace(tzinfo=None).isoformat(timespec="seconds")


def sacct_argv(partition: str, since: datetime, until: datetime) -> list[str]:
    return ["sacct", "--allusers", "--allocations", "--noheader", "--parsable2", "--partition", partition,
            "--starttime", _local(since), "--endtime", _local(until), "--format", ",".join(FIELDS)]


def _time(text: str, number: int, what: str) -> datetime | None:
    if text in _NO_TIME:
        return None
    try:
        return datetime.fromisoformat(text).astimezone(UTC)  # naive: the local time sacct printed
    except ValueError:
        raise OperationFailed("sacct", f"line {number}: unreadable {what} {text!r}") from None


def parse_allocations(text: str) -> list[JobAllocation]:
    """``sacct --parsable2 --noheader --format`` :data:`FIELDS` → allocations; a line that does not fit is an error."""
    out = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split("|", len(FIELDS) - 1)
        if len(parts) != len(FIELDS):
            raise OperationFailed("sacct", f"line {number}: {len(parts)} fields, expected {len(FIELDS)}")
        job, partition, state, start, end, tres = parts
        gpus = _GPU.search(tres)
        count = int(gpus.group(1)) if gpus else sum(int(n) for n in _TYPED_GPU.findall(tres))
        out.append(JobAllocation(job, partition, state, _time(start, number, "Start"), _time(end, number, "End"),
                                 count))
    return out


def allocations(run: Runner, partition: str, since: datetime, until: datetime) -> list[JobAllocation]:
    """The jobs of ``partition`` that ran in the window, from Slurm's accounting (one ``sacct`` call)."""
    return parse_allocations(run(sacct_argv(partition, since, until)))


def gpu_hours(jobs: Sequence[JobAllocation], since: datetime, until: datetime) -> float:
    return sum(j.gpu_hours(since, until) for j in jobs)

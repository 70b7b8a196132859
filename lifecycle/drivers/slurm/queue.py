"""Slurm's pending jobs, as ``squeue`` prints them: what a pool's users are waiting for.

The metrics show the queue as each pool sees it (pending jobs, their GPUs,
how long the oldest has waited) so that "training is short of capacity"
is a number next to the capacity racklife lent away. One ``squeue`` call
with a fixed ``--Format`` (``|``-separated; the reason last, so a free-text
reason cannot shift a column) reads every pending job; Slurm 22.05's
fields were checked against the lab's real ``squeue``
(``tests/slurm/test_queue.py`` holds that capture).

GPUs a job asks for are read from its ``tres-per-node`` (``--gres=gpu:N``,
times its node count) and ``tres-per-job`` (``--gpus=N``): ``gres:gpu:4``
in 22.05, ``gres/gpu:4`` in later releases, with or without a GPU type.
A job submitted to several partitions (``-p a,b``) is pending in each.
``SubmitTime`` is printed in slurmctld's client's local time without a
zone: it is read as this process's local time, the same clock squeue used.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime

from lifecycle.drivers.errors import OperationFailed
from lifecycle.drivers.slurm.runner import Runner

PENDING_FIELDS = ("JobID", "Partition", "SubmitTime", "NumNodes", "tres-per-node", "tres-per-job", "Reason")
PENDING_ARGV = ("squeue", "--noheader", "--states", "PENDING", "--Format",
                ",".join(f"{f}:|" for f in PENDING_FIELDS[:-1]) + f",{PENDING_FIELDS[-1]}:")
_GPUS = re.compile(r"gres[:/]gpu(?::[A-Za-z0-9_.-]+)?[:=](\d+)\b")


@dataclass(frozen=True)
class PendingJob:
    job_id: str
    partitions: tuple[str, ...]
    submitted: datetime  # aware (UTC)
    nodes: int
    gpus: int  # GPUs asked for in all (per node times nodes, plus per job)
    reason: str  # Slurm's word: Resources, Priority, JobHeldUser, ReqNodeNotAvail, ...


def _gpus(tres: str) -> int:
    return sum(int(m) for m in _GPUS.findall(tres)) if tres not in ("", "N/A", "(null)") else 0


def parse_pending(text: str) -> list[PendingJob]:
    """``squeue`` with :data:`PENDING_ARGV`'s format → pending jobs; a line that does not fit is an error."""
    out = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split("|", len(PENDING_FIELDS) - 1)
        if len(parts) != len(PENDING_FIELDS):
            raise OperationFailed("squeue", f"line {number}: {len(parts)} fields, expected {len(PENDING_FIELDS)}")
        job, partitions, submit, nodes, per_node, per_job, reason = (p.strip() for p in parts)
        try:
            submitted = datetime.fromisoformat(submit)
            count = int(nodes)
        except ValueError:
            raise OperationFailed("squeue", f"line {number}: unreadable SubmitTime {submit!r} or "
                                  f"NumNodes {nodes!r}") from None
        submitted = submitted.astimezone(UTC)  # a naive time is local: the clock squeue printed it in
        out.append(PendingJob(job, tuple(p for p in partitions.split(",") if p), submitted, count,
                              _gpus(per_node) * count + _gpus(per_job), reason))
    return out


def pending(run: Runner) -> list[PendingJob]:
    """Every pending job slurmctld holds (one ``squeue`` call)."""
    return parse_pending(run(list(PENDING_ARGV)))

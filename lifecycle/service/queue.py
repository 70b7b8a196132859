"""The Slurm queue as each pool sees it: pending jobs, the GPUs they ask for, how long they wait.

Unlike the rest of the metrics this is read live, at the scrape, from
``squeue`` (one call): a wait is only true now, and racklife keeps no
record of other people's jobs. So the metrics process needs the Slurm
client setup every racklife Slurm command needs (``SLURM_CONF``); without
it the queue is not read and its metrics are absent, never zeros. A
``squeue`` that fails (slurmctld down, a timeout) sets
``racklife_slurm_queue_readable`` to 0 and leaves the queue series out,
while the store's metrics are still served.

A pool sees the jobs pending in its partition (``partition`` in the
inventory); a job submitted to several partitions is pending in each.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from prometheus_client.core import GaugeMetricFamily, Metric

from lifecycle.drivers.errors import DriverError
from lifecycle.drivers.slurm.queue import PendingJob

HELP = {
    "racklife_slurm_queue_readable": "1 when the scrape read Slurm's queue (squeue), 0 when it could not: the "
                                     "queue series are then absent.",
    "racklife_slurm_pending_jobs": "Jobs pending in the pool's Slurm partition.",
    "racklife_slurm_pending_reasons": "Jobs pending in the pool's partition by Slurm's reason (Resources, "
                                      "Priority, JobHeldUser, ...).",
    "racklife_slurm_pending_gpus": "GPUs the jobs pending in the pool's partition ask for.",
    "racklife_slurm_oldest_pending_seconds": "Seconds the oldest job pending in the pool's partition has waited "
                                             "since it was submitted (0: none pending).",
}


class QueueReader(Protocol):
    def pending(self) -> list[PendingJob]: ...


@dataclass(frozen=True)
class PoolQueue:
    pool: str
    partition: str
    jobs: int
    gpus: int
    oldest_s: float
    reasons: dict[str, int]


def pool_queues(jobs: Sequence[PendingJob], partitions: dict[str, str], now: datetime) -> list[PoolQueue]:
    """Per pool (``partitions``: pool -> its Slurm partition), the jobs pending there."""
    out = []
    for pool, partition in sorted(partitions.items()):
        mine = [j for j in jobs if partition in j.partitions]
        out.append(PoolQueue(pool, partition, len(mine), sum(j.gpus for j in mine),
                             max((max(0.0, (now - j.submitted).total_seconds()) for j in mine), default=0.0),
                             dict(sorted(Counter(j.reason or "None" for j in mine).items()))))
    return out


def families(reader: QueueReader, partitions: dict[str, str], now: datetime) -> Iterator[Metric]:
    """The queue's metric families; nothing when no pool is served by Slurm."""
    if not partitions:
        return
    readable = GaugeMetricFamily("racklife_slurm_queue_readable", HELP["racklife_slurm_queue_readable"])
    try:
        jobs = reader.pending()
    except (DriverError, OSError):
        readable.add_metric([], 0)
        yield readable
        return
    readable.add_metric([], 1)
    yield readable
    names = ("racklife_slurm_pending_jobs", "racklife_slurm_pending_gpus", "racklife_slurm_oldest_pending_seconds")
    count, gpus, oldest = (GaugeMetricFamily(n, HELP[n], labels=["pool", "partition"]) for n in names)
    reasons = GaugeMetricFamily("racklife_slurm_pending_reasons", HELP["racklife_slurm_pending_reasons"],
                                labels=["pool", "partition", "reason"])
    for q in pool_queues(jobs, partitions, now):
        count.add_metric([q.pool, q.partition], q.jobs)
        gpus.add_metric([q.pool, q.partition], q.gpus)
        oldest.add_metric([q.pool, q.partition], q.oldest_s)
        for reason, n in q.reasons.items():
            reasons.add_metric([q.pool, q.partition, reason], n)
    yield from (count, reasons, gpus, oldest)


@dataclass(frozen=True)
class SqueueReader:
    """The queue from ``squeue``; ``env`` None: this process's environment (``SLURM_CONF``)."""

    env: Mapping[str, str] | None = None
    timeout_s: float = 5.0  # under Prometheus's default scrape timeout (10 s): a hung squeue reads as 0

    def pending(self) -> list[PendingJob]:
        from lifecycle.drivers.slurm.queue import pending
        from lifecycle.drivers.slurm.runner import CommandRunner

        return pending(CommandRunner(env=self.env, timeout_s=self.timeout_s))


def from_env() -> QueueReader | None:
    """A reader when this process has a Slurm client setup (``SLURM_CONF``, or the default
    ``/etc/slurm/slurm.conf``), else None: the queue is not read."""
    return SqueueReader() if os.environ.get("SLURM_CONF") or os.path.exists("/etc/slurm/slurm.conf") else None

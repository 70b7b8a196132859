"""The training pool's ledger against Slurm's own accounting: what racklife had in service, what jobs used.

racklife's capacity ledger counts GPU-hours by the state racklife kept each
node in; Slurm's accounting (slurmdbd, through ``sacct``) counts the
GPU-hours jobs were allocated in the pool's partition. The two answer
different questions, and their difference is the point:

* allocated up to in service: the rest is capacity no job held (idle, or
  waiting for jobs that fit) — the utilisation a capacity planner wants;
* allocated above in service, up to in service plus draining: jobs finishing
  on nodes racklife was draining (a drain lets running jobs end), explained;
* beyond that, up to the hours racklife spent testing the pool's nodes
  (``burning_in``): racklife's own acceptance, whose multi-node rounds run as
  Slurm jobs in the partition, explained;
* allocated above all three: Slurm ran jobs on capacity racklife did not count as
  serving the pool (a node of the partition outside racklife's inventory, or
  racklife's record behind Slurm's). That is a disagreement, reported as
  such (``consistent`` false), never folded into a number.

GPU-hours are compared with a small tolerance (:data:`TOLERANCE_GPU_H`):
Slurm's times are whole seconds and racklife's transitions are written a
moment after the scheduler acted.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime

from lifecycle.drivers.slurm.accounting import JobAllocation, gpu_hours
from lifecycle.service.ledger import Ledger

TOLERANCE_GPU_H = 0.05


@dataclass(frozen=True)
class Reconciliation:
    pool: str
    partition: str
    in_service: float  # racklife: GPU-hours the pool had in service
    draining: float  # racklife: GPU-hours draining (jobs may still run)
    testing: float  # racklife: GPU-hours burning in (acceptance's multi-node rounds are Slurm jobs)
    allocated: float  # Slurm: GPU-hours jobs were allocated in the partition
    jobs: int  # jobs with GPUs that ran in the window
    idle: float = field(init=False)  # in service, held by no job
    during_drain: float = field(init=False)  # allocated beyond in service, within the drains
    during_tests: float = field(init=False)  # beyond that, within racklife's acceptance runs
    unexplained: float = field(init=False)  # allocated beyond in service, draining and testing
    consistent: bool = field(init=False)
    explanation: tuple[str, ...] = field(init=False)

    def __post_init__(self) -> None:
        over = self.allocated - self.in_service
        set_ = object.__setattr__
        set_(self, "idle", round(max(0.0, -over), 3))
        set_(self, "during_drain", round(min(max(0.0, over), self.draining), 3))
        set_(self, "during_tests", round(min(max(0.0, over - self.draining), self.testing), 3))
        unexplained = max(0.0, over - self.draining - self.testing)
        set_(self, "unexplained", round(unexplained, 3))
        set_(self, "consistent", unexplained <= TOLERANCE_GPU_H)
        share = f" ({100 * self.allocated / self.in_service:.1f}%)" if self.in_service > 0 else ""
        lines = [f"Slurm allocated {self.allocated:.2f} GPU-hours to {self.jobs} job(s) in partition "
                 f"{self.partition}; racklife had {self.in_service:.2f} in service{share}."]
        if over <= TOLERANCE_GPU_H:
            lines.append(f"{self.idle:.2f} GPU-hours in service were held by no job (idle, or waiting for jobs "
                         "that fit).")
        if self.during_drain > TOLERANCE_GPU_H:
            lines.append(f"{self.during_drain:.2f} GPU-hours ran on nodes racklife was draining (a drain lets "
                         "running jobs finish).")
        if self.during_tests > TOLERANCE_GPU_H:
            lines.append(f"{self.during_tests:.2f} GPU-hours were racklife's own acceptance jobs on nodes it was "
                         "testing (burning_in).")
        if not self.consistent:
            lines.append(f"{self.unexplained:.2f} GPU-hours Slurm allocated on capacity racklife did not count "
                         "as serving this pool: a node of the partition outside racklife's inventory, or "
                         "racklife's record behind Slurm's (compare racklife status with sinfo).")
        set_(self, "explanation", tuple(lines))

    def to_json(self) -> dict[str, object]:
        doc = asdict(self)
        for k in ("in_service", "draining", "testing", "allocated"):
            doc[k] = round(doc[k], 3)
        doc["explanation"] = list(self.explanation)
        return doc


def reconcile(ledger: Ledger, partitions: dict[str, str],
              read: Callable[[str, datetime, datetime], Sequence[JobAllocation]]) -> list[Reconciliation]:
    """Each Slurm pool (``partitions``: pool -> partition) of the ledger against ``read``'s accounting."""
    out = []
    for pool, partition in sorted(partitions.items()):
        caps = ledger.by_capacity.get(pool, {})
        jobs = [j for j in read(partition, ledger.since, ledger.until) if j.partition == partition and j.gpus]
        used = [j for j in jobs if j.gpu_hours(ledger.since, ledger.until) > 0]
        states = ledger.by_state.get(pool, {})
        out.append(Reconciliation(pool, partition, caps.get("in_service", 0.0),
                                  states.get("draining", 0.0),  # not drained: no job runs there
                                  states.get("burning_in", 0.0),
                                  gpu_hours(jobs, ledger.since, ledger.until), len(used)))
    return out

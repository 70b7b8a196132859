"""Taking nodes out of Slurm without losing a job: drain, wait to a deadline, then act per policy.

A pool's ``leave_policy`` says what happens to jobs still running when the
drain deadline passes: ``wait`` leaves them running and reports the leave as
incomplete, ``requeue`` puts them back in the queue (they restart elsewhere),
``cancel`` ends them. Nothing is killed silently: the report lists every job
that was on the nodes and what happened to it. The clock is injected so the
waiting can be tested without sleeping.

A node that someone else drained or downed is theirs: ``leave`` refuses it
(``HeldByOther``, naming the owner and reason) before draining anything or
touching a job, because requeueing or cancelling jobs on it would act on
another owner's decision.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

from lifecycle.drivers.errors import DriverError
from lifecycle.drivers.slurm.driver import HeldByOther, SlurmDriver, foreign_hold
from lifecycle.drivers.slurm.types import DrainOwner, SlurmJob
from lifecycle.model.vocab import LeavePolicy

LEAVE_ALONE = "racklife leaves the node and its jobs alone"

JobAction = Literal["finished", "requeued", "cancelled", "still_running", "failed"]


class Clock(Protocol):
    def monotonic(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...


class RealClock:
    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


@dataclass(frozen=True)
class JobOutcome:
    job_id: str
    name: str
    user: str
    nodes: tuple[str, ...]
    action: JobAction
    detail: str = ""


@dataclass(frozen=True)
class NodeOutcome:
    node: str
    owner: DrainOwner
    state: str
    drained: bool


@dataclass
class LeaveReport:
    run_id: str
    policy: LeavePolicy
    nodes: list[NodeOutcome] = field(default_factory=list)
    jobs: list[JobOutcome] = field(default_factory=list)
    complete: bool = False
    """Every node drained and empty."""
    elapsed_s: float = 0.0

    def to_dict(self) -> dict[str, object]:
        return {
            "run_id": self.run_id,
            "policy": self.policy,
            "complete": self.complete,
            "elapsed_s": round(self.elapsed_s, 3),
            "nodes": [
                {"node": n.node, "state": n.state, "drained": n.drained,
                 "owner": n.owner.kind, "owner_run": n.owner.run_id, "reason": n.owner.reason}
                for n in self.nodes
            ],
            "jobs": [
                {"job_id": j.job_id, "name": j.name, "user": j.user, "nodes": list(j.nodes),
                 "action": j.action, "detail": j.detail}
                for j in self.jobs
            ],
        }


def waiting_on(jobs: Sequence[SlurmJob], deadline_s: float) -> str:
    """What a leave waits on, in words: ``drain of job 12 (alice, train)``, one entry per job."""
    each = [f"job {j.job_id}" + (f" ({', '.join(x for x in (j.user, j.name) if x)})" if j.user or j.name else "")
            for j in jobs]
    return f"drain of {', '.join(each)} (deadline {deadline_s:g} s)"


def leave(
    driver: SlurmDriver,
    nodes: Iterable[str],
    *,
    run_id: str,
    reason: str,
    policy: LeavePolicy,
    deadline_s: float,
    settle_s: float = 60.0,
    poll_s: float = 0.5,
    clock: Clock | None = None,
    on_wait: Callable[[str], None] | None = None,
) -> LeaveReport:
    """Drain ``nodes`` and empty them per ``policy``; return what happened to every job.

    ``deadline_s`` bounds the wait for running jobs; ``settle_s`` bounds the
    wait, after requeue/cancel, for Slurm to clean the nodes up. ``on_wait`` is told what the
    leave waits on whenever that changes ("drain of job 12 (alice, train)"), for progress.
    """
    said = on_wait or (lambda _what: None)
    clk = clock or RealClock()
    start = clk.monotonic()
    names = list(dict.fromkeys(nodes))
    report = LeaveReport(run_id=run_id, policy=policy)
    _refuse_foreign(driver, names)
    owners = driver.drain(names, run_id, reason)
    if any(o.kind != "racklife" for o in owners.values()):
        _refuse_foreign(driver, [n for n, o in owners.items() if o.kind != "racklife"])

    seen: dict[str, SlurmJob] = {}
    outcome: dict[str, JobOutcome] = {}

    def poll() -> list[SlurmJob]:
        active = driver.jobs_on(names)
        for job in active:
            seen.setdefault(job.job_id, job)
        return active

    active = poll()
    while active and clk.monotonic() - start < deadline_s:
        said(waiting_on(active, deadline_s))
        clk.sleep(min(poll_s, max(0.0, deadline_s - (clk.monotonic() - start))))
        active = poll()

    for job in active:
        if job.state == "COMPLETING":
            continue
        try:
            if policy == "requeue":
                driver.requeue(job.job_id)
                outcome[job.job_id] = _outcome(job, "requeued")
            elif policy == "cancel":
                driver.cancel(job.job_id)
                outcome[job.job_id] = _outcome(job, "cancelled")
            else:
                outcome[job.job_id] = _outcome(
                    job, "still_running", f"still running after {deadline_s:g}s deadline"
                )
        except DriverError as exc:
            outcome[job.job_id] = _outcome(job, "failed", f"{policy} failed: {exc.message}")

    settle_until = clk.monotonic() + settle_s
    requeued = [j for j, o in outcome.items() if o.action == "requeued"]
    if any(o.action not in ("still_running", "failed") for o in outcome.values()) or not active:
        said("Slurm to settle the node (drained, " + ("requeued jobs pending)" if requeued else "no job left)"))
        while True:
            states = driver.nodes(names)
            settled = all(n.state.drained or n.state.base == "down" for n in states)
            if settled and requeued:
                settled = all(driver.job(j).state == "PENDING" for j in requeued)
            if settled or clk.monotonic() >= settle_until:
                break
            clk.sleep(poll_s)
    for job_id in requeued:
        try:
            driver.release(job_id)
        except DriverError as exc:
            old = outcome[job_id]
            outcome[job_id] = JobOutcome(
                old.job_id, old.name, old.user, old.nodes, "requeued",
                f"requeued but still held by Slurm: {exc.message}",
            )
    states = driver.nodes(names)
    for job_id, job in seen.items():
        outcome.setdefault(job_id, _outcome(job, "finished"))
    report.jobs = sorted(outcome.values(), key=lambda o: _job_key(o.job_id))
    report.nodes = [
        NodeOutcome(n.name, owners[n.name], str(n.state), n.state.drained or n.state.base == "down")
        for n in states
    ]
    report.complete = all(n.drained for n in report.nodes) and not any(
        o.action in ("still_running", "failed") for o in report.jobs
    )
    report.elapsed_s = clk.monotonic() - start
    return report


def _refuse_foreign(driver: SlurmDriver, names: list[str]) -> None:
    """Raise ``HeldByOther`` for the first of ``names`` drained or downed by someone else."""
    for node in driver.nodes(names):
        if foreign_hold(node) is not None:
            raise HeldByOther.of(node, LEAVE_ALONE)


def _outcome(job: SlurmJob, action: JobAction, detail: str = "") -> JobOutcome:
    return JobOutcome(job.job_id, job.name, job.user, job.nodes, action, detail)


def _job_key(job_id: str) -> tuple[int, str]:
    head = job_id.split("_", 1)[0]
    return (int(head) if head.isdigit() else 0, job_id)

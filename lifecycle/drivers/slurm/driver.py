"""The Slurm driver: node and job state, drains with ownership, partitions, requeue, power.

Writes go through ``scontrol``/``scancel`` (slurmrestd 22.05 cannot update
nodes); reads use slurmrestd when a ``RestClient`` is given, else
``scontrol``/``squeue`` with fixed formats. Every drain or down racklife sets
carries ``racklife:<run-id>:``; ``resume_if_ours`` lifts only those, so an
admin's or a health checker's drain is never undone by automation.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from lifecycle.drivers.errors import OperationFailed
from lifecycle.drivers.slurm.hostlist import compress
from lifecycle.drivers.slurm.parse import (
    SQUEUE_FORMAT,
    job_from_rest,
    jobs_from_squeue,
    node_from_rest,
    parse_jobs,
    parse_nodes,
    parse_partitions,
    parse_reservations,
)
from lifecycle.drivers.slurm.runner import RestClient, Runner
from lifecycle.drivers.slurm.types import DrainOwner, Reservation, SlurmJob, SlurmNode
from lifecycle.model import vocab

_RESERVATION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}\Z")
_JOB = re.compile(r"^\d+(_\d+)?\Z")
_RUN = re.compile(r"^[A-Za-z0-9._-]{1,64}\Z")


class NotOurs(OperationFailed):
    """racklife refuses to lift a drain it did not set."""

    def __init__(self, node: str, owner: DrainOwner) -> None:
        super().__init__(
            node,
            f"drained by {owner.describe()}, not by racklife; racklife only resumes nodes whose "
            "reason starts with 'racklife:<run-id>:' — resume it by hand if that is intended",
        )
        self.owner = owner


class HeldByOther(OperationFailed):
    """A node someone else drained or downed: racklife changes nothing on it, jobs included."""

    @classmethod
    def of(cls, node: SlurmNode, action: str) -> HeldByOther:
        return cls(node.name, held_by_other(node, action))


def foreign_hold(node: SlurmNode) -> DrainOwner | None:
    """The owner of the node's drain or down when it is not racklife's; None when free or ours."""
    held = node.state.drain or node.state.base == "down"
    return node.owner if held and node.owner.kind != "racklife" else None


def held_by_other(node: SlurmNode, action: str) -> str:
    """``drained by another owner: admin: reseating cable; not lifted (set by root)``."""
    what = "drained" if node.state.drain else "down"
    by = f" (set by {node.reason_user})" if node.reason_user else ""
    return f"{what} by another owner: {node.reason or '(no reason given)'}; {action}{by}"


def reason_for(run_id: str, human: str) -> str:
    """The reason text racklife sets: ``racklife:<run-id>: <human reason>``."""
    if not _RUN.match(run_id):
        raise ValueError(f"run id {run_id!r} must be 1-64 of [A-Za-z0-9._-]")
    return f"racklife:{run_id}: {' '.join(human.split())}"


def _names(nodes: Iterable[str]) -> list[str]:
    out = list(dict.fromkeys(nodes))
    for n in out:
        if not vocab.is_node_name(n):
            raise ValueError(f"{n!r} is not a valid node name")
    if not out:
        raise ValueError("no nodes given")
    return out


def _job(job_id: str) -> str:
    if not _JOB.match(job_id):
        raise ValueError(f"{job_id!r} is not a job id")
    return job_id


@dataclass(frozen=True)
class ResumeResult:
    node: str
    action: str
    """``resumed`` or ``already`` (not drained or down)."""
    owner: DrainOwner


@dataclass
class SlurmDriver:
    run: Runner
    rest: RestClient | None = None

    # ------------------------------------------------------------- reads

    def nodes(self, names: Iterable[str] | None = None) -> list[SlurmNode]:
        wanted = _names(names) if names is not None else None
        if self.rest is not None:
            found = [node_from_rest(n) for n in self.rest.get("nodes").get("nodes", [])]
            if wanted is not None:
                by_name = {n.name: n for n in found}
                missing = [n for n in wanted if n not in by_name]
                if missing:
                    raise OperationFailed(",".join(missing), "no such node in Slurm")
                return [by_name[n] for n in wanted]
            return found
        argv = ["scontrol", "show", "node", "-o"]
        if wanted is not None:
            argv.append(compress(wanted))
        return parse_nodes(self.run(argv))

    def node(self, name: str) -> SlurmNode:
        return self.nodes([name])[0]

    def jobs(self) -> list[SlurmJob]:
        if self.rest is not None:
            return [job_from_rest(j) for j in self.rest.get("jobs").get("jobs", [])]
        return parse_jobs(self.run(["scontrol", "show", "job", "-o"]))

    def job(self, job_id: str) -> SlurmJob:
        jobs = parse_jobs(self.run(["scontrol", "show", "job", "-o", _job(job_id)]))
        if not jobs:
            raise OperationFailed(job_id, "no such job")
        return jobs[0]

    def jobs_on(self, nodes: Iterable[str]) -> list[SlurmJob]:
        """Jobs holding resources on any of ``nodes`` (running, completing, suspended, …)."""
        names = _names(nodes)
        if self.rest is not None:
            wanted = set(names)
            return [j for j in self.jobs() if j.active and wanted & set(j.nodes)]
        text = self.run([
            "squeue", "--noheader", "--nodelist", compress(names),
            "--states", "RUNNING,COMPLETING,CONFIGURING,SUSPENDED,STOPPED,SIGNALING,STAGE_OUT",
            "--format", SQUEUE_FORMAT,
        ])
        return jobs_from_squeue(text)

    def partitions(self) -> dict[str, tuple[str, ...]]:
        return parse_partitions(self.run(["scontrol", "show", "partition", "-o"]))

    def reservations(self) -> list[Reservation]:
        return parse_reservations(self.run(["scontrol", "show", "reservation", "-o"]))

    def owners(self, names: Iterable[str] | None = None) -> dict[str, DrainOwner]:
        """Who drained each drained or down node (nodes in service are left out)."""
        return {
            n.name: n.owner
            for n in self.nodes(names)
            if n.state.drain or n.state.base == "down"
        }

    # ------------------------------------------------------------- node writes

    def _update_nodes(self, names: Sequence[str], *words: str) -> None:
        self.run(["scontrol", "update", f"nodename={compress(names)}", *words])

    def drain(self, nodes: Iterable[str], run_id: str, reason: str) -> dict[str, DrainOwner]:
        """Drain nodes with our reason; a node already drained or down by someone else keeps theirs.

        Returns the owner of each node's drain afterwards.
        """
        return self._hold(nodes, run_id, reason, "drain")

    def down(self, nodes: Iterable[str], run_id: str, reason: str) -> dict[str, DrainOwner]:
        """Mark nodes down (Slurm kills their jobs): for nodes that are already gone.

        Like ``drain``, a node held by someone else keeps their reason.
        """
        return self._hold(nodes, run_id, reason, "down")

    def _hold(self, nodes: Iterable[str], run_id: str, reason: str, state: str) -> dict[str, DrainOwner]:
        names = _names(nodes)
        text = reason_for(run_id, reason)
        current = {n.name: n for n in self.nodes(names)}
        foreign = {
            n for n, node in current.items()
            if (node.state.drain or node.state.base == "down") and node.owner.kind != "racklife"
        }
        ours = [n for n in names if n not in foreign]
        if ours:
            self._update_nodes(ours, f"state={state}", f"reason={text}")
        owners = {n: current[n].owner for n in foreign}
        owners.update({n: DrainOwner.of(text) for n in ours})
        return {n: owners[n] for n in names}

    def resume_if_ours(self, nodes: Iterable[str], run_id: str | None = None) -> list[ResumeResult]:
        """Resume nodes whose drain/down reason racklife set (of ``run_id``, when given).

        Checks every node before changing any: one foreign drain refuses the
        whole call with ``NotOurs`` naming its owner. A node that is not
        drained or down counts as already resumed.
        """
        names = _names(nodes)
        current = self.nodes(names)
        results: list[ResumeResult] = []
        to_resume: list[str] = []
        for node in current:
            held = node.state.drain or node.state.base == "down"
            owner = node.owner
            if not held:
                results.append(ResumeResult(node.name, "already", owner))
                continue
            if owner.kind != "racklife" or (run_id is not None and owner.run_id != run_id):
                raise NotOurs(node.name, owner)
            to_resume.append(node.name)
            results.append(ResumeResult(node.name, "resumed", owner))
        if to_resume:
            self._update_nodes(to_resume, "state=resume")
        return results

    def power_down(self, nodes: Iterable[str], *, force: bool = False) -> None:
        """Lend nodes away through power saving (``idle~``); ``force`` also ends jobs on them."""
        self._update_nodes(_names(nodes), "state=power_down_force" if force else "state=power_down")

    def delete_node(self, name: str) -> None:
        """``scontrol delete nodename=X``: Slurm 22.05 allows it for dynamic nodes only (a node that
        slurm.conf defines stays until the file no longer lists it and slurmctld restarts)."""
        self.run(["scontrol", "delete", f"nodename={_names([name])[0]}"])

    def power_up(self, nodes: Iterable[str]) -> None:
        self._update_nodes(_names(nodes), "state=power_up")

    # ------------------------------------------------------------- partitions

    def set_partition_nodes(self, partition: str, nodes: Sequence[str]) -> None:
        names = _names(nodes) if nodes else []
        if not vocab.is_node_name(partition):
            raise ValueError(f"{partition!r} is not a partition name")
        self.run([
            "scontrol", "update", f"partitionname={partition}",
            f"nodes={compress(names) if names else ''}",
        ])

    def add_to_partition(self, partition: str, nodes: Iterable[str]) -> bool:
        """Add nodes to a partition; returns False when they were all members already."""
        parts = self.partitions()
        if partition not in parts:
            raise OperationFailed(partition, "no such partition")
        members = list(parts[partition])
        new = [n for n in _names(nodes) if n not in members]
        if new:
            self.set_partition_nodes(partition, [*members, *new])
        return bool(new)

    def remove_from_partition(self, partition: str, nodes: Iterable[str]) -> bool:
        parts = self.partitions()
        if partition not in parts:
            raise OperationFailed(partition, "no such partition")
        gone = set(_names(nodes))
        members = [n for n in parts[partition] if n not in gone]
        if len(members) == len(parts[partition]):
            return False
        self.set_partition_nodes(partition, members)
        return True

    # ------------------------------------------------------------- jobs

    def requeue(self, job_id: str) -> None:
        """Requeue a job; Slurm holds it ~120 s (BeginTime) unless ``release`` is called."""
        self.run(["scontrol", "requeue", _job(job_id)])

    def release(self, job_id: str) -> None:
        """Let a pending job start now (clears a requeue's BeginTime hold).

        Slurm applies this only once the job is back to PENDING; while it is
        still COMPLETING the requeue would set the hold again afterwards.
        """
        self.run(["scontrol", "update", f"jobid={_job(job_id)}", "starttime=now"])

    def cancel(self, job_id: str) -> None:
        self.run(["scancel", _job(job_id)])

    # ------------------------------------------------------------- reservations

    def create_reservation(
        self, name: str, nodes: Iterable[str], duration_min: int, *, users: str = "root",
        flags: str = "maint,ignore_jobs",
    ) -> None:
        """Fence nodes (e.g. for maintenance): only ``--reservation=name`` jobs run there."""
        if not _RESERVATION.match(name):
            raise ValueError(f"{name!r} is not a reservation name")
        if any(r.name == name for r in self.reservations()):
            return
        self.run([
            "scontrol", "create", "reservation", f"reservationname={name}", "starttime=now",
            f"duration={int(duration_min)}", f"nodes={compress(_names(nodes))}",
            f"flags={flags}", f"users={users}",
        ])

    def delete_reservation(self, name: str) -> None:
        if any(r.name == name for r in self.reservations()):
            self.run(["scontrol", "delete", f"reservationname={name}"])

"""Run the multi-node NCCL rounds of an acceptance (through Slurm, or over SSH), and narrow a slow one down.

Single-node burn-in cannot see what lies between nodes: a rail that trains at full
rate but drops packets, a leaf port, a spine uplink. So after burn-in the controller
runs ``all_reduce_perf`` across nodes — with ``srun`` on the site's Slurm for nodes of a
Slurm pool, and for nodes of a Kubernetes pool or of no scheduler with an mpirun-style
launch over the SSH fan-out (:class:`SshMpirun`: ``mpirun --host a,b`` started on the
group's first node), so every pool gets it — one launch per
group, every group of a round launched at once (the groups are disjoint, so they run
side by side) — first the rounds :func:`acceptance.topology.acceptance_rounds`
plans from the inventory's labels (same-leaf pairs, cross-spine pairs, NVLink blocks,
the ring), then, when any run came back slow, the rounds
:func:`acceptance.isolation.isolate` asks for to name the node(s) or link(s) at fault.

Every run keeps its srun argv, the Slurm job id (from ``srun -v``'s allocation line),
its raw output and exit status, so the evidence shows what ran where. A run that
failed to start or printed no result is an ``error`` and counts as slow: a node is
never cleared by a run that did not happen.
"""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Literal

from acceptance.fanout import SSH_UNREACHABLE, Target, Transport
from acceptance.isolation import Group, Isolation, isolate
from acceptance.judge import GroupRun
from acceptance.topology import Placement, acceptance_rounds, fabric_order
from burnin.parsers import ParseError
from burnin.parsers.nccl import parse as parse_nccl
from lifecycle.model import vocab

_JOBID = re.compile(r"^srun: jobid (\d+): nodes\(", re.MULTILINE)
_JOB_ALLOC = re.compile(r"^srun: job (\d+) (?:queued|has been allocated)", re.MULTILINE)
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}\Z")
NCCL_ARGS = ("-b", "1G", "-e", "8G", "-f", "2", "-g", "8")
"""1 GiB to 8 GiB, doubling, 8 GPUs per task: the sizes the profiles' busbw floors are judged at."""


LauncherKind = Literal["srun", "mpirun"]


class MultiNodeError(ValueError):
    """Groups or settings that must not be sent to Slurm or a node."""


def _check_group(group: Sequence[str]) -> None:
    for n in group:
        if not vocab.is_node_name(n):
            raise MultiNodeError(f"node name {n!r} is not allowed")
    if len(group) < 2 or len(set(group)) != len(group):
        raise MultiNodeError(f"a multi-node run needs two or more distinct nodes, not {list(group)}")


@dataclass(frozen=True)
class LaunchRecord:
    """One srun as it ran: enough to rebuild the judged run and to show it in the evidence."""

    nodes: tuple[str, ...]
    kind: str
    argv: tuple[str, ...]
    returncode: int | None
    stdout: str
    stderr: str
    job_id: str | None
    started_at: float
    seconds: float
    timed_out: bool = False
    launcher: LauncherKind = "srun"

    def to_dict(self) -> dict[str, Any]:
        return {"nodes": list(self.nodes), "kind": self.kind, "argv": list(self.argv),
                "returncode": self.returncode, "stdout": self.stdout, "stderr": self.stderr,
                "job_id": self.job_id, "started_at": self.started_at, "seconds": self.seconds,
                "timed_out": self.timed_out, "launcher": self.launcher}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> LaunchRecord:
        launcher: LauncherKind = "mpirun" if d.get("launcher") == "mpirun" else "srun"
        return cls(tuple(d["nodes"]), str(d["kind"]), tuple(d["argv"]), d["returncode"], str(d["stdout"]),
                   str(d["stderr"]), d["job_id"], float(d["started_at"]), float(d["seconds"]),
                   bool(d.get("timed_out", False)), launcher)

    def group_run(self, profile: str | None = None) -> GroupRun:
        """The run as the judge sees it: a parsed report, or the reason there is none."""
        how = self.launcher
        raw = f"$ {' '.join(self.argv)}\n{self.stdout}" + (f"\n--- {how} stderr ---\n{self.stderr}" if self.stderr
                                                           else "")
        report = None
        error: str | None = None
        if self.timed_out:
            error = f"{how} did not finish within {self.seconds:.0f} s"
        elif self.returncode != 0:
            said = self.stderr.strip() or self.stdout.strip()  # a launcher's own words, wherever it put them
            tail = " | ".join(ln.strip() for ln in said.splitlines()[-2:])
            error = f"{how} exited {self.returncode}: {tail[:300]}"
        else:
            try:
                report = parse_nccl(self.stdout, "all_reduce")
            except ParseError as exc:
                error = f"no nccl-tests result: {exc}"
        return GroupRun(self.nodes, self.kind, report, error, raw, job_id=self.job_id, profile=profile,
                        launcher=self.launcher)


@dataclass(frozen=True)
class Srun:
    """Launches all_reduce_perf across a group of nodes as one Slurm job (``srun``, argv lists only)."""

    job_name: str
    partition: str | None = None
    binary: str = "all_reduce_perf"
    args: tuple[str, ...] = NCCL_ARGS
    tasks_per_node: int = 1
    immediate_s: int = 60
    time_limit_min: int = 30
    env: Mapping[str, str] | None = None
    srun: str = "srun"

    def argv(self, group: Sequence[str]) -> list[str]:
        _check_group(group)
        if not _NAME.match(self.job_name) or (self.partition is not None and not _NAME.match(self.partition)):
            raise MultiNodeError("job or partition name is not allowed")
        words = [self.srun, "-v", "-l", f"--immediate={self.immediate_s}", "--exclusive",
                 f"--time={self.time_limit_min}", f"--job-name={self.job_name}",
                 f"--nodes={len(group)}", f"--ntasks-per-node={self.tasks_per_node}", f"--nodelist={','.join(group)}"]
        if self.partition:
            words.append(f"--partition={self.partition}")
        return [*words, "--", self.binary, *self.args]

    def run_round(self, groups: Sequence[Group], kind: str, timeout_s: float,
                  clock: Callable[[], float] = time.monotonic) -> list[LaunchRecord]:
        """Start one srun per group at once, wait for all; one record per group, in order."""
        procs = []
        out: list[LaunchRecord | None] = []
        argvs = [self.argv(g) for g in groups]  # all checked before the first job starts
        for g, argv in zip(groups, argvs, strict=True):
            wall0, t0 = time.time(), clock()
            try:
                proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, env=dict(self.env) if self.env is not None else None)
            except OSError as exc:  # no srun on this host: every run of the round is an error, not a crash
                out.append(LaunchRecord(tuple(g), kind, tuple(argv), 127, "", f"{self.srun}: {exc}", None, wall0, 0.0))
                continue
            out.append(None)
            procs.append((len(out) - 1, g, argv, wall0, t0, proc))
        deadline = clock() + timeout_s
        for i, g, argv, wall0, t0, proc in procs:
            try:
                stdout, stderr = proc.communicate(timeout=max(0.1, deadline - clock()))
                timed_out = False
            except subprocess.TimeoutExpired:
                # SIGTERM first: srun then ends the job step and the job with it (SIGKILL would leave
                # the job to its --time limit)
                proc.terminate()
                try:
                    stdout, stderr = proc.communicate(timeout=15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    stdout, stderr = proc.communicate()
                timed_out = True
            text_err = stderr.decode("utf-8", "replace")
            job = _JOBID.search(text_err) or _JOB_ALLOC.search(text_err)
            out[i] = LaunchRecord(tuple(g), kind, tuple(argv), None if timed_out else proc.returncode,
                                  stdout.decode("utf-8", "replace"), _quiet(text_err),
                                  job.group(1) if job else None, wall0, clock() - t0, timed_out)
        return [r for r in out if r is not None]


@dataclass(frozen=True)
class SshMpirun:
    """Launches all_reduce_perf across a group of nodes with ``mpirun``, started over SSH on its first node.

    For nodes that no Slurm schedules (a Kubernetes pool, or none yet): the controller reaches
    the group's first node through the fan-out's transport and runs ``mpirun --host a,b -np 2``
    there, which starts one rank per node (Open MPI's ssh launcher, as the MPI operator does in a
    Kubernetes cluster). Only rank 0 prints the table, as under srun. argv lists only; node names
    are validated before anything runs.
    """

    transport: Transport
    binary: str = "all_reduce_perf"
    args: tuple[str, ...] = NCCL_ARGS
    mpirun: str = "mpirun"

    def argv(self, group: Sequence[str]) -> list[str]:
        _check_group(group)
        return [self.mpirun, "--allow-run-as-root", "--host", ",".join(group), "-np", str(len(group)),
                "--map-by", "ppr:1:node", "--bind-to", "none", self.binary, *self.args]

    def run_round(self, groups: Sequence[Group], kind: str, timeout_s: float,
                  clock: Callable[[], float] = time.monotonic) -> list[LaunchRecord]:
        """One mpirun per group, all at once (the groups are disjoint); one record per group, in order."""
        argvs = [self.argv(g) for g in groups]  # all checked before the first launch

        def one(group: Group, argv: list[str]) -> LaunchRecord:
            wall0, t0 = time.time(), clock()
            target = Target(group[0], group[0])
            try:
                run = self.transport.run(target, argv, timeout_s)
            finally:
                self.transport.release(target)
            stderr = run.stderr
            if run.exit_code == SSH_UNREACHABLE:
                stderr = f"ssh to {group[0]} (the launching node) failed: {stderr}"
            return LaunchRecord(tuple(group), kind, tuple(argv), None if run.timed_out else run.exit_code,
                                run.stdout.decode("utf-8", "replace"), stderr, None, wall0, clock() - t0,
                                run.timed_out, "mpirun")

        if not groups:
            return []
        with ThreadPoolExecutor(max_workers=len(groups), thread_name_prefix="mpirun") as pool:
            return list(pool.map(one, groups, argvs))


def _quiet(stderr: str) -> str:
    """srun -v's stderr without its option dump (kept: the allocation, launches, errors)."""
    keep = [ln for ln in stderr.splitlines()
            if not re.match(r"^srun: (?:[a-z-]+\s+:|-{5,}|defined options|end of defined options)", ln)]
    return "\n".join(keep)


Launcher = Callable[[Sequence[Group], str], list[LaunchRecord]]
IsSlow = Callable[[GroupRun], bool]


@dataclass
class Stage:
    """What the multi-node stage ran and concluded."""

    launches: list[LaunchRecord] = field(default_factory=list)
    planned: list[dict[str, Any]] = field(default_factory=list)
    isolation: Isolation | None = None
    left_out: dict[str, str] = field(default_factory=dict)

    @property
    def rounds(self) -> int:
        return len(self.planned) + (self.isolation.n_rounds if self.isolation else 0)

    def culprits(self) -> dict[str, str]:
        return self.isolation.culprits() if self.isolation else {}

    def to_dict(self) -> dict[str, Any]:
        return {"rounds": self.rounds, "planned": self.planned,
                "isolation_rounds": self.isolation.n_rounds if self.isolation else 0,
                "isolation": self.isolation.to_dict() if self.isolation else None,
                "left_out": dict(self.left_out),
                "slurm_jobs": [x.job_id for x in self.launches if x.job_id],
                "launches": [x.to_dict() for x in self.launches]}


def run_stage(places: Sequence[Placement], launch: Launcher, is_slow: IsSlow, *, profile: str | None = None,
              max_parallel: int | None = None, left_out: Mapping[str, str] | None = None) -> Stage:
    """Run the planned rounds; when any run is slow, isolate the cause among the nodes not cleared."""
    stage = Stage(left_out=dict(left_out or {}))
    if len(places) < 2:
        stage.left_out.update({p.node: "no second node to run with" for p in places})
        return stage
    good: set[str] = set()
    slow_groups: list[Group] = []
    for number, plan in enumerate(acceptance_rounds(places), start=1):
        records = _batched(launch, plan.groups, plan.kind, max_parallel)
        stage.launches += records
        verdicts = [is_slow(r.group_run(profile)) for r in records]
        stage.planned.append({"round": number, "kind": plan.kind, "purpose": plan.purpose,
                              "groups": [list(g) for g in plan.groups], "slow": verdicts,
                              "left_out": list(plan.left_out)})
        for g, slow in zip(plan.groups, verdicts, strict=True):
            if slow:
                slow_groups.append(g)
            else:
                good.update(g)
    if not slow_groups:
        return stage
    order = fabric_order(places)
    in_slow = {n for g in slow_groups for n in g}
    suspects = [n for n in order if n in in_slow and n not in good]
    if not suspects:  # every node was fast somewhere: the fault lies between nodes (a link or a path)
        suspects = [n for n in order if n in in_slow]
    counter = [0]

    def oracle(groups: Sequence[Group]) -> list[bool]:
        counter[0] += 1
        records = _batched(launch, groups, f"isolation-r{counter[0]}", max_parallel)
        stage.launches.extend(records)
        return [is_slow(r.group_run(profile)) for r in records]

    stage.isolation = isolate(suspects, oracle, known_good=sorted(good - set(suspects)),
                              max_parallel=max_parallel)
    return stage


def _batched(launch: Launcher, groups: Sequence[Group], kind: str, cap: int | None) -> list[LaunchRecord]:
    """One round; a planner round wider than ``cap`` runs in slices of at most ``cap`` jobs."""
    if not cap or len(groups) <= cap:
        return launch(groups, kind)
    out: list[LaunchRecord] = []
    for i in range(0, len(groups), cap):
        out += launch(groups[i : i + cap], kind)
    return out

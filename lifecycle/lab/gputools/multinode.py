"""What a lab node's nccl-tests see when Slurm launches them on several nodes at once.

Acceptance runs all_reduce across node pairs and rings with ``srun`` on the lab's
real Slurm, so the fake ``all_reduce_perf`` must behave like the real one under a
launcher: every task is started by a slurmd with ``SLURMD_NODENAME``, ``SLURM_PROCID``
and the step's node list in its environment; only rank 0 prints the table (as
nccl-tests does), and the bandwidth it prints is the one the *slowest participant*
allows. Two limits decide it, as on real HGX systems:

* **NVLink inside each node** — a node with slow NVLink caps the whole collective;
* **the InfiniBand rails between nodes** — NCCL spreads channels evenly over a node's
  rails, so a collective runs at the pace of the slowest rail: a rail that is down
  doubles the load on another (half the bandwidth), a lossy rail that still trains at
  full rate slows its channels to its real throughput.

Every slurmd of the lab runs on one host, so the tool resolves its node from
``SLURMD_NODENAME`` (the node directories are siblings) rather than from the path it
was started by. Everything here is a function of the environment and the node states;
the only file it looks at is whether a sibling node directory exists.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from lifecycle.drivers.slurm.hostlist import expand
from lifecycle.lab.gputools.state import NODE_FILE, NodeState


@dataclass(frozen=True)
class SlurmStep:
    """The job step a task belongs to, as slurmd describes it in the task's environment."""

    job_id: str
    node: str
    procid: int
    ntasks: int
    nodes: tuple[str, ...]

    @property
    def tasks_per_node(self) -> int:
        return max(1, self.ntasks // max(1, len(self.nodes)))


def slurm_step(env: Mapping[str, str]) -> SlurmStep | None:
    """The step this process runs in, or None outside Slurm."""
    node = env.get("SLURMD_NODENAME")
    if not node or "SLURM_PROCID" not in env:
        return None
    hostlist = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST") or node
    nodes = tuple(expand(hostlist))
    ntasks = int(env.get("SLURM_STEP_NUM_TASKS") or env.get("SLURM_NTASKS") or len(nodes))
    return SlurmStep(env.get("SLURM_JOB_ID", ""), node, int(env["SLURM_PROCID"]), ntasks, nodes)


def node_dir(called_from: Path, env: Mapping[str, str]) -> Path:
    """The node a tool runs on: the one slurmd says (lab nodes are siblings), else its own ``bin/``'s."""
    name = env.get("SLURMD_NODENAME")
    if name and "/" not in name and name not in (".", ".."):
        sibling = called_from.parent / name
        if (sibling / NODE_FILE).is_file():
            return sibling
    return called_from


@dataclass(frozen=True)
class Limit:
    """The busbw ceiling of a multi-node collective, and who sets it."""

    busbw_gbps: float
    node: str
    why: str


def rail_limit(s: NodeState) -> float:
    """A node's inter-node bandwidth (GB/s): rails x the slowest rail's share of its load."""
    up = [h for h in s.hcas if h.up]
    if not up:
        return 0.0
    load = math.ceil(len(s.hcas) / len(up))  # channels of a down rail move to the others
    return len(s.hcas) * min(h.data_gbytes_s for h in up) / load


def collective_limit(states: Sequence[NodeState], share: float) -> Limit:
    """The slowest participant's ceiling on busbw, NVLink and rails both considered."""
    limits: list[Limit] = []
    for s in states:
        nvlink = s.model.busbw_gbps * share * s.busbw_factor()
        limits.append(Limit(nvlink, s.name, "NVLink"))
        up = sum(h.up for h in s.hcas)
        why = "InfiniBand rails" if up == len(s.hcas) else f"InfiniBand rails ({up} of {len(s.hcas)} up)"
        limits.append(Limit(rail_limit(s) * share, s.name, why))
    return min(limits, key=lambda x: x.busbw_gbps)

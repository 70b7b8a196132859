"""`mpirun --host a,b -np 2 … all_reduce_perf …` on a lab node: the SSH-launched multi-node run.

Nodes that no Slurm schedules (a Kubernetes pool, or none) are tested across nodes by an
mpirun started over SSH on one node of the group, which starts one rank per host as Open
MPI's ssh launcher does. The lab models it the way it models srun: the hosts are sibling
lab nodes, a host that is not a lab node or is not booted fails the launch with the
words Open MPI uses, only rank 0 prints, and the bandwidth is the one the slowest
participant allows (:mod:`lifecycle.lab.gputools.multinode`). A single host runs the tool
as a single-node run would.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from lifecycle.lab.gputools import nccl
from lifecycle.lab.gputools.multinode import SlurmStep
from lifecycle.lab.gputools.state import NODE_FILE, load

_FLAGS = {"--allow-run-as-root", "--oversubscribe", "--tag-output"}
_WITH_VALUE = {"--host", "-H", "-np", "-n", "--map-by", "--bind-to", "-x", "--mca"}


@dataclass(frozen=True)
class Launch:
    hosts: tuple[str, ...]
    np: int
    program: str
    args: list[str]


def parse(argv: list[str]) -> Launch | str:
    """The launch mpirun was asked for, or the error it prints."""
    hosts: list[str] = []
    np: int | None = None
    i = 0
    while i < len(argv) and argv[i].startswith("-"):
        opt = argv[i]
        if opt in _FLAGS:
            i += 1
            continue
        if opt not in _WITH_VALUE or i + 1 >= len(argv):
            return f"mpirun: option {opt!r} is not simulated in the lab"
        value = argv[i + 1]
        if opt in ("--host", "-H"):
            hosts += [h.split(":")[0] for h in value.split(",") if h]
        elif opt in ("-np", "-n"):
            if not value.isdigit():
                return f"mpirun: -np {value!r} is not a number"
            np = int(value)
        elif opt == "--mca":
            i += 1  # --mca takes a key and a value
        i += 2
    if i >= len(argv):
        return "mpirun: no executable was given"
    if not hosts:
        return "mpirun: no --host was given (the lab has no hostfile)"
    return Launch(tuple(hosts), np or len(hosts), argv[i], argv[i + 1:])


def main(argv: list[str], node_dir: Path) -> tuple[str, int]:
    launch = parse(argv)
    if isinstance(launch, str):
        return launch + "\n", 1
    tool = Path(launch.program).name
    if tool not in nccl.OPS:
        return f"mpirun: {launch.program} is not a lab tool mpirun can start (known: {', '.join(nccl.OPS)})\n", 1
    dirs = [node_dir.parent / h for h in launch.hosts]
    for host, d in zip(launch.hosts, dirs, strict=True):
        if not (d / NODE_FILE).is_file():
            return (f"ssh: Could not resolve hostname {host}: Name or service not known\n"
                    "ORTE was unable to reliably start one or more daemons.\n"), 1
    states = [load(d) for d in dirs]
    down = [s.name for s in states if not s.booted_at]
    if down:
        return (f"ssh: connect to host {down[0]} port 22: No route to host\n"
                "ORTE was unable to reliably start one or more daemons.\n"), 1
    if len(states) == 1:
        return nccl.main(tool, launch.args, states[0])
    step = SlurmStep("", launch.hosts[0], 0, launch.np, launch.hosts)
    return nccl.main_multinode(tool, launch.args, step, states)

"""`nvidia-smi -r` (``--gpu-reset``) for a simulated node: a reset that behaves like the hardware's.

A repair resets a GPU because some faults are cleared by it (a failed row
remap, NVIDIA's RESET_GPU bucket) and others are not (a GPU that has fallen
off the bus needs the host rebooted). So the lab's reset has to do what the
real one does, or a repair could pass in the lab and fail on a node:

* it takes time (``nvidia-smi.reset`` in :mod:`lifecycle.lab.gputools.timing`,
  scaled like every tool);
* it is refused while a process uses a GPU: the lab's GPU-loading tools
  (``dcgmi``, the nccl-tests, ``mpirun``) register themselves in the node's
  ``gpu-users/`` while they run, and the ``gpu-held`` fault stands for a
  process that never lets go. The words and exit status are the driver's
  (255, "is currently in use by another process");
* a GPU that has fallen off the bus cannot be reset (exit 15, "GPU is lost");
* a successful reset clears the faults that a reset clears
  (:data:`lifecycle.lab.faults.CLEARED_BY`), so the kernel log, NVML and DCGM
  stop showing them on their next call.

Wording of the answers: NVIDIA/gpu-operator#118 and NVIDIA/NVSentinel#1690
(``GPU 00000000:C1:00.0 was successfully reset.``; the in-use refusal, exit 255).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from lifecycle.lab.faults import clear_faults
from lifecycle.lab.gputools.state import Gpu, load
from lifecycle.model.procs import pid_start

IN_USE = 255
GPU_IS_LOST = 15
NOT_FOUND = 6
USERS_DIR = "gpu-users"
GPU_USERS = frozenset({"dcgmi", "mpirun", "all_reduce_perf", "all_gather_perf", "reduce_scatter_perf",
                       "alltoall_perf"})
"""The lab tools that load the GPUs while they run (a reset meanwhile is refused)."""

_BUSY_TAIL = ("1 device is currently being used by one or more other processes (e.g., Fabric Manager, CUDA "
              "application, graphics application such as an X server, or a monitoring application such as "
              "another instance of nvidia-smi). Please first kill all processes using this device and all "
              "compute applications running in the system.\n")


@contextmanager
def using_gpus(node_dir: Path, tool: str) -> Iterator[None]:
    """Register this process as a user of the node's GPUs while ``tool`` runs (GPU-loading tools only)."""
    if tool not in GPU_USERS:
        yield
        return
    users = node_dir / USERS_DIR
    users.mkdir(exist_ok=True)
    pid = os.getpid()
    mark = users / str(pid)
    mark.write_text(f"{tool}\n{pid_start(pid) or ''}\n", encoding="utf-8")
    try:
        yield
    finally:
        mark.unlink(missing_ok=True)


def live_users(node_dir: Path) -> list[str]:
    """The tools running on the node's GPUs now; a mark whose process is gone, or whose PID another
    process has since been given (another start time: a tool killed before its ``finally``, by SIGKILL or
    a SIGTERM or SIGHUP Python does not catch, leaves its mark), is stale and removed."""
    users = node_dir / USERS_DIR
    out = []
    for mark in sorted(users.iterdir()) if users.is_dir() else []:
        try:
            tool, _, started = mark.read_text(encoding="utf-8").partition("\n")
            now = pid_start(int(mark.name))
        except (ValueError, FileNotFoundError):
            now = None
        started = started.strip()
        if now is None or (started and started != now):
            mark.unlink(missing_ok=True)
            continue
        out.append(tool.strip() or mark.name)
    return out


def _targets(gpus: Sequence[Gpu], wanted: str | None) -> list[Gpu]:
    if wanted is None:
        return list(gpus)
    return [g for g in gpus if wanted in (str(g.index), g.uuid, g.bus_id, g.serial)]


def reset(node_dir: Path, wanted: str | None) -> tuple[str, int]:
    """Reset the GPU ``wanted`` names (``-i``), or every GPU; the answer and exit status of the real tool."""
    s = load(node_dir)
    targets = _targets(s.gpus, wanted)
    if not targets:
        return "No devices were found\n", NOT_FOUND
    lost = next((g for g in targets if g.lost), None)
    if lost is not None:
        return (f"Unable to determine the device handle for GPU{lost.bus_id[4:]}: GPU is lost.  "
                "Reboot the system to recover this GPU\n", GPU_IS_LOST)
    held = s.fault.profile == "gpu-held" and any(g.index == s.fault.gpu for g in targets)
    if held or live_users(node_dir):
        busy = next((g for g in targets if g.index == s.fault.gpu), targets[0]) if held else targets[0]
        return f"GPU {busy.bus_id} is currently in use by another process.\n\n" + _BUSY_TAIL, IN_USE
    clear_faults(node_dir, "reset", [g.index for g in targets])
    return "".join(f"GPU {g.bus_id} was successfully reset.\n" for g in targets), 0

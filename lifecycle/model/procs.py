"""Which process a PID names: its start time, read once here for every part that keeps a PID.

A PID names a process only while it lives: the kernel hands it to another one
later (``pid_max`` is 32768 on many hosts). So whatever keeps a PID to ask
"does it still run?" later keeps its start time beside it and compares: the
store's executors, the Slurm daemon restart marks and the lab's GPU users.
It is here, in the model, because the store, the drivers and the lab may all
import the model and none of them may import another.
"""

from __future__ import annotations

from pathlib import Path


def pid_start(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (``/proc/PID/stat`` field 22), or None."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may hold spaces: split after it.
    return stat.rpartition(")")[2].split()[19]

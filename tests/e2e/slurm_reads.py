"""What the lab's Slurm daemons say of themselves, for the upgrade tests: start times, pids, their own logs.

A Slurm upgrade test must show that each daemon restarted exactly once. The
hook's own record (``daemons.log``) says what the hook did; these say what
the daemons did: slurmdbd's and the primary slurmctld's ``BOOT_TIME``,
each slurmd's ``SlurmdStartTime``, each daemon's pid file, and the line each
daemon writes to its log when it starts (``slurmctld version … started``).
"""

from __future__ import annotations

import json
import re
import subprocess

from tests.e2e.conftest import RunningLab


def slurm(lab: RunningLab, *argv: str) -> str:
    res = subprocess.run(list(argv), env=lab.env, capture_output=True, text=True, timeout=60, check=False)
    assert res.returncode == 0, res.stdout + res.stderr
    return res.stdout


def pid(lab: RunningLab, name: str) -> str:
    return (lab.dir / "slurm" / "run" / f"{name}.pid").read_text().strip()


def dbd_boot(lab: RunningLab) -> str:
    part = slurm(lab, "sacctmgr", "-n", "show", "configuration").partition("SlurmDBD configuration:")[2]
    return next(line.split("=", 1)[1].strip() for line in part.splitlines() if line.startswith("BOOT_TIME"))


def ctld_boot(lab: RunningLab) -> str:
    return next(line.split("=", 1)[1].strip() for line in slurm(lab, "scontrol", "show", "config").splitlines()
                if line.startswith("BOOT_TIME"))


def slurmd_start(lab: RunningLab, node: str) -> str:
    words = slurm(lab, "scontrol", "-o", "show", "node", node).split()
    return next(w.split("=", 1)[1] for w in words if w.startswith("SlurmdStartTime="))


def training(lab: RunningLab) -> list[str]:
    """The training pool's nodes in service, by name."""
    listed = json.loads(lab.racklife("nodes", "list", "--json").stdout)
    return sorted(n["name"] for n in listed if n["pool"] == "training" and n["state"] == "in_service")


class Logs:
    """The lab's Slurm logs from now on: the hook's record (``daemons.log``) and the daemons' own."""

    def __init__(self, lab: RunningLab) -> None:
        self.dir = lab.dir / "slurm" / "log"
        self.start = {p.name: p.stat().st_size for p in self.dir.glob("*.log")}

    def new(self, name: str) -> str:
        path = self.dir / name
        return path.read_bytes()[self.start.get(name, 0):].decode() if path.exists() else ""

    def restarts(self) -> list[str]:
        """What the hook did since, in order (``restart slurmdbd``, ``kill slurmctld primary``, …)."""
        return [line.split(" ", 1)[1] for line in self.new("daemons.log").splitlines()]

    def started(self, name: str, daemon: str) -> int:
        """How many times ``daemon`` wrote its start line (``slurmctld version … started``) to log ``name``."""
        return len(re.findall(rf"\] {daemon} version \S+ started", self.new(name)))

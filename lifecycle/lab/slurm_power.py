"""The lab's Slurm ResumeProgram/SuspendProgram: a simulated node's power is its slurmd.

In production racklife's programs hand the request to a durable workflow
(bring the node back from Kubernetes, or lend it). In the lab a node's power
is its slurmd process. Two traps from running this on one host are handled
here: slurmscriptd starts us with signals blocked and stdin closed (a slurmd
inheriting that cannot be stopped later), and slurmctld refuses a "resumed"
node whose boot time predates the resume request, so slurmd starts in a time
namespace whose boot clock says the machine just booted.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from lifecycle.drivers.slurm.hostlist import expand


def _conf_value(conf: Path, key: str) -> str:
    for line in conf.read_text().splitlines():
        k, _, v = line.partition("=")
        if k.strip().lower() == key.lower():
            return v.strip()
    raise KeyError(key)


def resume(conf: Path, hosts: list[str]) -> int:
    signal.pthread_sigmask(signal.SIG_SETMASK, [])
    # slurmscriptd's PATH lacks the sbin directories where slurmd lives.
    os.environ["PATH"] = "/usr/sbin:/usr/bin:/sbin:/bin"
    # The boot must come after the resume request, or slurmctld keeps waiting.
    time.sleep(1.0)
    failed = 0
    for host in hosts:
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        res = subprocess.run(
            ["unshare", "--fork", "--time", f"--boottime=-{int(uptime)}",
             "slurmd", "-N", host, "-f", str(conf)],
            stdin=subprocess.DEVNULL, capture_output=True, timeout=30, check=False,
        )
        _log(conf, f"resume {host}: exit {res.returncode} {res.stderr.decode(errors='replace')}")
        if res.returncode != 0:
            failed += 1
    return 1 if failed else 0


def _log(conf: Path, line: str) -> None:
    """slurmctld discards our output; keep it next to its own log."""
    log = Path(_conf_value(conf, "SlurmctldLogFile")).parent / "power.log"
    with log.open("a") as f:
        f.write(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {line.strip()}\n")


def suspend(conf: Path, hosts: list[str]) -> int:
    run_dir = Path(_conf_value(conf, "SlurmdPidFile")).parent
    for host in hosts:
        _log(conf, f"suspend {host}")
        pid_file = run_dir / f"slurmd-{host}.pid"
        with contextlib.suppress(OSError, ValueError):
            os.kill(int(pid_file.read_text().strip()), signal.SIGTERM)
    return 0


def main(argv: list[str]) -> int:
    action, conf, *lists = argv
    hosts = [h for hl in lists for h in expand(hl)]
    if action == "resume":
        return resume(Path(conf), hosts)
    if action == "suspend":
        return suspend(Path(conf), hosts)
    sys.stderr.write(f"unknown action {action!r}\n")
    return 2

"""The lab's Slurm power mechanics: a simulated node's power is its slurmd.

Two uses. Alone, ``resume``/``suspend`` are the lab's own ResumeProgram and
SuspendProgram (start or stop the node's slurmd). With racklife's elastic
capacity, slurmctld calls racklife's programs instead, and racklife's
workflows call ``role-switch`` here as their node-role hook
(``lifecycle.drivers.slurm.role``): to ``kubernetes`` stops the node's slurmd
and lets its "kubelet" register the Node object in the lab's Kubernetes
stand-in; to ``slurm`` marks that Node NotReady (the kubelet stops) and boots
the slurmd again. Two traps from running this on one host are handled
here: slurmscriptd starts us with signals blocked and stdin closed (a slurmd
inheriting that cannot be stopped later), and slurmctld refuses a "resumed"
node whose boot time predates the resume request, so slurmd starts in a time
namespace whose boot clock says the machine just booted.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from lifecycle.drivers.slurm.hostlist import expand
from lifecycle.lab import slurm_daemons


def _conf_value(conf: Path, key: str) -> str:
    for line in conf.read_text().splitlines():
        k, _, v = line.partition("=")
        if k.strip().lower() == key.lower():
            return v.strip()
    raise KeyError(key)


def uptime() -> float:
    """The host's seconds since boot (/proc/uptime)."""
    return float(Path("/proc/uptime").read_text().split()[0])


def booted_slurmd(conf: Path, host: str) -> list[str]:
    """argv: the host's slurmd in a time namespace whose boot clock says the machine just booted
    (at the host's last whole-second uptime mark: the offset is whole seconds); configless when
    slurmctld serves the configuration (``slurm_daemons.slurmd_argv``)."""
    return slurm_daemons.slurmd_argv(conf, host, int(uptime()))


def resume(conf: Path, hosts: list[str]) -> int:
    requested = uptime()  # slurmctld stamped its resume request (boot_req_time) before we started
    signal.pthread_sigmask(signal.SIG_SETMASK, [])
    # slurmscriptd's PATH lacks the sbin directories where slurmd lives.
    os.environ["PATH"] = "/usr/sbin:/usr/bin:/sbin:/bin"
    # slurmctld takes a node's boot time as its own whole-second clock minus the slurmd's
    # whole-second uptime, and keeps a node POWERING_UP (until ResumeTimeout) while that is
    # before the request. The namespace's boot clock is offset by whole seconds, so the boot it
    # shows is the host's last whole-second uptime mark: wait until that mark is at least one
    # second after the request, which leaves the second that the two roundings can take away.
    mark = math.floor(requested) + 2
    time.sleep(max(0.0, mark - uptime()))
    failed = 0
    for host in hosts:
        res = subprocess.run(
            booted_slurmd(conf, host), stdin=subprocess.DEVNULL, capture_output=True, timeout=30, check=False,
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


def suspend(conf: Path, hosts: list[str], wait_s: float = 0.0) -> int:
    """Stop the hosts' slurmd; with ``wait_s``, wait up to that long for each to exit."""
    run_dir = Path(_conf_value(conf, "SlurmdPidFile")).parent
    for host in hosts:
        _log(conf, f"suspend {host}")
        pid_file = run_dir / f"slurmd-{host}.pid"
        with contextlib.suppress(OSError, ValueError):
            pid = int(pid_file.read_text().strip())
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + wait_s
            while time.monotonic() < deadline and Path(f"/proc/{pid}").exists():
                time.sleep(0.05)
    return 0


def role_switch(conf: Path, kubeconfig: Path, role: str, node: str, gpus: int) -> int:
    """The lab's node-role hook: the node stops serving one scheduler and boots into the other."""
    from lifecycle.lab.kube.run import AdminError, KubeAdmin

    kube = KubeAdmin.from_kubeconfig(kubeconfig)
    if role == "kubernetes":
        suspend(conf, [node], wait_s=10.0)
        kube.join(node, gpus=gpus)  # the kubelet registers the Node (kept if it exists)
        kube.set_ready(node, True)
        _log(conf, f"role {node}: kubernetes")
        return 0
    if role == "slurm":
        with contextlib.suppress(AdminError):  # a node that never served Kubernetes has no Node
            kube.set_ready(node, False)
        _log(conf, f"role {node}: slurm")
        return resume(conf, [node])
    sys.stderr.write(f"unknown role {role!r}\n")
    return 2


def main(argv: list[str]) -> int:
    if argv and argv[0] == "role-switch":
        args = argparse.ArgumentParser(prog="slurm_power role-switch")
        args.add_argument("--conf", type=Path, required=True)
        args.add_argument("--kubeconfig", type=Path, required=True)
        args.add_argument("--gpus", type=int, default=8)
        args.add_argument("role", choices=("slurm", "kubernetes"))
        args.add_argument("node")
        opts = args.parse_args(argv[1:])
        return role_switch(opts.conf, opts.kubeconfig, opts.role, opts.node, opts.gpus)
    action, conf, *lists = argv
    hosts = [h for hl in lists for h in expand(hl)]
    if action == "resume":
        return resume(Path(conf), hosts)
    if action == "suspend":
        return suspend(Path(conf), hosts)
    sys.stderr.write(f"unknown action {action!r}\n")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

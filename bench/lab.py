"""Time to `racklife lab up` and the lab's memory, for 8, 32 and 128 nodes.

"Ready" is what `lab up` waits for: every node booted with its sshd answering
and every slurmd registered idle in Slurm. Memory is the summed RSS of the
lab's processes at ready (the supervisor with its emulators and the Kubernetes
stand-in, munge, slurmctld, every slurmd and sshd). Goal (issue 4): 8 nodes
ready in under 60 s and under 1.5 GB. Needs root.

    python bench/lab.py [--nodes 8 32 128]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

EXE = shutil.which("racklife") or str(Path(sys.executable).with_name("racklife"))


def rss_mb(pids: set[int]) -> float:
    total = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            continue
    return total / 1024


def lab_pids(supervisor: int, lab_dir: Path) -> set[int]:
    """The supervisor and its descendants, plus anything whose command line names the lab dir."""
    children: dict[int, list[int]] = {}
    cmdlines: dict[int, str] = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            ppid = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
            cmdlines[int(proc.name)] = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(proc.name))
    found, todo = set(), [supervisor]
    while todo:
        pid = todo.pop()
        if pid not in found:
            found.add(pid)
            todo.extend(children.get(pid, []))
    found |= {pid for pid, cmd in cmdlines.items() if str(lab_dir) in cmd}
    return found


def one(n: int) -> None:
    root = Path(tempfile.mkdtemp(prefix="rlb", dir="/tmp"))
    lab_dir, prefix = root / "lab", f"rlb{os.getpid() % 1000}-"
    try:
        t0 = time.perf_counter()
        up = subprocess.run([EXE, "lab", "up", "--nodes", str(n), "--dir", str(lab_dir), "--prefix", prefix,
                             "--timeout", "900"], capture_output=True, text=True, check=False)
        ready = time.perf_counter() - t0
        if up.returncode != 0:
            raise SystemExit(f"lab up {n} failed: {up.stderr[-2000:]}")
        state = json.loads(subprocess.run([EXE, "lab", "status", "--dir", str(lab_dir), "--json"],
                                          capture_output=True, text=True, check=True).stdout)
        pids = lab_pids(int(state["pid"]), lab_dir)
        mem = rss_mb(pids)
        t1 = time.perf_counter()
        subprocess.run([EXE, "lab", "down", "--dir", str(lab_dir), "--prefix", prefix], capture_output=True,
                       check=False)
        down = time.perf_counter() - t1
        print(f"{n:>6} {ready:>9.1f} {mem:>10.0f} {mem / n:>9.1f} {len(pids):>9} {down:>8.1f}", flush=True)
    finally:
        subprocess.run([EXE, "lab", "down", "--dir", str(lab_dir), "--prefix", prefix], capture_output=True,
                       check=False)
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, nargs="+", default=[8, 32, 128])
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("run as root: the lab creates network namespaces and daemons")
    print(f"{'nodes':>6} {'ready s':>9} {'RSS MiB':>10} {'MiB/node':>9} {'processes':>9} {'down s':>8}")
    for n in args.nodes:
        one(n)


if __name__ == "__main__":
    main()

"""`racklife lab tour`: the embedded demo — a whole rack build on an emulated rack, then tear-down.

It runs the very commands a person would type, printing each one: lab up (with
one faulty node), image build, `racklife build` (import → provision → accept
→ join), a power cycle through a BMC, a Slurm job on two nodes, lab status,
lab down. It fails if any of them does not do what it should.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import typer

from lifecycle.cli._common import FAILED, err_console, out_console
from lifecycle.cli.lab import parse_exports
from lifecycle.lab import rack

FAULTY = ("node-03", "slow-nvlink")


class TourFailed(Exception):
    pass


def _exe() -> str:
    return shutil.which("racklife") or str(Path(sys.executable).with_name("racklife"))


def _run(env: dict[str, str], argv: list[str], *, expect: tuple[int, ...] = (0,), capture: bool = False,
         timeout: float = 900) -> subprocess.CompletedProcess[str]:
    shown = ["racklife", *argv[1:]] if argv[0] == _exe() else argv
    out_console.print(f"\n[bold cyan]$ {' '.join(shlex.quote(a) for a in shown)}[/]")
    proc = subprocess.run(argv, env=env, text=True, capture_output=capture, timeout=timeout, check=False)
    if capture and proc.stdout:
        sys.stdout.write(proc.stdout)
    if proc.returncode not in expect:
        raise TourFailed(f"{' '.join(shown)} exited {proc.returncode}: {(proc.stderr or '')[-800:]}")
    return proc


def tour(nodes: int, lab_dir: Path, prefix: str) -> None:
    exe = _exe()
    base = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "RACKLIFE_"))}
    with tempfile.TemporaryDirectory(prefix="racklife-tour-") as tmp:
        faults = Path(tmp) / "faults.yaml"
        faults.write_text(f"{FAULTY[0]}: {FAULTY[1]}\n")
        _run(base, [exe, "lab", "up", "--nodes", str(nodes), "--dir", str(lab_dir), "--prefix", prefix,
                    "--faults", str(faults)])
        try:
            exports = _run(base, [exe, "lab", "env", "--dir", str(lab_dir)], capture=True).stdout
            env = base | parse_exports(exports)
            inventory = env["RACKLIFE_INVENTORY"]
            cache = Path.home() / ".cache" / "racklife" / "debs"
            _run(env, [exe, "image", "build", "minimal", "--cache", str(cache)])
            # node-03's NVLink is slow: the build quarantines it and carries on with the others.
            _run(env, [exe, "build", inventory, "--boot-timeout", "120"], expect=(0, 1))
            listed = json.loads(_run(env, [exe, "nodes", "list", "--json"], capture=True).stdout)
            states = {n["name"]: n["state"] for n in listed}
            pools = {n["name"]: n["pool"] for n in listed}
            if states.get(FAULTY[0]) != "quarantined":
                raise TourFailed(f"{FAULTY[0]} should be quarantined, is {states.get(FAULTY[0])}")
            # Training nodes join Slurm, inference nodes their Kubernetes pool (the lab's stand-in).
            want = {n: "in_service" for n in states if n != FAULTY[0] and pools[n] in ("training", "inference")}
            wrong = {n: s for n, s in states.items() if n in want and s != want[n]}
            if wrong:
                raise TourFailed(f"nodes not where the build should leave them: {wrong}")
            serving = sorted(n for n, s in states.items() if s == "in_service")
            # A node in service: refused without --force (the store and Slurm are not told); the tour shows
            # Slurm taking it back after the cycle.
            _run(env, [exe, "bmc", "power", "cycle", serving[0], "--yes", "--force"])
            _wait_idle(env, serving[0], 120)
            _run(env, ["srun", "--immediate=30", "-p", "training", "-N2", "-w", ",".join(serving[:2]),
                       "hostname"], capture=True, timeout=120)
            _run(env, [exe, "lab", "status", "--dir", str(lab_dir)])
        finally:
            _run(base, [exe, "lab", "down", "--dir", str(lab_dir), "--prefix", prefix, "--yes"], expect=(0, 1, 2))


def _wait_idle(env: dict[str, str], node: str, timeout_s: float) -> None:
    """After a power cycle the node's slurmd re-registers: wait for Slurm to call it idle again."""
    deadline = time.monotonic() + timeout_s
    state = ""
    while time.monotonic() < deadline:
        state = subprocess.run(["sinfo", "-h", "-n", node, "-o", "%t"], env=env, capture_output=True,
                               text=True, check=False).stdout.strip()
        if state == "idle":
            out_console.print(f"{node} is back: sinfo says {state}")
            return
        time.sleep(1)
    raise TourFailed(f"{node} did not come back idle in Slurm within {timeout_s:.0f} s (state {state!r})")


def tour_cmd(
    nodes: int = typer.Option(8, "--nodes", min=4, max=128, help="Nodes in the tour's lab rack."),
    lab_dir: Path = typer.Option(rack.DEFAULT_LAB_DIR, "--dir", help="Lab directory."),
    prefix: str = typer.Option("rltour-", "--prefix", help="Name prefix of the tour lab's namespaces."),
) -> None:
    """Bring up a lab rack, build it end to end, use it, tear it down (needs root)."""
    try:
        tour(nodes, lab_dir, prefix)
    except TourFailed as exc:
        err_console.print(f"[bold red]tour failed:[/] {exc}")
        raise typer.Exit(FAILED) from None
    out_console.print("\n[bold green]tour complete[/]: built, accepted, served, cycled and torn down.")

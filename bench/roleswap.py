"""Role-swap latency by phase on a built lab: one node, then eight at once; racklife's own overhead apart.

    python bench/roleswap.py [--nodes 16] [--concurrent 8] [--keep]   (root: the lab)

Goal (issue 17): racklife's own overhead <= 10 s per swap, and 8 concurrent
swaps <= 15 s of overhead in all.

It brings up a lab (``racklife lab up``: real Slurm, the Kubernetes stand-in,
simulated nodes), builds it (``racklife build``: provision, accept, join),
then moves training nodes to inference with the real CLI, as an operator
would: ``racklife role-swap NODE --to inference --json`` of one training
node in service, then of eight others in one command (eight runs at once).
No job runs on them, so the drain has nothing to wait for.

Each swap's phases come from its run (``phases``: drain wait, move, switch, re-test,
join, as recorded in the node's history). The world's waits are measured
where they happen, not estimated:

* the role switch: the site's hook (``$RACKLIFE_NODE_ROLE_CMD``, the lab's
  stops slurmd and registers the Node) runs through a shim that logs when
  each call started and ended;
* the burn-in: the run time the burn-in itself recorded on the node
  (``burnin_started_at`` .. ``burnin_ended_at`` in the acceptance evidence).

racklife's overhead for one swap = the command's wall time (process start
included) - hook time - burn-in time. For the concurrent swaps, the overhead
in all = the command's wall time - the longest node's hook + burn-in time (the
world's waits overlap; this credits the world with no more than one node's
worth). The job drain is not in either: nothing runs on the nodes.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
EXE = shutil.which("racklife") or str(Path(sys.executable).with_name("racklife"))

SHIM = """#!/bin/sh
# bench/roleswap.py: time the site's role-switch hook (the world's part of a swap)
t0=$(date +%s.%N)
"$@"
rc=$?
t1=$(date +%s.%N)
echo "$t0 $t1 $*" >> {log}
exit $rc
"""


def racklife(env: dict[str, str], *args: str, timeout: float = 1800) -> subprocess.CompletedProcess[str]:
    return subprocess.run([EXE, *args], env=env, capture_output=True, text=True, timeout=timeout)


def hook_seconds(log: Path, since: float) -> dict[str, float]:
    """Seconds the hook ran per node, for calls started after ``since`` (epoch)."""
    out: dict[str, float] = {}
    if not log.exists():
        return out
    for line in log.read_text().splitlines():
        t0, t1, *argv = line.split()
        if float(t0) >= since and argv:
            out[argv[-1]] = out.get(argv[-1], 0.0) + float(t1) - float(t0)
    return out


def burnin_seconds(home: Path, node: str, run_id: str) -> float:
    """The burn-in's own run time on the node, from the evidence of the run's re-test."""
    from lifecycle.store import Store

    store = Store(f"sqlite:///{home / 'racklife.sqlite'}")
    try:
        records = [r for r in store.acceptance_records(node) if r.run_id and run_id in r.run_id]
        records = records or store.acceptance_records(node)[:1]
    finally:
        store.close()
    if not records or not records[0].evidence_dir:
        raise SystemExit(f"{node}: no acceptance evidence for run {run_id}: the re-test left no record")
    for path in Path(records[0].evidence_dir).rglob("*.json"):
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(doc, dict) and doc.get("node") == node and doc.get("burnin_started_at"):
            start, end = (datetime.fromisoformat(doc[k]) for k in ("burnin_started_at", "burnin_ended_at"))
            return (end - start).total_seconds()
    raise SystemExit(f"{node}: the evidence in {records[0].evidence_dir} has no burn-in times")


def swap(env: dict[str, str], nodes: list[str], hook_log: Path, home: Path) -> dict[str, Any]:
    since = time.time()
    t0 = time.perf_counter()
    res = racklife(env, "role-swap", *nodes, "--to", "inference", "--json")
    wall = time.perf_counter() - t0
    if res.returncode != 0:
        raise SystemExit(f"role-swap {' '.join(nodes)} failed (exit {res.returncode}):\n{res.stdout}\n{res.stderr}")
    outcomes = {o["node"]: o for o in json.loads(res.stdout)}
    hooks = hook_seconds(hook_log, since)
    per: dict[str, dict[str, float]] = {}
    for n in nodes:
        o = outcomes[n]
        if not o.get("ok"):
            raise SystemExit(f"{n}: the swap did not succeed: {o.get('reason')}")
        run_id = str(o.get("retest", {}).get("run_id") or o.get("run_id") or "")
        world = {"hook_s": hooks.get(n, 0.0), "burnin_s": burnin_seconds(home, n, run_id)}
        per[n] = {**{k: float(v) for k, v in o.get("phases", {}).items()}, **world}
    return {"nodes": nodes, "wall_s": wall, "per_node": per}


def report(label: str, r: dict[str, Any], goal: float) -> dict[str, Any]:
    per = r["per_node"]
    world = max(p["hook_s"] + p["burnin_s"] for p in per.values())
    overhead = r["wall_s"] - world
    print(f"{label}: {len(per)} node(s), command wall {r['wall_s']:.1f} s")
    cols = ("drain_wait", "move", "switch", "retest", "join", "hook_s", "burnin_s")
    print("  node      " + "".join(f"{c:>12}" for c in cols) + "   own (phases - hook - burn-in)")
    for n, p in sorted(per.items()):
        own = sum(p.get(c, 0.0) for c in cols[:5]) - p["hook_s"] - p["burnin_s"]
        print(f"  {n:<9} " + "".join(f"{p.get(c, 0.0):12.1f}" for c in cols) + f"   {own:8.1f}")
    print(f"  racklife's overhead: {overhead:.1f} s (wall - the longest node's hook + burn-in, {world:.1f} s); "
          f"goal <= {goal:g} s: {'met' if overhead <= goal else 'MISSED'}")
    return {**r, "world_s": round(world, 2), "overhead_s": round(overhead, 2)}


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--nodes", type=int, default=16, help="lab size (three quarters start in training)")
    ap.add_argument("--concurrent", type=int, default=8)
    ap.add_argument("--json", type=Path, help="also write the figures to this file")
    ap.add_argument("--keep", action="store_true", help="leave the lab up (its --dir is printed)")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("bench/roleswap.py needs root (the lab's network namespaces and daemons)", file=sys.stderr)
        return 2
    training = args.nodes - args.nodes // 4
    if training < 1 + args.concurrent:
        print(f"--nodes {args.nodes} puts {training} in training; one swap then {args.concurrent} need "
              f"{1 + args.concurrent}", file=sys.stderr)
        return 2
    from lifecycle.cli.lab import parse_exports
    from lifecycle.imaging.build import build
    from lifecycle.imaging.definition import load_definition
    from lifecycle.lab import rack

    root = Path(tempfile.mkdtemp(prefix="rlbswap", dir="/tmp"))
    root.chmod(0o755)
    lab_dir, prefix = root / "lab", f"rlb{os.getpid() % 10000}-"
    base = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "RACKLIFE_"))}
    try:
        t0 = time.perf_counter()
        up = racklife(dict(os.environ), "lab", "up", "--nodes", str(args.nodes), "--dir", str(lab_dir),
                      "--prefix", prefix, "--boot-time", "1")
        if up.returncode != 0:
            raise SystemExit(f"lab up failed:\n{up.stdout}\n{up.stderr}")
        env = base | parse_exports(racklife(dict(os.environ), "lab", "env", "--dir", str(lab_dir)).stdout)
        images = root / "images"
        defn, defdir = load_definition("minimal")
        build(defn, defdir, images, Path.home() / ".cache" / "racklife" / "debs")
        built = racklife(env, "build", env["RACKLIFE_INVENTORY"], "--images", str(images), "--boot-timeout", "60")
        listed = json.loads(racklife(env, "nodes", "list", "--json").stdout)
        serving = sorted(n["name"] for n in listed if n["state"] == "in_service" and n["pool"] == "training")
        if len(serving) < 1 + args.concurrent:
            raise SystemExit(f"build left {len(serving)} training node(s) in service, {1 + args.concurrent} "
                             f"needed (exit {built.returncode}):\n{built.stdout}\n{built.stderr}")
        if built.returncode != 0:  # a node the build could not finish is not swapped; say which
            print(f"build did not converge every node (exit {built.returncode}); swapping nodes in service only: "
                  + "; ".join(line for line in built.stdout.splitlines() if "blocked" in line), flush=True)
        hook_log = root / "hook.log"
        shim = root / "hook-shim"
        shim.write_text(SHIM.format(log=shlex.quote(str(hook_log))))
        shim.chmod(0o755)
        env["RACKLIFE_NODE_ROLE_CMD"] = f"{shim} {env['RACKLIFE_NODE_ROLE_CMD']}"
        home = Path(env["RACKLIFE_HOME"])
        print(f"lab of {args.nodes} up and built in {time.perf_counter() - t0:.0f} s ({lab_dir}); "
              f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}", flush=True)
        one = report("one swap", swap(env, serving[:1], hook_log, home), 10.0)
        many_nodes = serving[1:1 + args.concurrent]
        many = report(f"{args.concurrent} swaps at once", swap(env, many_nodes, hook_log, home), 15.0)
        if args.json:
            args.json.write_text(json.dumps({"one": one, "concurrent": many}, indent=2) + "\n")
        return 0
    finally:
        if args.keep:
            print(f"lab left up: racklife lab down --dir {lab_dir}")
        else:
            racklife(dict(os.environ), "lab", "down", "--dir", str(lab_dir))
            rack.cleanup(lab_dir, prefix)
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())

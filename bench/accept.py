"""Wall time of ``racklife accept`` on 8 and 32 lab nodes, split into node time and racklife's overhead.

For each size the bench starts a lab rack (``racklife lab up``: one sshd per node in its
own network namespace, the lab's real Slurm, fake GPU tools), imports its inventory,
moves every node to ``provisioned`` through the state machine's own transitions (no
image is booted: provisioning has its own bench), then times the real command:

    racklife accept --nodes ALL --level quick --max-in-flight N --json

and splits the wall time using what the run recorded:

* **burn-in** — the time during which at least one node was running its checks (the
  union of each ``result.json``'s ``started_at``..``ended_at``): node time;
* **multi-node** — the time the srun rounds ran (union of each launch's start and
  duration, from the evidence): node time on a real rack (an NCCL sweep takes about a
  minute), Slurm's launch cost in the lab, where all_reduce_perf answers at once;
* **overhead** — the rest: command start, DBOS, SSH connections and fetching, judging,
  evidence hashing, reports and plots, node state changes.

The goal in issue 7 is overhead <= 10 % of the burn-in time. By default the lab's fake
tools answer in milliseconds (a node's burn-in is then mostly interpreter start), which
says nothing about a real rack; ``--tool-time 1`` makes them take the real tools' time
(``dcgmi diag -r 1``, the nccl-tests sweep, ``nvidia-smi``: see
:mod:`lifecycle.lab.gputools.timing` for the durations and their sources), so the ratio
is against a realistic burn-in. With two or more sizes the overhead is also split into a
fixed part and a per-node part (a least-squares line through the sizes measured).

    sudo python bench/accept.py [--nodes 8 32] [--max-in-flight 32] [--tool-time 1]
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
from datetime import datetime
from pathlib import Path

from lifecycle.lab.gputools import timing

EXE = shutil.which("racklife") or str(Path(sys.executable).with_name("racklife"))


def _racklife(env: dict[str, str], *args: str, timeout: float = 1800) -> subprocess.CompletedProcess[str]:
    res = subprocess.run([EXE, *args], env=env, capture_output=True, text=True, timeout=timeout, check=False)
    return res


def _t(ts: str) -> float:
    return datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()


def union(intervals: list[tuple[float, float]]) -> float:
    """Total length covered by the intervals."""
    total, end = 0.0, float("-inf")
    for a, b in sorted(intervals):
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total


def fast_forward(env: dict[str, str], nodes: list[str]) -> None:
    """enrolled -> provisioned through the state machine (in a child: the store reads RACKLIFE_HOME)."""
    code = ("import sys\nfrom lifecycle.store import Store\nfrom lifecycle.model.states import Actor\n"
            "s = Store()\n"
            "for n in sys.argv[1:]:\n"
            "    for ev, who in (('inspect', Actor.OPERATOR), ('inspect_done', Actor.WORKFLOW),\n"
            "                    ('provision', Actor.OPERATOR), ('provision_done', Actor.WORKFLOW)):\n"
            "        s.transition(n, ev, who, 'bench: fast-forward to provisioned')\n")
    subprocess.run([sys.executable, "-c", code, *nodes], env=env, check=True)


def lab_env(base: dict[str, str], lab_dir: Path) -> dict[str, str]:
    env = base.copy()
    for line in _racklife(base, "lab", "env", "--dir", str(lab_dir)).stdout.splitlines():
        if line.startswith("export "):
            key, _, value = line.removeprefix("export ").partition("=")
            env[key] = value.strip("'")
    return env


def measure(env: dict[str, str], max_in_flight: int, report_dir: Path) -> dict[str, float]:
    """Fast-forward every node to provisioned, time ``racklife accept`` on all of them, split the time."""
    names = [x["name"] for x in json.loads(_racklife(env, "nodes", "list", "--json").stdout)]
    fast_forward(env, names)
    t0, wall0 = time.monotonic(), time.time()
    res = _racklife(env, "accept", "--nodes", ",".join(names), "--level", "quick", "--json",
                    "--max-in-flight", str(max_in_flight), "--report-dir", str(report_dir))
    wall = time.monotonic() - t0
    if res.returncode not in (0, 1):
        raise SystemExit(f"accept failed ({res.returncode}): {res.stderr[-2000:]}")
    out = json.loads(res.stdout)
    evidence = Path(env["RACKLIFE_HOME"]) / "acceptance" / out["run_id"] / "evidence"
    node_iv = []
    for result in sorted(evidence.glob("nodes/*/result.json")):
        doc = json.loads(result.read_text())
        node_iv.append((_t(doc["started_at"]), _t(doc["ended_at"])))
    if len(node_iv) != len(names):
        raise SystemExit(f"{len(names) - len(node_iv)} node(s) without a burn-in result")
    rack = json.loads((evidence / "rack.json").read_text())
    mn_iv = [(r["started_at"], r["started_at"] + r["seconds"])
             for st in rack["multi_node_stage"]["stages"] for r in st["runs"]]
    hist = [json.loads(_racklife(env, "node", "history", n, "--json").stdout) for n in names]
    started = min(_t(h["at"]) for hs in hist for h in hs if h["event"] == "burn_in")
    finished = max(_t(h["at"]) for hs in hist for h in hs if h["event"] in ("accept", "quarantine"))
    marks = {
        "start (cli, dbos)": started - wall0,
        "fan-out (burn-in + ssh)": max(b for _, b in node_iv) - started,
        "multi-node prep": (min(a for a, _ in mn_iv) if mn_iv else max(b for _, b in node_iv))
        - max(b for _, b in node_iv),
        "srun rounds": (max(b for _, b in mn_iv) - min(a for a, _ in mn_iv)) if mn_iv else 0.0,
        "judge + evidence": (evidence / "manifest.json").stat().st_mtime
        - (max(b for _, b in mn_iv) if mn_iv else max(b for _, b in node_iv)),
        "reports": max(p.stat().st_mtime for p in report_dir.iterdir()) - (evidence / "manifest.json").stat().st_mtime,
        "records + states": finished - max(p.stat().st_mtime for p in report_dir.iterdir()),
        "exit": wall0 + wall - finished,
    }
    return {"nodes": len(names), "passed": sum(v["passed"] for v in out["nodes"]), "wall": wall,
            "burnin": union(node_iv), "multi": union(mn_iv), "srun_jobs": len(mn_iv),
            "overhead": wall - union(node_iv + mn_iv), **{f"phase:{k}": v for k, v in marks.items()}}


def bench(n: int, max_in_flight: int, root: Path, tool_time: float) -> dict[str, float]:
    lab_dir = root / f"lab{n}"
    prefix = f"rlb{os.getpid() % 1000}{n}-"
    base = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "RACKLIFE_"))}
    up = _racklife(base, "lab", "up", "--nodes", str(n), "--dir", str(lab_dir), "--prefix", prefix,
                   "--boot-time", "0.5")
    try:
        if up.returncode != 0:
            raise SystemExit(f"lab up failed: {up.stdout}{up.stderr}")
        env = lab_env(base, lab_dir)
        timing.write(lab_dir / "nodes", tool_time)
        imported = _racklife(env, "inventory", "import", env["RACKLIFE_INVENTORY"])
        if imported.returncode != 0:
            raise SystemExit(f"inventory import failed: {imported.stderr}")
        return measure(env, max_in_flight, root / f"reports{n}")
    finally:
        _racklife(base, "lab", "down", "--dir", str(lab_dir))


def show(r: dict[str, float]) -> None:
    print(f"{int(r['nodes']):>5} {int(r['passed']):>4} {r['wall']:>7.1f} {r['burnin']:>8.1f} {r['multi']:>6.1f} "
          f"{int(r['srun_jobs']):>4} {r['overhead']:>9.1f} {100 * r['overhead'] / r['burnin']:>10.1f}% "
          f"{100 * r['overhead'] / (r['burnin'] + r['multi']):>9.1f}%", flush=True)
    print("      phases (s): " + ", ".join(f"{k.removeprefix('phase:')} {v:.1f}" for k, v in r.items()
                                          if k.startswith("phase:")), flush=True)


def split(results: list[dict[str, float]]) -> tuple[float, float] | None:
    """Overhead = fixed + per_node x nodes, least squares over the sizes measured (None: one size)."""
    xs = [r["nodes"] for r in results]
    ys = [r["overhead"] for r in results]
    if len(set(xs)) < 2:
        return None
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    per_node = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)
    return my - per_node * mx, per_node


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--nodes", type=int, nargs="+", default=[8, 32])
    ap.add_argument("--max-in-flight", type=int, default=32)
    ap.add_argument("--tool-time", type=float, default=0.0, metavar="SCALE",
                    help="Fake GPU tools take SCALE x the real tools' time (1: real durations; 0: at once).")
    ap.add_argument("--lab-dir", type=Path, help="Measure on this running lab (inventory imported) instead.")
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("run as root: the lab needs network namespaces and starts daemons")
    print(f"tool time scale {args.tool_time:g} (node durations at scale 1: "
          + ", ".join(f"{k} {v:g} s" for k, v in timing.SECONDS.items()) + ")")
    print(f"{'nodes':>5} {'pass':>4} {'wall s':>7} {'burn-in':>8} {'multi':>6} {'jobs':>4} {'overhead':>9} "
          f"{'ovh/burn-in':>11} {'ovh/node-t':>10}")
    results = []
    with tempfile.TemporaryDirectory(prefix="rlb", dir="/tmp") as tmp:
        if args.lab_dir is not None:
            base = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "RACKLIFE_"))}
            timing.write(args.lab_dir / "nodes", args.tool_time)
            try:
                show(measure(lab_env(base, args.lab_dir), args.max_in_flight, Path(tmp) / "reports"))
            finally:
                timing.write(args.lab_dir / "nodes", 0.0)
            return
        for n in args.nodes:
            results.append(bench(n, min(args.max_in_flight, n), Path(tmp), args.tool_time))
            show(results[-1])
    fit = split(results)
    if fit is not None:
        print(f"overhead ~ {fit[0]:.1f} s fixed + {fit[1]:.3f} s per node", flush=True)


if __name__ == "__main__":
    main()

"""`racklife refresh` and `racklife plan` of a large emulated fleet: wall time and peak RSS of each command.

    python bench/plan_refresh.py [--nodes 10000] [--firmware] [--keep DIR]

Goal (issue 15): plan < 10 s, refresh of 10,000 BMCs < 120 s, peak RSS < 1 GB.

The fleet, each part real and in its own process so the commands are
measured alone:

* the BMCs: the project's Redfish emulator, one process, one port per BMC
  (three captured vendor trees in turn, 8 GPUs each);
* Kubernetes: the lab's API stand-in (``lifecycle.lab.kube``) with one Node
  per node, carrying the pool's labels and taints, Ready;
* the store: a SQLite file with the inventory imported and every node in
  service in the ``inference`` pool as a real build leaves it (its
  transitions, a passing acceptance record newer than its provisioning, the
  boot server's record of its phone-home). That history is written with
  bulk inserts, which is the bench's set-up, not what it measures.

Then the real CLI runs as a child process, as an operator would run it,
with its output to /dev/null: ``racklife refresh --no-firmware`` (power
state only, the cheap read), ``racklife refresh`` (power and firmware
inventory) when ``--firmware`` is given, ``racklife plan --observed`` (the
planner on the stored observations: what the "< 10 s" goal is about), and
``racklife plan --no-firmware`` (a refresh and the plan, end to end). Each
one's wall time and peak RSS (``wait4``'s rusage of that child alone) are
printed. The fleet is converged, so every command must find no drift and
plan no changes: an exit status other than 0 fails the bench (a benchmark of
a command that failed measures nothing).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
FIXTURES = REPO.parent / "shared" / "fixtures" / "redfish"
# Three captured vendor trees in turn; openbmc-stock is left out because it was captured powered off,
# and a built fleet is powered on.
TREES = ("dell-idrac-bmclib", "dmtf-public-rackmount1", "hpe-ilo5-dl325")
POOL_LABELS = {"racklife.io/pool": "inference"}
POOL_TAINT = {"key": "racklife.io/pool", "value": "inference", "effect": "NoSchedule"}
PER_RACK = 40


def inventory_yaml(n: int, urls: dict[str, str], creds: Path) -> str:
    import yaml

    nodes = [{
        "name": f"n{i:05d}", "serial": f"BENCH{i:06d}", "rack": f"r{i // PER_RACK + 1:03d}", "u": i % PER_RACK + 1,
        "sku": "h100-sxm-8", "pool": "inference", "image": "minimal",
        "bmc": {"driver": "redfish", "address": urls[f"bmc{i:05d}"], "credentials": f"file:{creds}"},
        "nics": [{"name": "eth0", "mac": f"02:4d:{(i >> 16) & 0xff:02x}:{(i >> 8) & 0xff:02x}:{i & 0xff:02x}:01",
                  "role": "boot"}],
    } for i in range(n)]
    doc = {"site": {"name": "bench"},
           "racks": [{"name": f"r{r + 1:03d}"} for r in range(math.ceil(n / PER_RACK))],
           "pools": {"inference": {"scheduler": "kubernetes", "labels": POOL_LABELS,
                                   "taints": ["racklife.io/pool=inference:NoSchedule"]}},
           "images": [{"name": "minimal", "version": "1", "definition": "images/minimal.yaml"}],
           "nodes": nodes}
    return yaml.safe_dump(doc)


# The moves of a real build, enrolment to in service (the state machine's own events).
BUILD = (("enrolled", "inspecting", "inspect"), ("inspecting", "available", "inspect_done"),
         ("available", "provisioning", "provision"), ("provisioning", "provisioned", "provision_done"),
         ("provisioned", "burning_in", "burn_in"), ("burning_in", "accepted", "accept"),
         ("accepted", "joining", "join"), ("joining", "in_service", "join_done"))


def built_fleet(store: Any, names: list[str], macs: dict[str, str]) -> None:
    """Write what a real build leaves in the store for every node: history, acceptance, boot record."""
    import sqlalchemy as sa

    from lifecycle.model.states import Actor, State, next_state
    from lifecycle.store import db

    t0 = datetime.now(UTC) - timedelta(hours=2)
    state = State.ENROLLED
    for source, target, event in BUILD:  # the table above is the state machine's, or the bench stops here
        assert state.value == source and next_state("n", state, event, Actor.WORKFLOW, "rec") == State(target)
        state = State(target)
    with store.engine.begin() as conn:
        for chunk in range(0, len(names), 500):
            part = names[chunk:chunk + 500]
            conn.execute(sa.insert(db.transitions), [
                {"node": n, "source": s, "target": t, "event": e, "actor": Actor.WORKFLOW.value,
                 "reason": "bench: as a build leaves it", "run_id": f"bench-build-{n}",
                 "at": t0 + timedelta(minutes=k)}
                for n in part for k, (s, t, e) in enumerate(BUILD, 1)])
            conn.execute(sa.insert(db.acceptance_records), [
                {"id": f"acc-{n}", "node": n, "passed": True, "level": "quick", "profile": "h100-sxm-8",
                 "created_at": t0 + timedelta(minutes=6), "expires_at": t0 + timedelta(days=30),
                 "accepted_by": "bench", "run_id": f"bench-build-{n}", "summary": "{}",
                 "evidence_dir": None, "evidence_sha256": None} for n in part])
            conn.execute(sa.insert(db.boot_tokens), [
                {"token_sha256": uuid.uuid4().hex * 2, "node": n, "boot_mac": macs[n], "run_id": f"bench-build-{n}",
                 "attempt": 1, "script": "", "issued_at": t0 + timedelta(minutes=3),
                 "expires_at": t0 + timedelta(minutes=13), "used_at": t0 + timedelta(minutes=4),
                 "report": json.dumps({"image": "minimal", "image_version": "1"})} for n in part])
        conn.execute(sa.update(db.nodes).values(state=State.IN_SERVICE.value, state_since=t0 + timedelta(minutes=8)))


PROFILE: Path | None = None  # --profile DIR: each command under cProfile, one .prof file per command


# The child's own peak RSS: VmHWM of its address space, read as it exits. (wait4's ru_maxrss
# would not do: Linux carries the high-water mark of the memory a child had before its exec,
# a copy of this process with 10,000 BMC configs in it, into the child's figure.)
_PEAK = """
import atexit, os, runpy, sys
def _peak():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            open(os.environ["BENCH_PEAK_FILE"], "w").write(line.split()[1])
atexit.register(_peak)
sys.argv = ["racklife", *sys.argv[1:]]
runpy.run_module("lifecycle.cli", run_name="__main__")
"""


def run_cli(name: str, argv: list[str], env: dict[str, str]) -> dict[str, Any]:
    """Run one racklife command as a child; its wall time, its own peak RSS and CPU, and its exit status."""
    peak = Path(env["RACKLIFE_HOME"]) / "peak-kb"
    peak.unlink(missing_ok=True)
    prof = ["-m", "cProfile", "-o", str(PROFILE / f"{'-'.join(argv).strip('-')}.prof"), "-m", "lifecycle.cli"] \
        if PROFILE else ["-c", _PEAK]
    t0 = time.perf_counter()
    with open(os.environ.get("BENCH_OUT", os.devnull), "wb") as null:
        proc = subprocess.Popen([sys.executable, *prof, *argv], env=dict(env, BENCH_PEAK_FILE=str(peak)),
                                stdout=null, stderr=subprocess.PIPE)
        assert proc.stderr is not None
        err = proc.stderr.read().decode(errors="replace")
        _pid, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - t0
    rss = int(peak.read_text()) / 1024 if peak.exists() else float("nan")
    cpu = usage.ru_utime + usage.ru_stime
    out = {"command": "racklife " + " ".join(argv), "wall_s": round(wall, 2),
           "peak_rss_mb": round(rss) if rss == rss else None,
           "cpu_s": round(cpu, 1), "rc": proc.returncode}
    print(f"{name:<34} {wall:7.1f} s  peak RSS {rss:6.0f} MB  CPU {cpu:6.1f} s  exit {proc.returncode}",
          flush=True)
    if proc.returncode != 0:
        print(f"  {out['command']} failed:\n{err[-3000:]}", file=sys.stderr)
        raise SystemExit(1)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--nodes", type=int, default=10_000)
    ap.add_argument("--firmware", action="store_true", help="also time a refresh that reads firmware inventories")
    ap.add_argument("--json", type=Path, help="also write the figures to this file")
    ap.add_argument("--profile", type=Path, help="run each command under cProfile, writing DIR/COMMAND.prof")
    args = ap.parse_args()
    global PROFILE
    PROFILE = args.profile
    n = args.nodes
    with tempfile.TemporaryDirectory(prefix="racklife-bench-plan-") as tmp:
        home = Path(tmp)
        env = dict(os.environ, RACKLIFE_HOME=str(home), RACKLIFE_KUBECONFIG=str(home / "kubeconfig"),
                   PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        env.pop("RACKLIFE_DB", None)
        os.environ.update(RACKLIFE_HOME=str(home))
        os.environ.pop("RACKLIFE_DB", None)
        from lifecycle.lab.kube import KubeProcess, node_object
        from lifecycle.lab.redfish_emulator import BmcConfig, ExtraHardware, spawn
        from lifecycle.model.inventory import parse_inventory
        from lifecycle.store import Store

        password = "bench-" + os.urandom(6).hex()
        creds = home / "bmc-creds"
        creds.write_text(f"bench:{password}\n")
        creds.chmod(0o600)
        bmcs = [BmcConfig(f"bmc{i:05d}", FIXTURES / TREES[i % len(TREES)], "bench", password,
                          hardware=ExtraHardware(gpus=8, system_serial=f"BENCH{i:06d}"))
                for i in range(n)]
        print(f"{n} nodes: starting {n} emulated BMCs and the Kubernetes stand-in ...", flush=True)
        t0 = time.perf_counter()
        emulator = spawn(bmcs, startup_timeout=600)
        t_bmc = time.perf_counter()
        kube = KubeProcess(kubeconfig=home / "kubeconfig")
        try:
            kube.start(timeout_s=60)
            names = [f"n{i:05d}" for i in range(n)]
            with ThreadPoolExecutor(8) as pool:  # a fresh API server: every Node is new, so POST (no GET first)
                list(pool.map(lambda name: kube.request("POST", "/api/v1/nodes", node_object(
                    name, labels=POOL_LABELS, taints=[POOL_TAINT])), names))
            t_kube = time.perf_counter()
            inv = parse_inventory(inventory_yaml(n, {b.name: emulator.urls[b.name] for b in bmcs}, creds), "bench")
            store = Store()
            store.import_inventory(inv)
            built_fleet(store, names, {node.name: node.nics[0].mac for node in inv.nodes})
            store.close()
            print(f"set-up {time.perf_counter() - t0:.0f} s (BMCs {t_bmc - t0:.0f} s, Kubernetes Nodes "
                  f"{t_kube - t_bmc:.0f} s, store {time.perf_counter() - t_kube:.0f} s); "
                  f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}", flush=True)
            runs = [run_cli("refresh (power only)", ["refresh", "--no-firmware"], env)]
            if args.firmware:
                runs.append(run_cli("refresh (power and firmware)", ["refresh"], env))
            runs.append(run_cli("plan (stored observations)", ["plan", "--observed"], env))
            runs.append(run_cli("plan (refresh, then plan)", ["plan", "--no-firmware"], env))
        finally:
            kube.stop()
            emulator.stop()
    refreshes = [r for r in runs if " refresh" in r["command"]]
    planned = next(r for r in runs if "--observed" in r["command"])
    rss = max((r["peak_rss_mb"] or 0) for r in runs)
    print(f"goal: plan {planned['wall_s']:.1f} s (< 10), refresh {max(r['wall_s'] for r in refreshes):.1f} s "
          f"(< 120 at 10,000), peak RSS {rss} MB (< 1024)")
    if args.json:
        args.json.write_text(json.dumps({"nodes": n, "runs": runs}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

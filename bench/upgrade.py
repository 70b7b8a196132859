"""A rolling upgrade of an emulated 64-node pool: total time against the ideal, canary + ceil(63/16) x T.

The upgrade run is the real one (``lifecycle.workflows.upgrade``: DBOS on
SQLite in WAL mode, the pools read before each batch, the batches within
``--max-unavailable``, a child workflow per node, the status event after each
change); only the per-node cycle is simulated, as a workflow registered
beside ``change_node``: it takes the node's lease, drains it in the store,
spends T (the leave, the reimage's boot and the re-test, as the world takes
them), and joins it again with its acceptance record. So the ratio is what
the rollout's own orchestration costs on top of T per batch. The run does not
hold after the canary (``auto_continue``): the hold is the operator's time,
not racklife's.

Goal (issue 19): ratio <= 1.15.

    python bench/upgrade.py [--nodes 64] [--max-unavailable 25%] [--canary 1] [--update-time 10]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import sys
import tempfile
import time
from dataclasses import asdict
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

UPDATE_S = {"t": 10.0}  # set from --update-time before the run starts


def inventory(n: int) -> Any:
    from lifecycle.model.inventory import parse_inventory

    nodes = [{
        "name": f"n{i:04d}", "serial": f"BENCH{i:05d}", "rack": f"r{i // 40 + 1:02d}", "u": i % 40 + 1,
        "sku": "h100-sxm-8", "pool": "training",
        "bmc": {"driver": "redfish", "address": f"https://127.0.0.1:{20000 + i}", "credentials": "env:BENCH_BMC"},
        "nics": [{"name": "eth0", "mac": f"02:4d:00:00:{i >> 8:02x}:{i & 0xff:02x}", "role": "boot"}],
    } for i in range(n)]
    doc = {"site": {"name": "bench"}, "racks": [{"name": f"r{r + 1:02d}"} for r in range(math.ceil(n / 40))],
           "pools": {"training": {"scheduler": "slurm", "partition": "train"}}, "nodes": nodes}
    return parse_inventory(json.dumps(doc), "<bench inventory>")


def in_service(store: Any, node: str) -> None:
    """The node as a build leaves it: accepted (with a record) and joined."""
    from lifecycle.model.states import Actor
    from lifecycle.store import AcceptanceRecord

    for event in ("inspect", "inspect_done", "provision", "provision_done", "burn_in", "accept"):
        store.transition(node, event, Actor.WORKFLOW, f"bench setup: {event}")
    now = datetime.now(UTC) + timedelta(seconds=1)
    store.add_acceptance_record(AcceptanceRecord(f"acc-{node}", node, True, "quick", "h100-sxm-8", now,
                                                 now + timedelta(days=30), "policy:bench", None, {}, None, None))
    store.transition(node, "join", Actor.WORKFLOW, "bench setup: join", acceptance_record=f"acc-{node}")
    store.transition(node, "join_done", Actor.WORKFLOW, "bench setup: in service")


def register() -> None:
    """The simulated per-node cycle, as a workflow (registered before DBOS launches)."""
    from dbos import DBOS

    from lifecycle.store import shared_store
    from lifecycle.workflows import upgrade
    from lifecycle.workflows.leasing import release_leases, take_leases
    from lifecycle.workflows.node_ops import transition
    from lifecycle.workflows.retry import step
    from lifecycle.workflows.slurm_pool import valid_acceptance

    @step(idempotent=False)
    def update(node: str, seconds: float) -> float:
        time.sleep(seconds)
        return seconds

    @DBOS.workflow()
    def simulated_change(node: str, _settings: Any) -> dict[str, Any]:
        held = take_leases([node], "simulated_change")
        if held:
            return {"node": node, "ok": False, "state": "", "reason": held[node], "phases": {}}
        try:
            transition(node, "drain", "bench: leave")
            transition(node, "drain_done", "bench: drained")
            spent = update(node, UPDATE_S["t"])
            transition(node, "join", "bench: rejoin", acceptance_record=valid_acceptance(node))
            state = transition(node, "join_done", "bench: in service")
            assert shared_store().get(node).pool == "training"
            return {"node": node, "ok": True, "state": state, "reason": "", "phases": {"update": spent}}
        finally:
            release_leases()

    upgrade.NODE_RUNS["bench-sim"] = simulated_change


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=64)
    ap.add_argument("--max-unavailable", default="25%")
    ap.add_argument("--canary", type=int, default=1)
    ap.add_argument("--update-time", type=float, default=10.0, help="T: seconds one node's change takes")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    UPDATE_S["t"] = args.update_time

    home = Path(tempfile.mkdtemp(prefix="rl-bench-upgrade-"))
    os.environ["RACKLIFE_HOME"] = str(home)
    os.environ["RACKLIFE_DB"] = f"sqlite:///{home / 'racklife.sqlite'}"

    from lifecycle.model.limits import Unavailable
    from lifecycle.store import Store
    from lifecycle.workflows import upgrade
    from lifecycle.workflows.accept import AcceptSettings
    from lifecycle.workflows.changes import ChangeContext, ChangeKind, ChangeSettings, ChangeSpec
    from lifecycle.workflows.controller import Controller
    from lifecycle.workflows.upgrade_batches import Member, PoolNow, plan_batches

    store = Store()
    inv = inventory(args.nodes)
    store.import_inventory(inv)
    for n in inv.nodes:
        in_service(store, n.name)
    register()

    limit = Unavailable.parse(args.max_unavailable)
    members = tuple(Member(n.name, "training") for n in inv.nodes)
    batches = plan_batches(members, {"training": PoolNow("training", args.nodes, args.nodes)}, limit, args.canary)
    change = ChangeSpec(ChangeKind.IMAGE, "minimal:2")
    accept = AcceptSettings(level="quick", work_dir=str(home / "acc"), report_dir=str(home / "acc"),
                            operator="bench", ssh_config="/dev/null")
    settings = upgrade.UpgradeSettings(change, members, limit, ChangeSettings((change,), "bench", accept,
                                                                              ChangeContext()),
                                       {"training": "quick"}, canary=args.canary, auto_continue=True,
                                       per_node="bench-sim")
    per_batch = limit.of(args.nodes)
    ideal = (args.update_time if args.canary else 0.0) + \
        math.ceil((args.nodes - args.canary) / per_batch) * args.update_time
    with Controller("bench-upgrade") as ctl:
        cpu0, t0 = time.process_time(), time.monotonic()
        report = ctl.start(upgrade.upgrade, settings, workflow_id=f"upgrade-bench-{os.urandom(4).hex()}").get_result()
        wall, cpu = time.monotonic() - t0, time.process_time() - cpu0
    store.close()
    assert report["phase"] == "done" and len(report["upgraded"]) == args.nodes, report["message"]
    assert report["peak_out_of_service"]["training"] <= per_batch, report["peak_out_of_service"]
    figures = {"nodes": args.nodes, "max_unavailable": args.max_unavailable, "per_batch": per_batch,
               "canary": args.canary, "update_time_s": args.update_time, "batches": [len(b) for b in batches],
               "total_s": round(wall, 2), "ideal_s": round(ideal, 2), "ratio": round(wall / ideal, 3),
               "controller_cpu_s": round(cpu, 2),
               "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
               "goal": "ratio <= 1.15"}
    if args.json:
        print(json.dumps(figures | {"settings": asdict(settings)["limit"]}))
        return
    print(f"upgrade of {args.nodes} nodes, max unavailable {args.max_unavailable} ({per_batch} per batch), "
          f"canary {args.canary}, T = {args.update_time:g} s")
    print(f"  batches: {figures['batches']}")
    print(f"  total {wall:.2f} s, ideal {ideal:.2f} s (canary + ceil({args.nodes - args.canary}/{per_batch}) x T): "
          f"ratio {wall / ideal:.3f} (goal <= 1.15)")
    print(f"  controller CPU {cpu:.2f} s, peak RSS {figures['peak_rss_mb']} MB")


if __name__ == "__main__":
    main()

"""A rolling upgrade whose per-node cycle waits for a go file; run as a subprocess by test_upgrade_control.

argv: HOME RUN_ID NODE... The store at HOME is set up with NODE... in service in pool ``training``; the
upgrade run (the real one: batches, control messages, the status event) takes one node per batch, no
canary (one with ``UPGRADE_CANARY=1``: held after it for a verdict), and each node's cycle (registered beside ``change_node``) drains it in the store, writes
``HOME/in-NODE`` and waits for ``HOME/go-NODE`` before joining it again. Prints the report as JSON.
"""

from __future__ import annotations

import json
import os
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from dbos import DBOS

from lifecycle.model.inventory import parse_inventory
from lifecycle.model.limits import Unavailable
from lifecycle.model.states import Actor
from lifecycle.store import AcceptanceRecord, Store, shared_store
from lifecycle.workflows import upgrade
from lifecycle.workflows.accept import AcceptSettings
from lifecycle.workflows.changes import ChangeContext, ChangeKind, ChangeSettings, ChangeSpec
from lifecycle.workflows.controller import Controller
from lifecycle.workflows.leasing import release_leases, take_leases
from lifecycle.workflows.node_ops import transition
from lifecycle.workflows.retry import step
from lifecycle.workflows.slurm_pool import valid_acceptance
from lifecycle.workflows.upgrade_batches import Member

HOME, RUN, NODES = Path(sys.argv[1]), sys.argv[2], sys.argv[3:]


@step(idempotent=True)
def gate(node: str) -> None:
    (HOME / f"in-{node}").touch()
    while not (HOME / f"go-{node}").exists():
        time.sleep(0.05)


@DBOS.workflow()
def gated_change(node: str, _settings: Any) -> dict[str, Any]:
    if held := take_leases([node], "gated_change"):
        return {"node": node, "ok": False, "state": "", "reason": held[node], "phases": {}}
    try:
        transition(node, "drain", "test: leave")
        transition(node, "drain_done", "test: drained")
        gate(node)
        transition(node, "join", "test: rejoin", acceptance_record=valid_acceptance(node))
        return {"node": node, "ok": True, "state": transition(node, "join_done", "test: in service"),
                "reason": "", "phases": {"gate": 0.0}}
    finally:
        release_leases()


def setup(store: Store) -> None:
    doc = {"site": {"name": "t"}, "racks": [{"name": "r1"}],
           "pools": {"training": {"scheduler": "slurm", "partition": "train"}},
           "nodes": [{"name": n, "serial": f"T{i:04d}", "rack": "r1", "u": i + 1, "sku": "h100-sxm-8",
                      "pool": "training", "bmc": {"driver": "redfish", "address": f"https://127.0.0.1:{20000 + i}",
                                                  "credentials": "env:T_BMC"},
                      "nics": [{"name": "eth0", "mac": f"02:4d:00:00:00:{i:02x}", "role": "boot"}]}
                     for i, n in enumerate(NODES)]}
    store.import_inventory(parse_inventory(json.dumps(doc), "<test inventory>"))
    for n in NODES:
        for event in ("inspect", "inspect_done", "provision", "provision_done", "burn_in", "accept"):
            store.transition(n, event, Actor.WORKFLOW, f"test setup: {event}")
        at = datetime.now(UTC) + timedelta(seconds=1)
        store.add_acceptance_record(AcceptanceRecord(f"acc-{n}", n, True, "quick", "h100-sxm-8", at,
                                                     at + timedelta(days=30), "policy:test", None, {}, None, None))
        store.transition(n, "join", Actor.WORKFLOW, "test setup: join", acceptance_record=f"acc-{n}")
        store.transition(n, "join_done", Actor.WORKFLOW, "test setup: in service")


upgrade.NODE_RUNS["gated"] = gated_change
setup(shared_store())
change = ChangeSpec(ChangeKind.IMAGE, "minimal:2")
accept = AcceptSettings(level="quick", work_dir=str(HOME / "acc"), report_dir=str(HOME / "acc"), operator="test",
                        ssh_config="/dev/null")
settings = upgrade.UpgradeSettings(change, tuple(Member(n, "training") for n in NODES), Unavailable.parse("1"),
                                   ChangeSettings((change,), "test", accept, ChangeContext()), {"training": "quick"},
                                   canary=int(os.environ.get("UPGRADE_CANARY", "0")),
                                   auto_continue=os.environ.get("UPGRADE_CANARY", "0") == "0", per_node="gated")
with Controller("upgrade") as ctl:
    print(json.dumps(ctl.start(upgrade.upgrade, settings, workflow_id=RUN).get_result()), flush=True)

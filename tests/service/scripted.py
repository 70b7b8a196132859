"""A store with known content, and the metric values it must produce.

16 nodes of the example inventory (12 training, 4 inference, 8 GPUs each),
moved through the state machine by the store's one writer:

- r01-n01 in service (training), one passing acceptance record 2 h old; Slurm
  says it is drained by someone else (an admin);
- r01-n02 quarantined by a failing acceptance record (nccl fails, dcgm passes);
- r01-n03 provisioning for 3 h (a stuck node);
- r01-n04 in service, then lent to inference;
- r01-n07 (inference) in service, cordoned in Kubernetes by racklife;
- the training pool's floor is 2 nodes (min_nodes), so with one in service it is below it;
- every other node enrolled and never observed.
"""

from __future__ import annotations

import base64
from datetime import UTC, datetime, timedelta
from pathlib import Path

import sqlalchemy as sa

from lifecycle.model.inventory import load_inventory
from lifecycle.model.states import Actor, State
from lifecycle.planner.observe import save
from lifecycle.planner.observed import KubeSeen, Observation, SlurmSeen
from lifecycle.store import AcceptanceRecord, Store
from lifecycle.store import db as dbm

# Test credentials: one registered with the redaction filter (as a loaded BMC password is), one only
# in a secret's shape (password=...), and HTTP Basic's base64 of root:<the first>.
SECRETS = ("Rk-7f3b9-bmc-Secret", "hunter2-xyz", base64.b64encode(b"root:Rk-7f3b9-bmc-Secret").decode())
NOW = datetime(2026, 12, 1, 12, 0, 0, tzinfo=UTC)
DATED: list[tuple[str, datetime]] = []
BRINGUP = ["inspect", "inspect_done", "provision", "provision_done", "burn_in"]


def _record(store: Store, node: str, passed: bool, at: datetime, findings: list[tuple[str, str]]) -> str:
    """Record made now (the store's gates check it against the real clock), then dated ``at``."""
    made = datetime.now(UTC)
    rec = AcceptanceRecord(
        f"run-accept:{node}:{passed}", node, passed, "quick", "h100-sxm-8", made, made + timedelta(days=30),
        "policy:test", "run-accept",
        {"verdict": "pass" if passed else "fail", "findings": [{"check": c, "verdict": v} for c, v in findings]},
        None, None)
    store.add_acceptance_record(rec)
    DATED.append((rec.id, at))
    return rec.id


def _walk(store: Store, node: str, events: list[str], run_id: str = "run-script") -> None:
    for e in events:
        store.transition(node, e, Actor.WORKFLOW, f"scripted {e}", run_id=run_id)


def _since(store: Store, node: str, at: datetime) -> None:
    with store.engine.begin() as conn:
        conn.execute(sa.update(dbm.nodes).where(dbm.nodes.c.name == node).values(state_since=at))


def build(repo_dir: Path, url: str) -> Store:
    store = Store(url)
    inventory = load_inventory(repo_dir / "examples" / "site-h100-2rack.yaml")
    inventory.pools["training"] = inventory.pools["training"].model_copy(update={"min_nodes": 2})
    store.import_inventory(inventory)
    _walk(store, "r01-n01", [*BRINGUP, "accept"])
    rec = _record(store, "r01-n01", True, NOW - timedelta(hours=2),
                  [("nccl.all_reduce", "pass"), ("dcgm.diag", "pass")])
    store.transition("r01-n01", "join", Actor.WORKFLOW, "scripted join", "run-script", acceptance_record=rec)
    _walk(store, "r01-n01", ["join_done"])

    _walk(store, "r01-n02", BRINGUP)
    _record(store, "r01-n02", False, NOW - timedelta(hours=1), [("nccl.all_reduce", "fail"), ("dcgm.diag", "pass")])
    _walk(store, "r01-n02", ["quarantine"])

    _walk(store, "r01-n03", ["inspect", "inspect_done", "provision"])
    _since(store, "r01-n03", NOW - timedelta(hours=3))

    _walk(store, "r01-n04", [*BRINGUP, "accept"])
    rec = _record(store, "r01-n04", True, NOW - timedelta(days=3), [("nccl.all_reduce", "pass")])
    store.transition("r01-n04", "join", Actor.WORKFLOW, "scripted join", "run-script", acceptance_record=rec)
    _walk(store, "r01-n04", ["join_done", "lend", "lend_done"])

    _walk(store, "r01-n07", [*BRINGUP, "accept"])
    rec = _record(store, "r01-n07", True, NOW - timedelta(days=1), [("nccl.all_reduce", "pass")])
    store.transition("r01-n07", "join", Actor.WORKFLOW, "scripted join", "run-script", acceptance_record=rec)
    _walk(store, "r01-n07", ["join_done"])

    for node in ("r01-n01", "r01-n04", "r01-n07"):
        _since(store, node, NOW - timedelta(minutes=30))

    with store.engine.begin() as conn:
        for rec_id, at in DATED:
            conn.execute(sa.update(dbm.acceptance_records).where(dbm.acceptance_records.c.id == rec_id)
                         .values(created_at=at))
    DATED.clear()
    seen = NOW - timedelta(minutes=5)
    save(store, [
        Observation("r01-n01", seen, State.IN_SERVICE, "training",
                    slurm=SlurmSeen("IDLE+DRAIN", True, False, "bad dimm", "other", None, "admin", ("train",))),
        Observation("r01-n07", seen, State.IN_SERVICE, "inference",
                    kube=KubeSeen(True, True, True, "racklife", "run-script",
                                  {"racklife.io/pool": "inference", "nvidia.com/gpu.product": "H100-SXM5-80GB"},
                                  ("racklife.io/pool=inference:NoSchedule",))),
    ])
    return store


# (metric sample name, labels) -> value: what the scripted store must produce at NOW.
EXPECTED: dict[tuple[str, frozenset[tuple[str, str]]], float] = {
    (name, frozenset(labels.items())): value for name, labels, value in [
        ("racklife_nodes", {"pool": "training", "state": "in_service"}, 1),
        ("racklife_nodes", {"pool": "training", "state": "quarantined"}, 1),
        ("racklife_nodes", {"pool": "training", "state": "provisioning"}, 1),
        ("racklife_nodes", {"pool": "training", "state": "lent"}, 1),
        ("racklife_nodes", {"pool": "training", "state": "enrolled"}, 8),
        ("racklife_nodes", {"pool": "inference", "state": "in_service"}, 1),
        ("racklife_nodes", {"pool": "inference", "state": "enrolled"}, 3),
        ("racklife_nodes", {"pool": "spare", "state": "enrolled"}, 0),
        ("racklife_pool_min_nodes", {"pool": "training"}, 2),
        ("racklife_pool_min_nodes", {"pool": "inference"}, 0),
        ("racklife_pool_min_nodes", {"pool": "spare"}, 0),
        ("racklife_pool_gpus", {"pool": "training", "status": "in_service"}, 8),
        ("racklife_pool_gpus", {"pool": "training", "status": "lent"}, 8),
        ("racklife_pool_gpus", {"pool": "training", "status": "quarantined"}, 8),
        ("racklife_pool_gpus", {"pool": "training", "status": "draining"}, 0),
        ("racklife_pool_gpus", {"pool": "training", "status": "bringup"}, 72),
        ("racklife_pool_gpus", {"pool": "inference", "status": "in_service"}, 8),
        ("racklife_node_state_seconds", {"node": "r01-n03", "pool": "training", "state": "provisioning"}, 10800),
        ("racklife_node_state_seconds", {"node": "r01-n01", "pool": "training", "state": "in_service"}, 1800),
        ("racklife_nodes_out_of_service", {"pool": "training", "state": "quarantined", "reason": "quarantine"}, 1),
        ("racklife_nodes_out_of_service", {"pool": "training", "state": "provisioning", "reason": "provision"}, 1),
        ("racklife_nodes_out_of_service", {"pool": "training", "state": "enrolled", "reason": "enroll"}, 8),
        ("racklife_slurm_drains", {"pool": "training", "owner": "other"}, 1),
        ("racklife_slurm_drains", {"pool": "training", "owner": "racklife"}, 0),
        ("racklife_kube_cordons", {"pool": "inference", "owner": "racklife"}, 1),
        ("racklife_kube_cordons", {"pool": "inference", "owner": "other"}, 0),
        ("racklife_nodes_unobserved", {"pool": "training", "why": "never"}, 11),
        ("racklife_nodes_unobserved", {"pool": "inference", "why": "never"}, 3),
        ("racklife_observation_age_seconds", {"node": "r01-n01", "pool": "training"}, 300),
        ("racklife_drift", {"pool": "training", "source": "slurm", "kind": "foreign-drain"}, 1),
        ("racklife_acceptance_records_total", {"sku": "h100-sxm-8", "outcome": "pass"}, 3),
        ("racklife_acceptance_records_total", {"sku": "h100-sxm-8", "outcome": "fail"}, 1),
        ("racklife_acceptance_checks_total", {"sku": "h100-sxm-8", "check": "nccl.all_reduce", "verdict": "fail"}, 1),
        ("racklife_acceptance_checks_total", {"sku": "h100-sxm-8", "check": "nccl.all_reduce", "verdict": "pass"}, 3),
        ("racklife_acceptance_checks_total", {"sku": "h100-sxm-8", "check": "dcgm.diag", "verdict": "pass"}, 2),
        ("racklife_acceptance_last_pass_age_seconds", {"node": "r01-n01", "pool": "training", "sku": "h100-sxm-8"},
         7200),
        ("racklife_acceptance_last_pass_age_seconds", {"node": "r01-n04", "pool": "training", "sku": "h100-sxm-8"},
         3 * 86400),
        # 12 training nodes at the default max_repair_percent 10: one repair at a time, none under way.
        ("racklife_repair_breaker_open", {"pool": "training"}, 0),
        ("racklife_repair_breaker_repairs", {"pool": "training"}, 0),
        ("racklife_repair_breaker_limit", {"pool": "training"}, 1),
        ("racklife_repair_breaker_limit", {"pool": "inference"}, 1),
    ]
}

"""A pool's floor under concurrent role swaps: the check and the reservation are one transaction.

Eight swaps out of a pool of eight in-service nodes whose floor is five start
at the same instant, each from its own store connection (as eight controller
processes would): exactly three may leave. Checked on SQLite (its write lock)
and on PostgreSQL (the pool row's lock), because the two serialize differently.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

from lifecycle.model.inventory import load_inventory
from lifecycle.model.states import Actor, State
from lifecycle.planner import observe
from lifecycle.planner.fleet import plan_observed
from lifecycle.planner.observed import AcceptanceSeen, BmcSeen, Observation
from lifecycle.store import AcceptanceRecord, Store, db, leases

TRAINING = [f"r01-n0{i}" for i in range(1, 9)]
FLOOR = 5


def _serving(store: Store, node: str) -> None:
    for event in ("inspect", "inspect_done", "provision", "provision_done", "burn_in", "accept"):
        store.transition(node, event, Actor.WORKFLOW, f"test {event}")
    now = datetime.now(UTC)
    rec = AcceptanceRecord(f"acc-{node}", node, True, "quick", "h100-sxm-8", now, now + timedelta(days=1),
                           "policy:test", None, {}, None, None)
    store.add_acceptance_record(rec)
    store.transition(node, "join", Actor.WORKFLOW, "join", acceptance_record=rec.id)
    store.transition(node, "join_done", Actor.WORKFLOW, "joined")


def _fleet(url: str, repo_dir: Path, lendable: bool = False) -> Store:
    inv = load_inventory(repo_dir / "examples" / "site-h100-2rack.yaml")
    pools = dict(inv.pools)
    pools["training"] = pools["training"].model_copy(update={"min_nodes": FLOOR, "lendable": lendable})
    nodes = [n.model_copy(update={"pool": "training" if n.name in TRAINING else "inference"}) for n in inv.nodes]
    store = Store(url)
    store.import_inventory(inv.model_copy(update={"pools": pools, "nodes": nodes}))
    for n in TRAINING:
        _serving(store, n)
    return store


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'rl.sqlite'}"


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'rl.sqlite'}"
    else:
        base: str = request.getfixturevalue("postgres_url")
        yield base.rsplit("/", 1)[0] + f"/floor_{abs(hash(request.node.name)) % 10**8}"


def _swap_all_at_once(url: str, nodes: list[str]) -> dict[str, leases.FloorCount]:
    """Each node's swap: its lease, then the floor reserved, every swap released at one instant."""
    start = threading.Barrier(len(nodes))

    def swap(node: str) -> leases.FloorCount:
        store = Store(url)  # its own engine and connections, as another controller process has
        try:
            run = f"role-swap-{node}"
            assert leases.take(store, [node], run, "role_swap").ok
            start.wait()
            return leases.reserve_leave(store, node, run, "training")
        finally:
            store.close()

    with ThreadPoolExecutor(len(nodes)) as pool:
        return dict(zip(nodes, pool.map(swap, nodes), strict=True))


def test_concurrent_swaps_out_of_one_pool_keep_its_floor(url: str, repo_dir: Path) -> None:
    store = _fleet(url, repo_dir)
    try:
        counts = _swap_all_at_once(url, TRAINING)
        granted = sorted(n for n, c in counts.items() if c.ok)
        assert len(granted) == len(TRAINING) - FLOOR, {n: c.describe() for n, c in counts.items()}
        with store.engine.connect() as conn:
            reserved = sorted(r.node for r in conn.execute(
                sa.select(db.leases.c.node).where(db.leases.c.leaving_pool == "training")))
        assert reserved == granted and set(leases.holders(store)) == set(TRAINING)
        refused = next(c for n, c in counts.items() if not c.ok)
        assert "8 in service, this request takes 1 out, 3 already leaving in other swaps, 4 would remain; " \
               "min_nodes is 5" in refused.describe()
        # A finished swap gives its reservation back with its lease: one more may then leave.
        waiting = next(n for n in TRAINING if n not in granted)
        assert not leases.reserve_leave(store, waiting, f"role-swap-{waiting}", "training").ok
        leases.release(store, f"role-swap-{granted[0]}")
        assert leases.reserve_leave(store, waiting, f"role-swap-{waiting}", "training").ok
    finally:
        store.close()


def test_the_dry_run_count_includes_swaps_under_way(sqlite_url: str, repo_dir: Path) -> None:
    store = _fleet(sqlite_url, repo_dir)
    try:
        for n in TRAINING[:3]:
            assert leases.take(store, [n], f"run-{n}", "role_swap").ok
            assert leases.reserve_leave(store, n, f"run-{n}", "training").ok
        count = leases.floor_count(store, "training", {TRAINING[3]})
        assert (count.serving, count.taken, count.others, count.left, count.ok) == (8, 1, 3, 4, False)
        # A step re-run of a swap that holds its reservation counts itself once, not twice.
        assert leases.reserve_leave(store, TRAINING[0], f"run-{TRAINING[0]}", "training").ok
    finally:
        store.close()


def test_no_reservation_without_the_lease(sqlite_url: str, repo_dir: Path) -> None:
    store = _fleet(sqlite_url, repo_dir)
    try:
        with pytest.raises(RuntimeError, match="not leased"):
            leases.reserve_leave(store, TRAINING[0], "run-x", "training")
    finally:
        store.close()


def test_plan_blocks_a_move_pool_beyond_the_floor(sqlite_url: str, repo_dir: Path) -> None:
    """`racklife plan` counts the store's floor: in service, swaps under way, min_nodes."""
    store = _fleet(sqlite_url, repo_dir)
    try:
        now = datetime.now(UTC)
        observe.save(store, [Observation(n, now, State.IN_SERVICE, "training", bmc=BmcSeen("on"),
                                         acceptance=AcceptanceSeen(True, True, True, True, f"acc-{n}"))
                             for n in TRAINING])
        assert leases.take(store, [TRAINING[0]], "run-0", "role_swap").ok
        assert leases.reserve_leave(store, TRAINING[0], "run-0", "training").ok
        inv = load_inventory(repo_dir / "examples" / "site-h100-2rack.yaml")
        moved = set(TRAINING[3:])  # five of the eight to inference; the floor spares 8 - 1 - 5 = 2
        nodes = [n.model_copy(update={"pool": "inference" if n.name in moved or n.name not in TRAINING
                                      else "training"}) for n in inv.nodes]
        pools = dict(inv.pools)
        pools["training"] = pools["training"].model_copy(update={"min_nodes": FLOOR})
        result = plan_observed(store, inv.model_copy(update={"nodes": nodes, "pools": pools}),
                               TRAINING)
        by = {p.node: p for p in result.nodes}
        planned = sorted(n for n in moved if by[n].steps)
        blocked = sorted(n for n in moved if [b.kind for b in by[n].blockers] == ["pool-floor"])
        assert planned == sorted(moved)[:2] and blocked == sorted(moved)[2:], \
            {n: (by[n].steps, by[n].blockers) for n in moved}
        assert "8 in service, 1 leaving in role swaps under way, 5 planned to move out; min_nodes is 5, " \
               "so 2 may move now" in by[blocked[0]].blockers[0].message
    finally:
        store.close()


def test_concurrent_lends_out_of_one_pool_keep_its_floor(url: str, repo_dir: Path) -> None:
    """Slurm's power saving suspends all eight idle nodes at once: the lends take the role swap's floor check."""
    store = _fleet(url, repo_dir, lendable=True)
    try:
        app = Path(__file__).with_name("lend_floor_app.py")
        done = subprocess.run([sys.executable, str(app), url, *TRAINING], capture_output=True, text=True,
                              timeout=300, env=os.environ | {"RACKLIFE_DB": url})
        assert done.returncode == 0, done.stdout + done.stderr
        seen = json.loads(done.stdout.strip().splitlines()[-1])
        results = seen["results"]
        refused = sorted(n for n, r in results.items() if "pool floor" in r["reason"])
        assert len(seen["holding"]) == len(TRAINING) - FLOOR, results
        assert seen["reserved"] == seen["holding"] and sorted(seen["holding"] + refused) == TRAINING, seen
        why = results[refused[0]]["reason"]
        assert why.startswith("refused, nothing changed: pool floor: pool training: 8 in service, this request "
                              "takes 1 out, 3 already leaving in other swaps, 4 would remain; min_nodes is 5"), why
        for n in refused:  # nothing touched: in service, no transition, no lend row, lease given back
            assert not results[n]["ok"] and store.get(n).state is State.IN_SERVICE
            assert [t.event for t in store.history(n)][-1] == "join_done"
            assert "lend" not in [c.kind for c in store.changes(n)]
        assert leases.holders(store) == {}
    finally:
        store.close()

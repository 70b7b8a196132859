"""The repair breaker under concurrent repairs: the count and the lease are one transaction.

Eight automatic repairs in a pool of eight whose max_repair_percent is 25 start
at the same instant, each from its own store connection (as eight controller
processes would): exactly two may start; the others are refused with the numbers.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from lifecycle.model.inventory import load_inventory
from lifecycle.model.states import Actor
from lifecycle.store import AcceptanceRecord, Store, leases, repair_breaker

TRAINING = [f"r01-n0{i}" for i in range(1, 9)]


def _serving(store: Store, node: str) -> None:
    for event in ("inspect", "inspect_done", "provision", "provision_done", "burn_in", "accept"):
        store.transition(node, event, Actor.WORKFLOW, f"test {event}")
    now = datetime.now(UTC)
    rec = AcceptanceRecord(f"acc-{node}", node, True, "quick", "h100-sxm-8", now, now + timedelta(days=1),
                           "policy:test", None, {}, None, None)
    store.add_acceptance_record(rec)
    store.transition(node, "join", Actor.WORKFLOW, "join", acceptance_record=rec.id)
    store.transition(node, "join_done", Actor.WORKFLOW, "joined")


def _fleet(url: str, repo_dir: Path, percent: int | None) -> Store:
    inv = load_inventory(repo_dir / "examples" / "site-h100-2rack.yaml")
    pools = dict(inv.pools)
    if percent is not None:
        pools["training"] = pools["training"].model_copy(update={"max_repair_percent": percent})
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
        yield base.rsplit("/", 1)[0] + f"/breaker_{abs(hash(request.node.name)) % 10**8}"


def _repair_all_at_once(url: str, nodes: list[str]) -> dict[str, repair_breaker.RepairTake]:
    start = threading.Barrier(len(nodes))

    def repair(node: str) -> repair_breaker.RepairTake:
        store = Store(url)  # its own engine and connections, as another controller process has
        try:
            start.wait()
            return repair_breaker.take(store, node, f"repair-{node}", automatic=True)
        finally:
            store.close()

    with ThreadPoolExecutor(len(nodes)) as pool:
        return dict(zip(nodes, pool.map(repair, nodes), strict=True))


def test_concurrent_automatic_repairs_stay_below_the_share(url: str, repo_dir: Path) -> None:
    store = _fleet(url, repo_dir, percent=25)
    try:
        takes = _repair_all_at_once(url, TRAINING)
        granted = sorted(n for n, t in takes.items() if t.ok)
        assert len(granted) == 2, {n: t.count.describe() for n, t in takes.items()}
        assert sorted(leases.holders(store)) == granted
        refused = next(t for t in takes.values() if not t.ok)
        assert refused.held is None and refused.count.open
        assert (f"pool training: 2 of 8 nodes under repair ({', '.join(granted)}); max_repair_percent 25 "
                "allows 2 at once; breaker open: no new automatic repair") == refused.count.describe()
        # A finished repair gives its slot back with its lease.
        waiting = next(n for n in TRAINING if n not in granted)
        leases.release(store, f"repair-{granted[0]}")
        assert repair_breaker.take(store, waiting, f"repair-{waiting}", automatic=True).ok
    finally:
        store.close()


def test_default_share_is_ten_percent_and_at_least_one(sqlite_url: str, repo_dir: Path) -> None:
    store = _fleet(sqlite_url, repo_dir, percent=None)
    try:
        closed = repair_breaker.count(store, "training")
        assert (closed.nodes, closed.percent, closed.limit, closed.open) == (8, 10, 1, False)
        assert repair_breaker.take(store, TRAINING[0], "repair-a", automatic=True).ok
        second = repair_breaker.take(store, TRAINING[1], "repair-b", automatic=True)
        assert not second.ok and second.count.repairing == (TRAINING[0],)
        # The same run again (a step re-run) keeps its lease without counting itself.
        again = repair_breaker.take(store, TRAINING[0], "repair-a", automatic=True)
        assert again.ok and again.count.repairing == ()
    finally:
        store.close()


def test_repairing_nodes_count_and_an_operator_repair_is_counted_not_refused(sqlite_url: str,
                                                                             repo_dir: Path) -> None:
    store = _fleet(sqlite_url, repo_dir, percent=10)
    try:
        # A node in `repairing` (hands-on hardware work, no run's lease) takes the pool's one slot.
        store.transition(TRAINING[0], "quarantine", Actor.HEALTH, "xid 79")
        store.transition(TRAINING[0], "repair", Actor.OPERATOR, "fan replaced")
        auto = repair_breaker.take(store, TRAINING[1], "repair-b", automatic=True)
        assert not auto.ok and auto.count.repairing == (TRAINING[0],)
        manual = repair_breaker.take(store, TRAINING[1], "repair-b", automatic=False)
        assert manual.ok
        assert repair_breaker.count(store, "training").repairing == (TRAINING[0], TRAINING[1])
    finally:
        store.close()


def test_another_runs_lease_refuses_even_a_manual_repair(sqlite_url: str, repo_dir: Path) -> None:
    store = _fleet(sqlite_url, repo_dir, percent=50)
    try:
        assert leases.take(store, [TRAINING[0]], "role-swap-x", "role_swap").ok
        held = repair_breaker.take(store, TRAINING[0], "repair-a", automatic=False)
        assert not held.ok and held.held is not None and held.held.run_id == "role-swap-x"
        # A holder the caller found terminal is taken over.
        assert repair_breaker.take(store, TRAINING[0], "repair-a", automatic=False,
                                   replaceable=("role-swap-x",)).ok
        assert leases.holders(store)[TRAINING[0]].workflow == repair_breaker.REPAIR_WORKFLOW
    finally:
        store.close()

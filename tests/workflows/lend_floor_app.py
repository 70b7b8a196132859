"""Eight lend_node runs of one pool started at once in one DBOS process; run by test_pool_floor.

argv: DB_URL NODE... . The lend's node cycle (Slurm leave, role switch, Kubernetes join: not what is
tested here, and the lab's Slurm test runs it for real) is replaced by a hold that keeps each granted
run, with its lease and floor reservation, until every run has either been refused or reached the
hold; the store's reservations are read at that instant. Prints one JSON object: each node's
outcome, the nodes that reached the hold, and the nodes whose lease reserved a leave.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from typing import Any

import sqlalchemy as sa

from lifecycle.store import db, shared_store
from lifecycle.workflows import elastic, engine, registry

URL, NODES = sys.argv[1], sys.argv[2:]
GO = threading.Event()
HOLDING: list[str] = []


def held_cycle(node: str, *_args: Any, **_kwargs: Any) -> None:
    out = _args[4]
    HOLDING.append(node)
    GO.wait(120)
    out.reason = "the node cycle was held by the test"


def main() -> None:
    assert registry.MODULES
    elastic.cycle = held_cycle  # type: ignore[assignment]
    engine.launch(URL, executor="test/lend-floor")
    try:
        settings = elastic.ElasticSettings(kubeconfig="/nonexistent", role_cmd=("true",))
        handles = [engine.start(elastic.lend_node, n, settings) for n in NODES]
        deadline = time.monotonic() + 120
        while sum(h.get_status().status == "SUCCESS" for h in handles) + len(HOLDING) < len(NODES):
            assert time.monotonic() < deadline, "the lends never all decided"
            time.sleep(0.05)
        with shared_store().engine.connect() as conn:
            reserved = sorted(r.node for r in conn.execute(
                sa.select(db.leases.c.node).where(db.leases.c.leaving_pool.is_not(None))))
        GO.set()
        results = {n: h.get_result() for n, h in zip(NODES, handles, strict=True)}
        print(json.dumps({"results": results, "holding": sorted(HOLDING), "reserved": reserved}))
    finally:
        engine.shutdown()


if __name__ == "__main__":
    main()

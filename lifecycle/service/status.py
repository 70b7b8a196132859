"""The fleet at a glance: pools and their capacity, nodes per state, running workflows and their step.

`racklife status` prints it (a Rich view, or JSON); it is built from the same
read of the store as the metrics (:func:`lifecycle.service.fleet.read_fleet`),
so the view and a PromQL query on the scrape agree by construction. A
running run's progress is what DBOS journaled: the steps it completed and the
newest one, with the nodes it holds leases on.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from lifecycle.model.states import State
from lifecycle.service.fleet import CAPACITY, TRANSITIONAL, Capacity, Fleet, by_pool, read_fleet
from lifecycle.store import Store, db
from lifecycle.store import leases as store_leases

RUNNING = ("PENDING", "ENQUEUED")


@dataclass(frozen=True)
class PoolStatus:
    name: str
    nodes: int
    gpus: int
    states: dict[str, int]  # state -> nodes (non-zero only)
    capacity: dict[str, int]  # Capacity -> GPUs (every status)


@dataclass(frozen=True)
class RunningRun:
    id: str
    workflow: str
    status: str
    created_at: datetime
    steps_done: int
    last_step: str | None
    nodes: tuple[str, ...]  # nodes the run holds leases on


@dataclass(frozen=True)
class FleetStatus:
    at: datetime
    pools: tuple[PoolStatus, ...]
    running: tuple[RunningRun, ...]
    stuck: tuple[tuple[str, str, float], ...]  # (node, state, seconds) of nodes in a transitional state
    drift: int
    unobserved: int
    services: tuple[str, ...] = ()  # executor ids of the live `racklife serve` processes

    def to_json(self) -> dict[str, Any]:
        doc = asdict(self)
        doc["at"] = self.at.isoformat()
        for r in doc["running"]:
            r["created_at"] = r["created_at"].isoformat()
        doc["stuck"] = [{"node": n, "state": s, "seconds": round(t, 3)} for n, s, t in self.stuck]
        return doc


def _steps(store: Store, run_ids: list[str]) -> dict[str, tuple[int, str | None]]:
    """(steps journaled, the newest step's name) per run, from DBOS's operation_outputs."""
    schema = None if db.is_sqlite(store.url) else "dbos"
    if not run_ids or not sa.inspect(store.engine).has_table("operation_outputs", schema=schema):
        return {}
    ops = sa.table("operation_outputs", sa.column("workflow_uuid"), sa.column("function_id"),
                   sa.column("function_name"), schema=schema)
    q = (sa.select(ops.c.workflow_uuid, ops.c.function_id, ops.c.function_name)
         .where(ops.c.workflow_uuid.in_(run_ids)).order_by(ops.c.workflow_uuid, ops.c.function_id))
    out: dict[str, tuple[int, str | None]] = {}
    with store.reader.connect() as conn:
        for r in conn.execute(q):
            count, _last = out.get(r.workflow_uuid, (0, None))
            out[r.workflow_uuid] = (count + 1, r.function_name)
    return out


def fleet_status(store: Store, fleet: Fleet | None = None, stuck_after_s: float = 3600) -> FleetStatus:
    fleet = fleet or read_fleet(store)
    pools = []
    members = by_pool(fleet.nodes)
    for name in fleet.pools:
        nodes = members.get(name, [])
        capacity = Counter[Capacity]()
        for n in nodes:
            capacity[CAPACITY[n.state]] += n.gpus
        pools.append(PoolStatus(name, len(nodes), sum(n.gpus for n in nodes),
                                {s.value: c for s in State if (c := sum(1 for n in nodes if n.state == s))},
                                {c.value: capacity[c] for c in Capacity}))
    running = [r for r in fleet.runs if r.status in RUNNING]
    steps = _steps(store, [r.id for r in running])
    held: dict[str, list[str]] = {}
    for lease in store_leases.holders(store).values():
        held.setdefault(lease.run_id, []).append(lease.node)
    runs = tuple(RunningRun(r.id, r.workflow, r.status, r.created_at, *steps.get(r.id, (0, None)),
                            tuple(sorted(held.get(r.id, ()))))
                 for r in sorted(running, key=lambda r: r.created_at))
    stuck = tuple((n.name, n.state.value, age) for n in fleet.nodes
                  if n.state in TRANSITIONAL and (age := (fleet.at - n.state_since).total_seconds()) > stuck_after_s)
    unobserved = sum(1 for n in fleet.nodes if n.name not in fleet.observations)
    services = tuple(sorted(ex.id for ex in store_leases.alive(store, store_leases.this_host(),
                                                              role=store_leases.SERVE_ROLE)))
    return FleetStatus(fleet.at, tuple(pools), runs, stuck, len({d.node for d in fleet.drift}), unobserved,
                       services)

"""The repair circuit breaker: automatic repairs never take more than a share of a pool at once.

A fault that is really the fleet's (a bad driver, a cooling loop, a switch)
shows up as the same XID on many nodes at the same time. Repairing each node
as if its fault were its own would take the whole pool out of service for a
problem no node-level action fixes. So automatic repairs of one pool are kept
below ``max_repair_percent`` of its nodes (the pool's setting, 10 by
default, always at least one node): with that many under way the breaker is
open and a new automatic repair is refused, with the numbers.

The count lives in the store, not in a process, because repairs run from
several controller processes: a node counts while it is ``repairing`` or
while a repair run holds its lease. The check and the lease are one
transaction (the pool row locked on PostgreSQL, the write lock first on
SQLite), so concurrent repairs cannot both take the last slot. An
operator's explicit repair is not held back by the breaker, but it is
counted by it.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from datetime import UTC, datetime

import sqlalchemy as sa

from lifecycle.model.states import State
from lifecycle.store import db
from lifecycle.store.leases import Lease
from lifecycle.store.store import NodeNotFound, Store

REPAIR_WORKFLOW = "repair"  # the workflow name on a repair run's lease
DEFAULT_PERCENT = 10
_GONE = (State.DECOMMISSIONED.value,)


@dataclass(frozen=True)
class BreakerCount:
    """A pool's repairs under way against its limit."""

    pool: str
    nodes: int  # nodes of the pool (not decommissioned)
    percent: int  # the pool's max_repair_percent
    repairing: tuple[str, ...]  # nodes in `repairing` or leased to a repair run, this request's excluded

    @property
    def limit(self) -> int:
        return max(1, math.floor(self.nodes * self.percent / 100))

    @property
    def open(self) -> bool:
        """No room for one more repair."""
        return len(self.repairing) >= self.limit

    def describe(self) -> str:
        state = "open: no new automatic repair" if self.open else "closed"
        under = f" ({', '.join(self.repairing)})" if self.repairing else ""
        return (f"pool {self.pool}: {len(self.repairing)} of {self.nodes} nodes under repair{under}; "
                f"max_repair_percent {self.percent} allows {self.limit} at once; breaker {state}")


@dataclass(frozen=True)
class RepairTake:
    """What an attempt to start a repair did: the lease taken, or why not."""

    count: BreakerCount
    held: Lease | None = None  # another live run holds the node
    taken: bool = False

    @property
    def ok(self) -> bool:
        return self.taken


def _count(conn: sa.Connection, pool: str, node: str, lock: bool) -> BreakerCount:
    q = sa.select(db.pools.c.spec).where(db.pools.c.name == pool)
    row = conn.execute(q.with_for_update() if lock else q).first()
    if row is None:
        raise ValueError(f"pool {pool!r} is not in the store")
    percent = int(json.loads(row.spec).get("max_repair_percent") or DEFAULT_PERCENT)
    members = {r.name: r.state for r in conn.execute(
        sa.select(db.nodes.c.name, db.nodes.c.state).where(db.nodes.c.pool == pool, db.nodes.c.state.notin_(_GONE)))}
    leased = {r.node for r in conn.execute(sa.select(db.leases.c.node).where(
        db.leases.c.workflow == REPAIR_WORKFLOW, db.leases.c.node.in_(list(members))))}
    under = {n for n, s in members.items() if s == State.REPAIRING.value} | leased
    return BreakerCount(pool, len(members), percent, tuple(sorted(under - {node})))


def count(store: Store, pool: str, node: str = "") -> BreakerCount:
    """The pool's breaker now (reads only: a dry run, a report); ``node`` is left out of the count."""
    with store.reader.connect() as conn:
        return _count(conn, pool, node, lock=False)


def counts(store: Store) -> tuple[BreakerCount, ...]:
    """Every pool's breaker now, in pool order (reads only: the metrics, a status view)."""
    with store.reader.connect() as conn:
        pools = [r.name for r in conn.execute(sa.select(db.pools.c.name).order_by(db.pools.c.name))]
        return tuple(_count(conn, pool, "", lock=False) for pool in pools)


def take(store: Store, node: str, run_id: str, *, automatic: bool,
         replaceable: tuple[str, ...] = ()) -> RepairTake:
    """Lease ``node`` to the repair run ``run_id`` if the breaker allows it: one transaction.

    ``automatic``: a repair started from an event, refused while the breaker is open; an
    operator's (``automatic=False``) is only refused by another run's lease. A node already
    leased to ``run_id`` (a step re-run) is taken again without counting itself. A lease held
    by a run in ``replaceable`` (found terminal by the caller) is taken over.
    """
    with store.engine.begin() as conn:
        row = conn.execute(sa.select(db.nodes.c.pool).where(db.nodes.c.name == node)).first()
        if row is None:
            raise NodeNotFound(node)
        counted = _count(conn, row.pool, node, lock=True)
        current = conn.execute(sa.select(db.leases).where(db.leases.c.node == node)).first()
        if current is not None and current.run_id != run_id and current.run_id not in replaceable:
            taken_at = current.taken_at if current.taken_at.tzinfo else current.taken_at.replace(tzinfo=UTC)
            return RepairTake(counted, held=Lease(current.node, current.run_id, current.workflow, taken_at))
        if current is not None and current.run_id == run_id:
            return RepairTake(counted, taken=True)
        if automatic and counted.open:
            return RepairTake(counted)
        now = datetime.now(UTC)
        if current is None:
            conn.execute(sa.insert(db.leases).values(node=node, run_id=run_id, workflow=REPAIR_WORKFLOW,
                                                     taken_at=now))
        else:
            res = conn.execute(sa.update(db.leases)
                               .where(db.leases.c.node == node, db.leases.c.run_id == current.run_id)
                               .values(run_id=run_id, workflow=REPAIR_WORKFLOW, taken_at=now))
            if res.rowcount != 1:
                raise RuntimeError(f"lease on {node} changed hands concurrently")
    return RepairTake(counted, taken=True)

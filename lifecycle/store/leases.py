"""One run per node: leases on nodes, and the executors (processes) that run workflows.

Two runs acting on one node at once is how a killed `racklife accept` and its
retry burned in the same nodes side by side. A run takes a lease on each of
its nodes as a step, all or nothing, before it touches them; a node held by a
run that is still live refuses the next run, naming the holder. Whether a
holder is live is the workflow engine's knowledge, not the store's: callers
pass the holders they found dead (terminal runs), and only those leases are
taken over.

A role swap also reserves, on its lease, its node's leave from the source
pool, in the same transaction that checks the pool's floor (``min_nodes``),
so concurrent swaps out of one pool cannot both pass a check that only one
of them may pass.

The executors table is the other half: each process that runs workflows
records its host, pid and a heartbeat, so a later process can tell a dead
one's pending runs (to recover them) from a live one's (to leave alone).
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import sqlalchemy as sa

from lifecycle.model.procs import pid_start
from lifecycle.model.states import State
from lifecycle.store import db
from lifecycle.store.store import NodeNotFound, Store

IN_SERVICE = State.IN_SERVICE.value


def _now() -> datetime:
    return datetime.now(UTC)


def _aware(v: datetime) -> datetime:
    return v if v.tzinfo else v.replace(tzinfo=UTC)


@dataclass(frozen=True)
class Lease:
    node: str
    run_id: str
    workflow: str
    taken_at: datetime


@dataclass(frozen=True)
class LeaseOutcome:
    """What a take did: every node held by the run, or nothing and who holds what."""

    taken: tuple[str, ...]
    held: dict[str, Lease]  # node -> the live lease in the way (empty when taken)

    @property
    def ok(self) -> bool:
        return not self.held


# Built once: every run takes and gives back its nodes' leases (store.py says why).
_LEASES_OF = sa.select(db.leases).where(db.leases.c.node.in_(sa.bindparam("b_nodes", expanding=True)))
_NAMES_OF = sa.select(db.nodes.c.name).where(db.nodes.c.name.in_(sa.bindparam("b_nodes", expanding=True)))
_TAKE = sa.insert(db.leases)
_RELEASE = sa.delete(db.leases).where(db.leases.c.run_id == sa.bindparam("b_run")).returning(db.leases.c.node)


def _lease(r: sa.Row[tuple[str, str, str, datetime]]) -> Lease:
    return Lease(r.node, r.run_id, r.workflow, _aware(r.taken_at))


def holders(store: Store, nodes: Collection[str] | None = None) -> dict[str, Lease]:
    """The lease on each node that has one (every lease when ``nodes`` is None)."""
    with store._read() as conn:  # SQLite: no write lock for a read (every run reads its nodes' leases)
        rows = (conn.execute(sa.select(db.leases)) if nodes is None
                else conn.execute(_LEASES_OF, {"b_nodes": list(nodes)}))
        return {r.node: _lease(r) for r in rows}


def take(store: Store, nodes: Sequence[str], run_id: str, workflow: str,
         replaceable: Collection[str] = ()) -> LeaseOutcome:
    """Lease every node to ``run_id``, or none of them.

    A node already leased to ``run_id`` counts as taken (a step re-run after a
    crash). A lease held by a run in ``replaceable`` (one the caller found
    terminal) is taken over; any other holder refuses the whole take.
    """
    now = _now()
    with store.engine.begin() as conn:
        known = {r.name for r in conn.execute(_NAMES_OF, {"b_nodes": list(nodes)})}
        for n in nodes:
            if n not in known:
                raise NodeNotFound(n)
        current = {r.node: _lease(r) for r in conn.execute(_LEASES_OF, {"b_nodes": list(nodes)})}
        held = {n: le for n, le in current.items() if le.run_id != run_id and le.run_id not in replaceable}
        if held:
            return LeaseOutcome((), held)
        for n in dict.fromkeys(nodes):
            lease = current.get(n)
            if lease is None:
                conn.execute(_TAKE, {"node": n, "run_id": run_id, "workflow": workflow, "taken_at": now})
            elif lease.run_id != run_id:
                # Guarded by the old holder: a concurrent take of the same node loses here.
                res = conn.execute(sa.update(db.leases)
                                   .where(db.leases.c.node == n, db.leases.c.run_id == lease.run_id)
                                   .values(run_id=run_id, workflow=workflow, taken_at=now))
                if res.rowcount != 1:
                    raise RuntimeError(f"lease on {n} changed hands concurrently")
    return LeaseOutcome(tuple(dict.fromkeys(nodes)), {})


def release(store: Store, run_id: str, nodes: Collection[str] | None = None) -> list[str]:
    """Release the run's leases (on ``nodes`` only, if given); return the nodes released."""
    with store.engine.begin() as conn:
        if nodes is None:
            rows = conn.execute(_RELEASE, {"b_run": run_id})
        else:
            rows = conn.execute(sa.delete(db.leases).where(db.leases.c.run_id == run_id,
                                                          db.leases.c.node.in_(list(nodes)))
                                .returning(db.leases.c.node))
        released = [r.node for r in rows]
    return sorted(released)


def leased_to(store: Store, run_id: str) -> list[str]:
    with store.reader.connect() as conn:
        return sorted(r.node for r in conn.execute(sa.select(db.leases.c.node).where(db.leases.c.run_id == run_id)))


# ---------------------------------------------------------------- pool floors


@dataclass(frozen=True)
class FloorCount:
    """A pool's floor against what would be left of it: in service now, less every node held to leave."""

    pool: str
    serving: int  # in service in the pool now
    taken: int  # of those: this request's nodes
    others: int  # of those: reserved by role swaps already under way (not this request's)
    floor: int  # the pool's min_nodes

    @property
    def left(self) -> int:
        return self.serving - self.taken - self.others

    @property
    def ok(self) -> bool:
        return self.left >= self.floor

    def describe(self) -> str:
        others = f", {self.others} already leaving in other swaps" if self.others else ""
        return (f"pool {self.pool}: {self.serving} in service, this request takes {self.taken} out{others}, "
                f"{self.left} would remain; min_nodes is {self.floor}")


def _floor(conn: sa.Connection, pool: str, leaving: Collection[str], lock: bool) -> FloorCount:
    q = sa.select(db.pools.c.spec).where(db.pools.c.name == pool)
    row = conn.execute(q.with_for_update() if lock else q).first()  # PostgreSQL: one check per pool at a time
    floor = int(json.loads(row.spec).get("min_nodes") or 0) if row is not None else 0
    serving = {r.name for r in conn.execute(sa.select(db.nodes.c.name).where(
        db.nodes.c.pool == pool, db.nodes.c.state == IN_SERVICE))}
    reserved = {r.node for r in conn.execute(sa.select(db.leases.c.node).where(db.leases.c.leaving_pool == pool))}
    request = serving & set(leaving)
    return FloorCount(pool, len(serving), len(request), len((serving & reserved) - request), floor)


def floor_count(store: Store, pool: str, leaving: Collection[str]) -> FloorCount:
    """What the pool would keep if ``leaving`` left it too (reads only: a dry run, a plan)."""
    with store.reader.connect() as conn:
        return _floor(conn, pool, leaving, lock=False)


def reserve_leave(store: Store, node: str, run_id: str, pool: str, batch: Collection[str] = ()) -> FloorCount:
    """Check the floor and, if it holds, reserve ``node``'s leave from ``pool`` on its lease: one transaction.

    The node must be leased to ``run_id``. ``batch``: the other nodes of the same request, counted
    as leaving too. A reservation is counted by every later check until the lease is released, so
    two swaps out of one pool can never both take its last spare node. Taking it again (a step re-run)
    finds the same count and changes nothing.
    """
    with store.engine.begin() as conn:  # SQLite: BEGIN IMMEDIATE (the write lock first); PostgreSQL: the row lock
        count = _floor(conn, pool, {node, *batch}, lock=True)
        if count.ok:
            done = conn.execute(sa.update(db.leases).where(db.leases.c.node == node, db.leases.c.run_id == run_id)
                                .values(leaving_pool=pool))
            if done.rowcount != 1:
                raise RuntimeError(f"node {node} is not leased to run {run_id}: no reservation without the lease")
    return count


# ---------------------------------------------------------------- executors


@dataclass(frozen=True)
class Executor:
    id: str
    host: str
    role: str
    pid: int
    pid_start: str | None
    started_at: datetime
    heartbeat_at: datetime


HEARTBEAT_TIMEOUT_S = 30.0  # another host's executor silent this long is dead
SERVE_ROLE = "serve"  # the executors of `racklife serve`


def this_host() -> str:
    """The HOST part of this process's executor id: ``RACKLIFE_EXECUTOR_ID``, else the host name."""
    return os.environ.get("RACKLIFE_EXECUTOR_ID") or socket.gethostname()


def executor_alive(ex: Executor, host: str, now: datetime) -> bool:
    """Same host: its pid still runs the same process; another host: its heartbeat is fresh."""
    if ex.host == host:
        return pid_start(ex.pid) == ex.pid_start
    return now - ex.heartbeat_at < timedelta(seconds=HEARTBEAT_TIMEOUT_S)


def alive(store: Store, host: str, now: datetime | None = None, role: str | None = None) -> list[Executor]:
    """The executors (of ``role``, if given) alive now, as seen from ``host``."""
    now = now or _now()
    return [ex for ex in executors(store) if (role is None or ex.role == role) and executor_alive(ex, host, now)]


def register_executor(store: Store, ex: Executor) -> None:
    with store.engine.begin() as conn:
        conn.execute(sa.delete(db.executors).where(db.executors.c.id == ex.id))
        conn.execute(sa.insert(db.executors).values(
            id=ex.id, host=ex.host, role=ex.role, pid=ex.pid, pid_start=ex.pid_start,
            started_at=ex.started_at, heartbeat_at=ex.heartbeat_at))


def heartbeat(store: Store, executor_id: str, at: datetime | None = None) -> bool:
    """Record that the executor is alive now (or, with ``at``, when it was last heard of).

    False when it has no row: another process found it dead and retired it.
    """
    with store.engine.begin() as conn:
        res = conn.execute(sa.update(db.executors).where(db.executors.c.id == executor_id)
                           .values(heartbeat_at=at or _now()))
    return res.rowcount > 0


def retire_executor(store: Store, executor_id: str) -> None:
    """A process that ends cleanly leaves no row: nothing of it to recover."""
    with store.engine.begin() as conn:
        conn.execute(sa.delete(db.executors).where(db.executors.c.id == executor_id))


def executors(store: Store) -> list[Executor]:
    with store.reader.connect() as conn:
        return [Executor(r.id, r.host, r.role, r.pid, r.pid_start, _aware(r.started_at), _aware(r.heartbeat_at))
                for r in conn.execute(sa.select(db.executors))]

"""The last observation of each node, as the planner wrote it, with the time it was made.

The store keeps the document opaque (JSON the planner owns) so that what is
observed can grow without a schema change; ``at`` is a column so a reader
can tell a stale observation without parsing it, and ``out_of_pool`` (the
planner's judgement that the node's scheduler has it out) so that every
count against a pool's ``max_unavailable`` reads it without the document.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa

from lifecycle.model.states import State
from lifecycle.store import db
from lifecycle.store.store import AcceptanceRecord, NodeRecord, Store

_IN_LIMIT = 500  # up to this many names go in one IN (...); a read of more reads every row and filters


def _aware(at: datetime) -> datetime:
    """A time read back from SQLite (which keeps no zone) as the UTC it was written in."""
    return at if at.tzinfo else at.replace(tzinfo=UTC)


def save(store: Store, seen: Sequence[tuple[str, datetime, dict[str, Any], str | None]]) -> None:
    """Replace each node's last observation (node, at, document, the pool whose scheduler shows it out or
    None) in one transaction (bulk statements)."""
    rows = [{"node": node, "at": at, "doc": json.dumps(doc, sort_keys=True), "out_of_pool": out}
            for node, at, doc, out in seen]
    with store.engine.begin() as conn:
        for i in range(0, len(rows), _IN_LIMIT):
            chunk = rows[i:i + _IN_LIMIT]
            conn.execute(sa.delete(db.observations).where(db.observations.c.node.in_([r["node"] for r in chunk])))
            conn.execute(sa.insert(db.observations), chunk)


def load(store: Store, nodes: Collection[str] | None = None) -> dict[str, tuple[datetime, dict[str, Any]]]:
    q = sa.select(db.observations)
    if nodes is not None:
        q = q.where(db.observations.c.node.in_(list(nodes)))
    with store.reader.connect() as conn:
        return {r.node: (_aware(r.at), json.loads(r.doc))
                for r in conn.execute(q)}


def scheduler_out(store: Store, records: Sequence[NodeRecord]) -> set[str]:
    """The nodes of ``records`` whose last observation shows them out of their own pool's scheduler.

    Only an observation made since the node entered its state, of the pool it is in now, counts: one
    older (racklife rejoined the node since) or of another pool (a node swapped to inference stays
    drained in Slurm) leaves the store's word standing, as does a node never observed."""
    if not records:
        return set()
    t = db.observations
    q = sa.select(t.c.node, t.c.at, t.c.out_of_pool).where(t.c.out_of_pool.is_not(None))
    if len(records) <= _IN_LIMIT:
        q = q.where(t.c.node.in_([r.name for r in records]))
    by_name = {r.name: r for r in records}
    with store.reader.connect() as conn:
        rows = list(conn.execute(q))
    out = set()
    for row in rows:
        rec = by_name.get(row.node)
        if rec is not None and row.out_of_pool == rec.pool and _aware(row.at) >= rec.state_since:
            out.add(rec.name)
    return out


# The findings of an acceptance record that carry the driver version the node's own GPUs reported: the
# profile's driver check (every gpu check) and the controller's comparison with the version a driver
# change asked for (``acceptance.judge``'s ``result.driver``).
DRIVER_FINDINGS = ("gpu.driver", "result.driver")


def reported_driver(record: AcceptanceRecord) -> str | None:
    """The driver version the node's GPUs reported in ``record``; None when it reports none, or two."""
    findings = record.summary.get("findings") if isinstance(record.summary, dict) else None
    seen = {str(f["measured"]) for f in findings or []
            if isinstance(f, dict) and f.get("check") in DRIVER_FINDINGS and isinstance(f.get("measured"), str)}
    return seen.pop() if len(seen) == 1 else None


def last_boot(store: Store, node: str) -> tuple[dict[str, Any], datetime] | None:
    """The report of the node's newest phone-home, with its time, or None if it never phoned home."""
    t = db.boot_tokens
    q = (sa.select(t.c.report, t.c.used_at).where(t.c.node == node, t.c.used_at.is_not(None), t.c.report.is_not(None))
         .order_by(t.c.used_at.desc()))
    with store.reader.connect() as conn:
        for r in conn.execute(q):
            report = json.loads(r.report)
            if isinstance(report, dict) and not report.get("superseded"):
                at = _aware(r.used_at)
                return report, at
    return None


# Bulk reads for a refresh of the whole fleet: one query per kind of record instead of one per
# node (a 10,000-node refresh spent more time in 40,000 small queries than reading its BMCs).


def _among(q: Any, column: Any, nodes: Collection[str] | None) -> Any:
    return q.where(column.in_(list(nodes))) if nodes is not None and len(nodes) <= _IN_LIMIT else q


def last_boots(store: Store, nodes: Collection[str] | None = None) -> dict[str, tuple[dict[str, Any], datetime]]:
    """:func:`last_boot` of every node (of ``nodes``) that ever phoned home, in one query."""
    t = db.boot_tokens
    q = _among(sa.select(t.c.node, t.c.report, t.c.used_at)
               .where(t.c.used_at.is_not(None), t.c.report.is_not(None))
               .order_by(t.c.node, t.c.used_at.desc()), t.c.node, nodes)
    wanted = set(nodes) if nodes is not None else None
    out: dict[str, tuple[dict[str, Any], datetime]] = {}
    with store.reader.connect() as conn:
        for r in conn.execute(q):
            if r.node in out or (wanted is not None and r.node not in wanted):
                continue
            report = json.loads(r.report)
            if isinstance(report, dict) and not report.get("superseded"):
                out[r.node] = (report, _aware(r.used_at))
    return out


def newest_acceptance(store: Store, nodes: Collection[str] | None = None) -> dict[str, AcceptanceRecord]:
    """Each node's newest acceptance record (what ``Store.acceptance_records(node)[0]`` is), in one query."""
    a = db.acceptance_records
    q = _among(sa.select(a).order_by(a.c.node, a.c.created_at.desc()), a.c.node, nodes)
    wanted = set(nodes) if nodes is not None else None
    out: dict[str, AcceptanceRecord] = {}
    with store.reader.connect() as conn:
        for r in conn.execute(q):
            if r.node not in out and (wanted is None or r.node in wanted):
                out[r.node] = Store._acc(r)
    return out


def last_provisioned(store: Store, nodes: Collection[str] | None = None) -> dict[str, datetime]:
    """When each node last entered ``provisioned`` (its last build), in one query."""
    t = db.transitions
    q = _among(sa.select(t.c.node, sa.func.max(t.c.at).label("at")).where(t.c.target == State.PROVISIONED.value)
               .group_by(t.c.node), t.c.node, nodes)
    wanted = set(nodes) if nodes is not None else None
    with store.reader.connect() as conn:
        return {r.node: _aware(r.at) for r in conn.execute(q)
                if wanted is None or r.node in wanted}

"""GPU health events, once each, and what became of them: the record the automatic repair path keeps.

An Xid stays in a node's kernel log until the node reboots, so the collector
(:mod:`lifecycle.workflows.health`) reads the same line on every pass. The
store keeps each line once — keyed by node, source, Xid, GPU and the line's
own timestamp — and on it what racklife did about it: the action the repair
table chose, the repair run that started, or why none did (the pool's
breaker open, the node not in service, nothing to do). That record is shared
by every controller process, so ``racklife repair status`` and the metrics
read the same thing the service acted on, and an event whose repair was held
back by the breaker is tried again once the breaker closes.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum

import sqlalchemy as sa

from lifecycle.model.redact import redact
from lifecycle.store import db
from lifecycle.store.store import Store


class Outcome(StrEnum):
    PENDING = "pending"  # recorded, no decision yet
    STARTED = "started"  # a repair run was started for it (run_id)
    BREAKER_OPEN = "breaker_open"  # held back: the pool's breaker is open; tried again when it closes
    REFUSED = "refused"  # the repair run refused it (the node held by another run, not in service)
    NONE = "none"  # nothing to repair (informational, the application's fault)
    COVERED = "covered"  # another event of the same node is being repaired; this one rides along
    REPAIRED = "repaired"
    FAILED = "failed"  # the repair ran and the node was quarantined
    QUARANTINED = "quarantined"  # rma: quarantined for hands-on work


# Outcomes that still want a repair: the collector tries these again on its next pass.
WAITING = (Outcome.PENDING.value, Outcome.BREAKER_OPEN.value)


@dataclass(frozen=True)
class SeenXid:
    """One Xid line read from a node, before it is stored."""

    node: str
    xid: int
    pci: str
    logged_at: str
    message: str
    bucket: str
    action: str
    source: str = "kernel_log"


@dataclass(frozen=True)
class HealthEvent:
    id: int
    node: str
    source: str
    xid: int
    pci: str
    logged_at: str
    message: str
    bucket: str
    action: str
    outcome: str
    detail: str
    run_id: str | None
    seen_at: datetime
    updated_at: datetime


def _event(r: sa.Row[tuple[object, ...]]) -> HealthEvent:
    m = r._mapping

    def utc(t: datetime) -> datetime:
        return t if t.tzinfo else t.replace(tzinfo=UTC)

    return HealthEvent(m["id"], m["node"], m["source"], m["xid"], m["pci"], m["logged_at"], m["message"],
                       m["bucket"], m["action"], m["outcome"], m["detail"], m["run_id"], utc(m["seen_at"]),
                       utc(m["updated_at"]))


def record(store: Store, seen: list[SeenXid]) -> list[HealthEvent]:
    """Store the lines not stored yet (outcome ``pending``); return the new events, oldest line first."""
    t = db.health_events
    now = datetime.now(UTC)
    new: list[int] = []
    with store.engine.begin() as conn:
        for s in seen:
            exists = conn.execute(sa.select(t.c.id).where(
                t.c.node == s.node, t.c.source == s.source, t.c.xid == s.xid, t.c.pci == s.pci,
                t.c.logged_at == s.logged_at)).first()
            if exists is not None:
                continue
            res = conn.execute(sa.insert(t).values(
                node=s.node, source=s.source, xid=s.xid, pci=s.pci[:32], logged_at=s.logged_at[:64],
                message=redact(s.message)[:1000], bucket=s.bucket, action=s.action, outcome=Outcome.PENDING.value,
                detail="", run_id=None, seen_at=now, updated_at=now))
            pk = res.inserted_primary_key
            if pk is not None:
                new.append(int(pk[0]))
        rows = conn.execute(sa.select(t).where(t.c.id.in_(new)).order_by(t.c.id)).all() if new else []
    return [_event(r) for r in rows]


def set_outcome(store: Store, event_id: int, outcome: str, detail: str, run_id: str | None = None) -> None:
    """Say what became of an event (and of the run that handled it)."""
    Outcome(outcome)  # a value outside the vocabulary is a bug, not a row
    t = db.health_events
    values: dict[str, object] = {"outcome": outcome, "detail": redact(detail)[:500],
                                 "updated_at": datetime.now(UTC)}
    if run_id is not None:
        values["run_id"] = run_id
    with store.engine.begin() as conn:
        conn.execute(sa.update(t).where(t.c.id == event_id).values(**values))


def waiting(store: Store) -> list[HealthEvent]:
    """Events that still want a repair (pending, or held back by an open breaker), oldest first."""
    t = db.health_events
    with store.reader.connect() as conn:
        return [_event(r) for r in conn.execute(sa.select(t).where(t.c.outcome.in_(WAITING)).order_by(t.c.id))]


def events(store: Store, node: str | None = None, limit: int = 50) -> list[HealthEvent]:
    """The newest events (of ``node``), newest first."""
    t = db.health_events
    q = sa.select(t).order_by(t.c.id.desc()).limit(limit)
    if node is not None:
        q = q.where(t.c.node == node)
    with store.reader.connect() as conn:
        return [_event(r) for r in conn.execute(q)]


def counts(store: Store) -> Counter[tuple[str, str]]:
    """Events by (pool, outcome): what a metrics scrape exports (``racklife_health_events``)."""
    t, n = db.health_events, db.nodes
    q = (sa.select(n.c.pool, t.c.outcome, sa.func.count()).select_from(t.join(n, t.c.node == n.c.name))
         .group_by(n.c.pool, t.c.outcome))
    with store.reader.connect() as conn:
        return Counter({(str(r[0]), str(r[1])): int(r[2]) for r in conn.execute(q)})

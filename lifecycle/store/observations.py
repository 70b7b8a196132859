"""The last observation of each node, as the planner wrote it, with the time it was made.

The store keeps the document opaque (JSON the planner owns) so that what is
observed can grow without a schema change; ``at`` is a column so a reader
can tell a stale observation without parsing it.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa

from lifecycle.store import db
from lifecycle.store.store import Store


def save(store: Store, seen: Sequence[tuple[str, datetime, dict[str, Any]]]) -> None:
    """Replace each node's last observation (node, at, document) in one transaction."""
    with store.engine.begin() as conn:
        for node, at, doc in seen:
            conn.execute(sa.delete(db.observations).where(db.observations.c.node == node))
            conn.execute(sa.insert(db.observations).values(node=node, at=at, doc=json.dumps(doc, sort_keys=True)))


def load(store: Store, nodes: Collection[str] | None = None) -> dict[str, tuple[datetime, dict[str, Any]]]:
    q = sa.select(db.observations)
    if nodes is not None:
        q = q.where(db.observations.c.node.in_(list(nodes)))
    with store.engine.connect() as conn:
        return {r.node: (r.at if r.at.tzinfo else r.at.replace(tzinfo=UTC), json.loads(r.doc))
                for r in conn.execute(q)}


def last_boot(store: Store, node: str) -> tuple[dict[str, Any], datetime] | None:
    """The report of the node's newest phone-home, with its time, or None if it never phoned home."""
    t = db.boot_tokens
    q = (sa.select(t.c.report, t.c.used_at).where(t.c.node == node, t.c.used_at.is_not(None), t.c.report.is_not(None))
         .order_by(t.c.used_at.desc()))
    with store.engine.connect() as conn:
        for r in conn.execute(q):
            report = json.loads(r.report)
            if isinstance(report, dict) and not report.get("superseded"):
                at = r.used_at if r.used_at.tzinfo else r.used_at.replace(tzinfo=UTC)
                return report, at
    return None

"""The capacity ledger: GPU-hours per pool by what the GPUs were doing, from the state transitions.

"How much training capacity did we lend to inference last week, and what did
moving it cost" is a sum over time, which gauges cannot answer after the
fact. The store's transition history can: every node's states follow one
another with the time of each move, so each state is an interval, and an
interval times the SKU's GPU count is GPU-hours. The categories are the
metrics' (:data:`lifecycle.service.fleet.CAPACITY`), so the ledger and the
``racklife_pool_gpus`` gauge use one vocabulary; the per-state sums are kept
too (the cost of a move is the hours in ``lending`` and ``reclaiming``).

A node's pool over time comes from the pool changes that inventory imports
recorded (``racklife_node_changes``); a node without one was in its current
pool throughout.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime

import sqlalchemy as sa

from lifecycle.model.skus import SKUS
from lifecycle.model.states import State
from lifecycle.service.fleet import CAPACITY, Capacity
from lifecycle.store import Store, db

MOVING = frozenset({State.LENDING, State.RECLAIMING})


@dataclass(frozen=True)
class Ledger:
    since: datetime
    until: datetime
    by_capacity: dict[str, dict[str, float]]  # pool -> Capacity -> GPU-hours
    by_state: dict[str, dict[str, float]]  # pool -> state -> GPU-hours (non-zero only)

    def moving(self, pool: str) -> float:
        return sum(self.by_state.get(pool, {}).get(s.value, 0.0) for s in MOVING)

    def to_json(self) -> dict[str, object]:
        return {"since": self.since.isoformat(), "until": self.until.isoformat(), "unit": "GPU-hours",
                "pools": {p: {"capacity": {k: round(v, 3) for k, v in caps.items()},
                              "states": {k: round(v, 3) for k, v in self.by_state.get(p, {}).items()},
                              "moving": round(self.moving(p), 3)}
                          for p, caps in sorted(self.by_capacity.items())}}


def _aware(v: datetime) -> datetime:
    return v if v.tzinfo else v.replace(tzinfo=UTC)


def pool_at(changes: list[tuple[datetime, str, str]], current: str, at: datetime) -> str:
    """The node's pool at ``at``: the old side of the first pool change after it, else the current pool."""
    for when, old, _new in changes:
        if at < when:
            return old
    return current


def capacity_ledger(store: Store, since: datetime, until: datetime | None = None) -> Ledger:
    until = until or datetime.now(UTC)
    if until <= since:
        raise ValueError(f"the window is empty: since {since.isoformat()} is not before {until.isoformat()}")
    t, n, c = db.transitions, db.nodes, db.node_changes
    with store.reader.connect() as conn:
        nodes = {r.name: (r.sku, r.pool) for r in conn.execute(sa.select(n.c.name, n.c.sku, n.c.pool))}
        pools = sorted({r.name for r in conn.execute(sa.select(db.pools.c.name))} | {p for _s, p in nodes.values()})
        moves: dict[str, list[tuple[datetime, State]]] = defaultdict(list)
        for m in conn.execute(sa.select(t.c.node, t.c.target, t.c.at).where(t.c.at < until).order_by(t.c.id)):
            moves[m.node].append((_aware(m.at), State(m.target)))
        changes: dict[str, list[tuple[datetime, str, str]]] = defaultdict(list)
        for ch in conn.execute(sa.select(c.c.node, c.c.old, c.c.new, c.c.at).where(c.c.kind == "pool")
                               .order_by(c.c.id)):
            changes[ch.node].append((_aware(ch.at), ch.old or "", ch.new or ""))
    by_capacity = {p: {cap.value: 0.0 for cap in Capacity} for p in pools}
    by_state: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for name, history in moves.items():
        if name not in nodes:
            continue
        sku, current_pool = nodes[name]
        gpus = SKUS[sku].gpu_count if sku in SKUS else 0
        for i, (start, state) in enumerate(history):
            end = history[i + 1][0] if i + 1 < len(history) else until
            lo, hi = max(start, since), min(end, until)
            if hi <= lo:
                continue
            mine = changes.get(name, [])
            cuts = [lo, *sorted(w for w, _o, _n in mine if lo < w < hi), hi]  # a pool change splits the interval
            for a, b in itertools.pairwise(cuts):
                pool = pool_at(mine, current_pool, a)
                hours = gpus * (b - a).total_seconds() / 3600
                by_capacity.setdefault(pool, {cap.value: 0.0 for cap in Capacity})[CAPACITY[state].value] += hours
                by_state[pool][state.value] += hours
    return Ledger(since, until, by_capacity, {p: dict(s) for p, s in by_state.items()})

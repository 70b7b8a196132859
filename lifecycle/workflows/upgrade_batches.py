"""Which nodes of a rolling upgrade go next: batches that keep every pool within its limits.

Two limits hold per pool at every moment of a rollout: no more nodes out of
service than ``max_unavailable`` allows (counting those already out for any
reason), and never fewer in service than the pool's floor (``min_nodes``).
:func:`take_batch` picks the next batch from what is true now (the running
upgrade calls it before each batch, so a node quarantined in an earlier batch
shrinks the room of the next one); :func:`plan_batches` simulates the whole
rollout with every node coming back, for ``--dry-run`` and the benchmark. The
first batch is the canary: at most ``canary`` nodes.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from lifecycle.model.limits import Unavailable
from lifecycle.model.states import State
from lifecycle.store import Store, observations


@dataclass(frozen=True)
class PoolNow:
    """A pool as it is now: its size, how many serve, its floor."""

    name: str
    size: int
    in_service: int
    min_nodes: int = 0

    def room(self, limit: Unavailable) -> int:
        """How many more of its nodes may leave service now (0 when a limit is reached already)."""
        out = self.size - self.in_service
        return max(0, min(limit.of(self.size) - out, self.in_service - self.min_nodes))

    def why_no_room(self, limit: Unavailable) -> str:
        return (f"pool {self.name}: {self.in_service} of {self.size} in service, max unavailable "
                f"{limit.of(self.size)}, min_nodes {self.min_nodes}: no node may leave service now")


@dataclass(frozen=True)
class Member:
    node: str
    pool: str


def pool_now(store: Store, pool: str) -> PoolNow:
    """The pool as it is now. Serving: in service in the store and not shown out of the pool's scheduler
    by the node's last observation since it entered that state (an admin's drain takes capacity away as
    surely as the upgrade's own; ``observations.scheduler_out``, the count apply makes too)."""
    nodes = store.nodes(pool=pool)
    serving = [r for r in nodes if r.state is State.IN_SERVICE]
    return PoolNow(pool, len(nodes), len(serving) - len(observations.scheduler_out(store, serving)),
                   store.pool(pool).min_nodes)


class NoRoom(ValueError):
    """Nodes remain but their pools' limits let none of them leave service."""


@dataclass(frozen=True)
class Threshold:
    """When the rollout halts: more failed nodes than this, in the canary and after it."""

    canary: int = 0
    """Failures the canary may have (0: the first failed canary node halts)."""
    after_percent: float = 10.0
    """Percent of the nodes after the canary that may fail; one more halts."""

    def allowed_after(self, nodes_after_canary: int) -> int:
        return math.floor(nodes_after_canary * self.after_percent / 100.0)


def take_batch(pending: Sequence[Member], pools: Mapping[str, PoolNow], limit: Unavailable,
               cap: int | None = None) -> list[Member]:
    """The next batch: pending nodes in order, each while its pool has room (at most ``cap`` in all)."""
    used: Counter[str] = Counter()
    chosen: list[Member] = []
    for m in pending:
        if cap is not None and len(chosen) >= cap:
            break
        if used[m.pool] < pools[m.pool].room(limit):
            chosen.append(m)
            used[m.pool] += 1
    return chosen


def plan_batches(members: Sequence[Member], pools: Mapping[str, PoolNow], limit: Unavailable,
                 canary: int) -> list[list[Member]]:
    """Every batch of the rollout, canary first, if every node comes back in service after its batch.

    Raises :class:`NoRoom` (with the numbers) when a pool's limits let none of its nodes go.
    """
    pending = list(members)
    batches: list[list[Member]] = []
    while pending:
        batch = take_batch(pending, pools, limit, canary if not batches and canary > 0 else None)
        if not batch:
            stuck = sorted({m.pool for m in pending})
            raise NoRoom("; ".join(pools[p].why_no_room(limit) for p in stuck))
        batches.append(batch)
        taken = {m.node for m in batch}
        pending = [m for m in pending if m.node not in taken]
    return batches

"""What a run is waiting on for each node now, so a wait never looks like a hang.

`accept` printed one line and then nothing for as long as burn-in took; a
role swap said nothing while its leave waited for a job to end. The wait
loops (BMC power, phone-home, burn-in, the drain of a Slurm job, the eviction
of a pod) know what they wait on; this table is where they say it, and every
front end reads it from the shared store: the command that started the run,
``racklife workflows show RUN --watch`` in another shell, or a command whose
run ``racklife serve`` executes. A row lives as long as the wait.

The text passes the redaction filter on the way in, as every reason does.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import UTC, datetime

import sqlalchemy as sa

from lifecycle.model.redact import redact
from lifecycle.store import db
from lifecycle.store.store import Store

PHASE_MAX = 32
WHAT_MAX = 500


@dataclass(frozen=True)
class Wait:
    """One node of one run waiting: on what, in which phase, since when."""

    run_id: str
    node: str
    phase: str
    waiting_on: str
    since: datetime
    updated_at: datetime


def _aware(at: datetime) -> datetime:
    return at if at.tzinfo else at.replace(tzinfo=UTC)


# Built once: every long wait writes and clears its row (store.py says why).
_w = db.waits
_KEY = (_w.c.run_id == sa.bindparam("b_run")) & (_w.c.node == sa.bindparam("b_node"))
_WAIT = sa.select(_w.c.phase, _w.c.since).where(_KEY)
_CHANGE = _w.update().where(_KEY).values(phase=sa.bindparam("b_phase"), waiting_on=sa.bindparam("b_what"),
                                         since=sa.bindparam("b_since"), updated_at=sa.bindparam("b_at"))
_STALE = _w.delete().where((_w.c.node == sa.bindparam("b_node")) & (_w.c.run_id != sa.bindparam("b_run")))
_START = sa.insert(_w)
_CLEAR = _w.delete().where(_KEY)


def record(store: Store, run_id: str, node: str, phase: str, waiting_on: str,
           since: datetime | None = None) -> None:
    """Say that ``node`` of ``run_id`` now waits on ``waiting_on`` (replacing what it waited on before).

    ``since`` defaults to now for a new wait and is kept when only the text changes within the
    same phase (the drain of job 12, then of job 12 and 13: one wait, one start).
    """
    now = datetime.now(UTC)
    text, phase = redact(waiting_on)[:WHAT_MAX], phase[:PHASE_MAX]
    key = {"b_run": run_id, "b_node": node}
    with store.engine.begin() as conn:
        old = conn.execute(_WAIT, key).first()
        if old is not None:
            start = since or (_aware(old.since) if old.phase == phase else now)
            conn.execute(_CHANGE, {**key, "b_phase": phase, "b_what": text, "b_since": start, "b_at": now})
        else:
            # A node waits for one run at a time (its lease): a row of another run is left by a
            # process that was killed mid-wait, and is no longer true.
            conn.execute(_STALE, key)
            conn.execute(_START, {"run_id": run_id, "node": node, "phase": phase, "waiting_on": text,
                                  "since": since or now, "updated_at": now})


def clear(store: Store, run_id: str, node: str) -> None:
    """The wait of ``node`` in ``run_id`` is over."""
    with store.engine.begin() as conn:
        conn.execute(_CLEAR, {"b_run": run_id, "b_node": node})


def current(store: Store, nodes: Collection[str] | None = None,
            runs: Collection[str] | None = None) -> list[Wait]:
    """The waits of ``nodes`` (any run), or of ``runs`` and their child runs (ids ``RUN-…``), or all."""
    t = db.waits
    q = sa.select(t).order_by(t.c.node, t.c.updated_at)
    if nodes is not None:
        q = q.where(t.c.node.in_(list(nodes)))
    if runs is not None:
        q = q.where(sa.or_(t.c.run_id.in_(list(runs)), *(t.c.run_id.startswith(f"{r}-", autoescape=True)
                                                         for r in runs)))
    with store.reader.connect() as conn:
        found = [Wait(r.run_id, r.node, r.phase, r.waiting_on, _aware(r.since), _aware(r.updated_at))
                 for r in conn.execute(q)]
    return found if runs is None else [w for w in found if any(of_run(w.run_id, r) for r in runs)]


def of_run(run_id: str, run: str) -> bool:
    """Whether ``run_id`` is ``run`` or one of its child runs (DBOS names a child ``PARENT-N``, N its call)."""
    if run_id == run:
        return True
    rest = run_id.removeprefix(f"{run}-")
    return rest != run_id and all(part.isdigit() for part in rest.split("-"))


def nodes_of(store: Store, run_id: str) -> list[str]:
    """The nodes a run (or a child run of it) holds or waits on now: what ``workflows show --watch`` shows."""
    lease = db.leases
    mine = sa.or_(lease.c.run_id == run_id, lease.c.run_id.startswith(f"{run_id}-", autoescape=True))
    with store.reader.connect() as conn:
        held = {r.node for r in conn.execute(sa.select(lease.c.node, lease.c.run_id).where(mine))
                if of_run(r.run_id, run_id)}
    return sorted(held | {w.node for w in current(store, runs=[run_id])})

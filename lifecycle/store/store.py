"""Reads and writes of racklife's own tables.

Every write of a node's state goes through :meth:`Store.transition`, which
asks the state machine for the next state and records the move in the same
transaction (history is append-only). A transition replayed by a resumed
workflow with the same run id is recognised and not recorded twice. Every
reason passes the redaction filter on its way in: history is append-only, so
a secret written there could never be taken out.

A database error (locked, read-only, gone) leaves as one ``StoreUnavailable``
line; a row this code cannot read (a state it does not know) likewise.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa
from pydantic import ValidationError
from sqlalchemy.engine import Connection, Engine

from lifecycle.model import events
from lifecycle.model.inventory import BUILTIN_POOLS, Inventory, Node, Pool
from lifecycle.model.redact import redact, redact_data
from lifecycle.model.states import (
    Actor,
    IllegalTransition,
    State,
    Transition,
    next_state,
)
from lifecycle.store import connect, db, inventory_import, operators
from lifecycle.store.errors import NodeNotFound as NodeNotFound  # re-exported: imported from here too
from lifecycle.store.errors import StoreError as StoreError
from lifecycle.store.errors import known
from lifecycle.store.inventory_import import ImportReport


class ImportRefused(StoreError):
    """An inventory import that would lose or cross a server's identity; ``problems`` names each node."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("refusing the import (nothing was written):\n  " + "\n  ".join(problems))


@dataclass(frozen=True)
class NodeRecord:
    name: str
    serial: str
    rack: str
    u: int
    sku: str
    pool: str
    state: State
    state_since: datetime
    spec: dict[str, Any]

    def node(self) -> Node:
        """The stored inventory record; one stored before a stricter rule was added is refused clearly."""
        try:
            return Node.model_validate(self.spec)
        except ValidationError as exc:
            fields = ", ".join(sorted({".".join(str(p) for p in e["loc"]) for e in exc.errors()}))
            raise StoreError(f"the stored record of {self.name} no longer passes the inventory's rules ({fields}): "
                             "import a corrected inventory") from None


@dataclass(frozen=True)
class NodeChange:
    """A recorded change of a node's record that is not a state move."""

    node: str
    serial: str
    kind: str
    old: str | None
    new: str | None
    actor: Actor
    reason: str
    at: datetime
    operator: str | None = None


@dataclass(frozen=True)
class AcceptanceRecord:
    id: str
    node: str
    passed: bool
    level: str
    profile: str
    created_at: datetime
    expires_at: datetime
    accepted_by: str
    run_id: str | None
    summary: dict[str, Any]
    evidence_dir: str | None
    evidence_sha256: str | None

    def valid_at(self, when: datetime) -> bool:
        return self.passed and when < self.expires_at


def _aware(value: datetime) -> datetime:
    # SQLite hands back naive datetimes; everything we store is UTC.
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def _announce(fresh: Sequence[tuple[Transition, float | None]]) -> None:
    """One event per committed move (never for a replay: it was announced when it was made)."""
    for t, in_source_s in fresh:
        events.emit(events.Event(
            "transition", t.node, t.run_id, t.event, t.target.value, in_source_s,
            {"source": t.source.value if t.source else None, "target": t.target.value, "actor": t.actor.value,
             "reason": t.reason}))


def _now() -> datetime:
    return datetime.now(UTC)


# The statements of the hot paths (a node's read, every state move), built once: SQLAlchemy builds
# and keys a statement written inline on every call, about four times the cost of running a built
# one (``bench/provision.py`` makes several per node). Values come in as bound parameters.
_NODE = sa.select(db.nodes).where(db.nodes.c.name == sa.bindparam("b_name"))
_STATE = sa.select(db.nodes.c.state, db.nodes.c.state_since).where(db.nodes.c.name == sa.bindparam("b_name"))
_LAST_MOVE = (sa.select(db.transitions).where(db.transitions.c.node == sa.bindparam("b_name"))
              .order_by(db.transitions.c.id.desc()).limit(1))
_MOVE = (sa.update(db.nodes)
         .where(db.nodes.c.name == sa.bindparam("b_name"), db.nodes.c.state == sa.bindparam("b_from"))
         .values(state=sa.bindparam("b_to"), state_since=sa.bindparam("b_at"),
                 generation=db.nodes.c.generation + 1))
_RECORD_MOVE = sa.insert(db.transitions)


_known = known


class Store:
    def __init__(self, url: str | None = None, engine: Engine | None = None) -> None:
        self.url = url or db.default_url()
        self.engine = engine or connect.open_engine(self.url)
        # Writes take SQLite's write lock first (BEGIN IMMEDIATE); reads need no lock in WAL mode.
        self._reader = self.engine.execution_options(**connect.READ)

    @property
    def reader(self) -> Engine:
        """The engine for reads only: on SQLite its transactions begin DEFERRED, so a read waits for no
        writer and holds up none (``engine``'s begin IMMEDIATE, taking the write lock first)."""
        return self._reader

    def close(self) -> None:
        self.engine.dispose()

    @contextmanager
    def _tx(self) -> Iterator[Connection]:
        with self._unavailable(), self.engine.begin() as conn:
            yield conn

    @contextmanager
    def _read(self) -> Iterator[Connection]:
        with self._unavailable(), self._reader.connect() as conn:
            yield conn

    @contextmanager
    def _unavailable(self) -> Iterator[None]:
        try:
            yield
        except (sa.exc.OperationalError, sa.exc.InterfaceError) as exc:
            raise connect.unavailable(exc, self.url) from None
        except sa.exc.DatabaseError as exc:
            if isinstance(exc, sa.exc.IntegrityError):
                raise
            raise connect.unavailable(exc, self.url) from None

    # ------------------------------------------------------------ inventory

    def import_inventory(self, inv: Inventory, actor: Actor = Actor.OPERATOR,
                         reason: str = "inventory import") -> ImportReport:
        """Load the file's nodes (new ones ``enrolled``), keyed by serial; idempotent; all-or-nothing.

        Renames, removals and changes are worked out by :mod:`lifecycle.store.inventory_import`;
        a node a scheduler is using (joining, in service, draining, lent) may not change, and
        an import that would cross two servers' identities is refused whole.
        """
        with self._tx() as conn:
            worked_out = inventory_import.plan(conn, inv)
            if worked_out.problems:
                raise ImportRefused(worked_out.problems)
            report = inventory_import.apply(conn, inv, worked_out, actor, redact(reason), _now())
        for name in report.added:  # a new node's first transition (none -> enrolled), after the commit
            events.emit(events.Event("transition", name, None, "enroll", State.ENROLLED.value, None,
                                     {"source": None, "target": State.ENROLLED.value, "actor": actor.value,
                                      "reason": redact(reason)}))
        return report

    def changes(self, name: str) -> list[NodeChange]:
        """The record changes of a node (renames, pool, BMC, other fields), oldest first, following its serial."""
        serial = self.get(name).serial
        q = (sa.select(db.node_changes).where(db.node_changes.c.serial == serial)
             .order_by(db.node_changes.c.id))
        with self._read() as conn:
            return [NodeChange(r.node, r.serial, r.kind, r.old, r.new, Actor(r.actor), r.reason, _aware(r.at),
                               r.operator) for r in conn.execute(q)]

    # ------------------------------------------------------------ reads

    @staticmethod
    def _record(row: Any) -> NodeRecord:
        return NodeRecord(row.name, row.serial, row.rack, row.u, row.sku, row.pool,
                          _known(State, row.state, row.name), _aware(row.state_since), json.loads(row.spec))

    def get(self, name: str) -> NodeRecord:
        with self._read() as conn:
            row = conn.execute(_NODE, {"b_name": name}).first()
        if row is None:
            raise NodeNotFound(name)
        return self._record(row)

    def nodes(self, state: State | None = None, pool: str | None = None,
             rack: str | None = None) -> list[NodeRecord]:
        q = sa.select(db.nodes).order_by(db.nodes.c.rack, db.nodes.c.u, db.nodes.c.name)
        if state is not None:
            q = q.where(db.nodes.c.state == state.value)
        if pool is not None:
            q = q.where(db.nodes.c.pool == pool)
        if rack is not None:
            q = q.where(db.nodes.c.rack == rack)
        with self._read() as conn:
            return [self._record(r) for r in conn.execute(q)]

    def pool(self, name: str) -> Pool:
        """The pool definition from the last import; built-in pools have no scheduler."""
        with self._read() as conn:
            row = conn.execute(sa.select(db.pools.c.spec).where(db.pools.c.name == name)).first()
        if row is None:
            if name in BUILTIN_POOLS:
                return Pool(scheduler="none")
            raise StoreError(f"unknown pool '{name}' (import an inventory that defines it)")
        return Pool.model_validate(json.loads(row.spec))

    def history(self, name: str) -> list[Transition]:
        self.get(name)
        q = (sa.select(db.transitions).where(db.transitions.c.node == name)
             .order_by(db.transitions.c.id))
        with self._read() as conn:
            return [
                Transition(r.node, _known(State, r.source, name) if r.source else None,
                           _known(State, r.target, name), r.event, _known(Actor, r.actor, name),
                           r.reason, r.run_id, _aware(r.at), r.operator)
                for r in conn.execute(q)
            ]

    def last_moved_by(self, run_id: str) -> list[NodeRecord]:
        """The nodes whose latest transition was made by ``run_id``."""
        t = db.transitions
        latest = sa.select(t.c.node, sa.func.max(t.c.id).label("id")).group_by(t.c.node).subquery()
        q = (sa.select(db.nodes).join(latest, latest.c.node == db.nodes.c.name)
             .join(t, t.c.id == latest.c.id).where(t.c.run_id == run_id).order_by(db.nodes.c.name))
        with self._read() as conn:
            return [self._record(r) for r in conn.execute(q)]

    # ------------------------------------------------------------ state

    def transition(self, name: str, event: str, actor: Actor, reason: str,
                   run_id: str | None = None, acceptance_record: str | None = None) -> Transition:
        """Apply ``event`` to the node, atomically; return the recorded transition.

        Replaying the same (event, run_id) that produced the current state
        returns the recorded transition instead of failing: a workflow step
        cut off after its commit runs again after a crash.
        """
        fresh: list[tuple[Transition, float | None]] = []
        with self._tx() as conn:
            done = self._apply(conn, name, event, actor, reason, run_id, acceptance_record, fresh)
        _announce(fresh)
        return done

    def transitions(self, name: str, moves: Sequence[tuple[str, str]], actor: Actor,
                    run_id: str | None = None) -> Transition:
        """Apply several (event, reason) moves in order in one transaction; return the last.

        All or nothing, each move recorded in history as if applied alone. One
        commit instead of one per move: on SQLite every commit is a disk sync.
        Replay-safe as a whole: when the run's last recorded move is the last
        of ``moves`` (a step cut off after the commit), nothing is applied again.
        """
        if not moves:
            raise StoreError("transitions needs at least one move")
        with self._tx() as conn:
            row = conn.execute(_STATE, {"b_name": name}).first()
            if row is None:
                raise NodeNotFound(name)
            current = _known(State, row.state, name)
            if run_id is not None:
                replayed = self._replayed(conn, name, current, moves[-1][0], run_id)
                if replayed is not None:
                    return replayed
            # The moves after the first start where the previous one left the node, in this
            # transaction: the node's row and the run's operator are read once, not per move.
            fresh: list[tuple[Transition, float | None]] = []
            at: tuple[State, datetime | None] = (current, row.state_since)
            who = operators.of_run(conn, run_id)
            for event, reason in moves:
                done = self._move(conn, name, event, actor, reason, run_id, None, at, who, fresh)
                at = (done.target, done.at)
        _announce(fresh)
        return done

    @staticmethod
    def _replayed(conn: Connection, name: str, current: State, event: str, run_id: str) -> Transition | None:
        """The recorded transition if ``event`` by ``run_id`` is what put the node where it is."""
        last = conn.execute(_LAST_MOVE, {"b_name": name}).first()
        if (last is not None and last.run_id == run_id and last.event == event
                and last.target == current.value):
            source = State(last.source) if last.source else None
            return Transition(name, source, current, event, Actor(last.actor), last.reason, run_id,
                              _aware(last.at), last.operator)
        return None

    def _apply(self, conn: Connection, name: str, event: str, actor: Actor, reason: str,
               run_id: str | None, acceptance_record: str | None,
               fresh: list[tuple[Transition, float | None]] | None = None) -> Transition:
        """Apply one move; a move actually made (not a replay) is appended to ``fresh`` with the
        seconds the node spent in its source state, for the event emitted after the commit."""
        row = conn.execute(_STATE, {"b_name": name}).first()
        if row is None:
            raise NodeNotFound(name)
        current = _known(State, row.state, name)
        if run_id is not None:
            replayed = self._replayed(conn, name, current, event, run_id)
            if replayed is not None:
                return replayed
        return self._move(conn, name, event, actor, reason, run_id, acceptance_record,
                          (current, row.state_since), operators.of_run(conn, run_id), fresh)

    def _move(self, conn: Connection, name: str, event: str, actor: Actor, reason: str,
              run_id: str | None, acceptance_record: str | None, at: tuple[State, datetime | None],
              who: str, fresh: list[tuple[Transition, float | None]] | None) -> Transition:
        """Make one move from ``at`` (the node's state and since when, as this transaction saw
        them; the UPDATE checks the state still holds), recorded as by ``who``."""
        if not reason.strip():
            raise StoreError("a transition needs a reason")
        reason = redact(reason)
        current, state_since = at
        if acceptance_record is not None:
            self._check_acceptance(conn, name, acceptance_record, current, event)
        target = next_state(name, current, event, actor, acceptance_record)
        now = _now()
        updated = conn.execute(_MOVE, {"b_name": name, "b_from": current.value, "b_to": target.value, "b_at": now})
        if updated.rowcount != 1:
            raise StoreError(f"node {name} changed state concurrently; retry")
        conn.execute(_RECORD_MOVE, {"node": name, "source": current.value, "target": target.value, "event": event,
                                    "actor": actor.value, "reason": reason, "run_id": run_id, "at": now,
                                    "operator": who})
        done = Transition(name, current, target, event, actor, reason, run_id, now, who)
        if fresh is not None:
            since = _aware(state_since) if state_since is not None else None
            fresh.append((done, (now - since).total_seconds() if since else None))
        return done

    def set_pool(self, name: str, pool: str, actor: Actor = Actor.WORKFLOW, reason: str = "",
                 run_id: str | None = None) -> bool:
        """Record the pool a node serves (role swap), with a ``pool`` change row; the state is untouched.

        The same pool again changes nothing and records nothing (False): a step replayed after a
        crash moves the node once.
        """
        with self._tx() as conn:
            row = conn.execute(sa.select(db.nodes.c.pool, db.nodes.c.serial).where(db.nodes.c.name == name)).first()
            if row is None:
                raise NodeNotFound(name)
            if row.pool == pool:
                return False
            conn.execute(sa.update(db.nodes).where(db.nodes.c.name == name).values(pool=pool))
            conn.execute(sa.insert(db.node_changes).values(
                node=name, serial=row.serial, kind="pool", old=row.pool, new=pool, actor=actor.value,
                reason=redact(reason)[:500], at=_now(), operator=operators.of_run(conn, run_id)))
            return True

    def record_change(self, name: str, kind: str, old: str | None, new: str | None, actor: Actor,
                      reason: str, run_id: str | None = None) -> None:
        """A row of the node's record history that is not a state move (``role-swap``: its phase times)."""
        with self._tx() as conn:
            row = conn.execute(sa.select(db.nodes.c.serial).where(db.nodes.c.name == name)).first()
            if row is None:
                raise NodeNotFound(name)
            conn.execute(sa.insert(db.node_changes).values(
                node=name, serial=row.serial, kind=kind[:16], old=old, new=new, actor=actor.value,
                reason=redact(reason)[:500], at=_now(), operator=operators.of_run(conn, run_id)))

    def record_operator(self, run_id: str, operator: str) -> None:
        """``operator`` started ``run_id``: every row the run writes carries the name (``operators``)."""
        with self._tx() as conn:
            operators.record(conn, run_id, operator)

    def run_operator(self, run_id: str) -> str | None:
        """Who started ``run_id``, as recorded (None: not recorded)."""
        with self._read() as conn:
            row = conn.execute(sa.select(db.run_operators.c.operator)
                               .where(db.run_operators.c.run_id == run_id)).first()
        return None if row is None else str(row.operator)

    # ------------------------------------------------------------ acceptance

    def add_acceptance_record(self, rec: AcceptanceRecord,
                              files: Sequence[tuple[str, str, int]] = ()) -> None:
        with self._tx() as conn:
            if conn.execute(sa.select(db.nodes.c.name).where(db.nodes.c.name == rec.node)).first() is None:
                raise NodeNotFound(rec.node)
            conn.execute(sa.insert(db.acceptance_records).values(
                id=rec.id, node=rec.node, passed=rec.passed, level=rec.level,
                profile=rec.profile, created_at=rec.created_at, expires_at=rec.expires_at,
                accepted_by=rec.accepted_by, run_id=rec.run_id,
                summary=json.dumps(redact_data(rec.summary), sort_keys=True),
                evidence_dir=rec.evidence_dir, evidence_sha256=rec.evidence_sha256))
            for path, sha, size in files:
                conn.execute(sa.insert(db.evidence).values(
                    record_id=rec.id, path=path, sha256=sha, size=size))

    def acceptance_records(self, node: str) -> list[AcceptanceRecord]:
        q = (sa.select(db.acceptance_records).where(db.acceptance_records.c.node == node)
             .order_by(db.acceptance_records.c.created_at.desc()))
        with self._read() as conn:
            return [self._acc(r) for r in conn.execute(q)]

    def evidence_digests(self, evidence_dir: str) -> list[str]:
        """The manifest digests recorded with the acceptance records whose bundle is ``evidence_dir``."""
        q = (sa.select(db.acceptance_records.c.evidence_sha256).distinct()
             .where(db.acceptance_records.c.evidence_dir == evidence_dir)
             .where(db.acceptance_records.c.evidence_sha256.is_not(None)))
        with self._read() as conn:
            return sorted(str(r[0]) for r in conn.execute(q))

    def valid_acceptance(self, node: str, at: datetime | None = None) -> AcceptanceRecord | None:
        """The newest passing, unexpired record, or None (fail closed)."""
        when = at or _now()
        for rec in self.acceptance_records(node):
            return rec if rec.valid_at(when) else None
        return None

    @staticmethod
    def _acc(r: Any) -> AcceptanceRecord:
        return AcceptanceRecord(r.id, r.node, bool(r.passed), r.level, r.profile,
                                _aware(r.created_at), _aware(r.expires_at), r.accepted_by,
                                r.run_id, json.loads(r.summary), r.evidence_dir,
                                r.evidence_sha256)

    def _check_acceptance(self, conn: Connection, node: str, record_id: str,
                          current: State, event: str) -> None:
        r = conn.execute(sa.select(db.acceptance_records)
                         .where(db.acceptance_records.c.id == record_id)).first()
        if r is None or r.node != node:
            raise IllegalTransition(node, current, event,
                                    f"acceptance record '{record_id}' not found for this node")
        rec = self._acc(r)
        if not rec.valid_at(_now()):
            why = "did not pass" if not rec.passed else f"expired at {rec.expires_at:%Y-%m-%d %H:%M}Z"
            raise IllegalTransition(node, current, event,
                                    f"acceptance record {record_id} {why} (fail closed)")
        # Evidence from before the node's last (re)provisioning proves nothing about it now.
        last_build = conn.execute(
            sa.select(sa.func.max(db.transitions.c.at)).where(
                db.transitions.c.node == node,
                db.transitions.c.target == State.PROVISIONED.value)).scalar()
        if last_build is not None and rec.created_at < _aware(last_build):
            raise IllegalTransition(node, current, event,
                                    f"acceptance record {record_id} predates the node's last "
                                    "provisioning (fail closed)")


_shared: dict[str, Store] = {}
_shared_lock = threading.Lock()


def shared_store(url: str | None = None) -> Store:
    """One Store (one engine and connection pool) per database for this process.

    Workflow steps run many times per node; opening an engine (and checking the
    schema) in every step was work repeated on the provisioning hot path.
    """
    key = url or db.default_url()
    with _shared_lock:
        if key not in _shared:
            _shared[key] = Store(key)
        return _shared[key]


def validity(days: int) -> timedelta:
    return timedelta(days=days)

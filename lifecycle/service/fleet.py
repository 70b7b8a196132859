"""One consistent read of the fleet from the store, for metrics and status views.

Metrics are computed when they are scraped, from the store and DBOS's own
tables, rather than kept in process-global gauges that each workflow step
would have to update: the store is the one record of what happened, so a
scrape of a controller restarted a second ago tells the same truth as one of
a controller that has run for a month, and two processes serving metrics
from one store cannot disagree.

What is read here is typed rows, not metric families, so that a status view
and the metrics show the same numbers from the same code.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum

import sqlalchemy as sa
from pydantic import ValidationError

from lifecycle.model.inventory import Pool
from lifecycle.model.skus import SKUS
from lifecycle.model.states import State
from lifecycle.planner.observed import Desired, Drift, Observation, drift
from lifecycle.service.cycles import CycleRow, read_cycles
from lifecycle.store import NodeRecord, Store, bmc_calls, db, health, repair_breaker
from lifecycle.store import observations as stored_observations


class Capacity(StrEnum):
    """What a node's GPUs are doing for its pool, as capacity planners count them."""

    IN_SERVICE = "in_service"
    LENT = "lent"  # a Slurm pool's node on loan to Kubernetes, or moving between them
    DRAINING = "draining"
    QUARANTINED = "quarantined"
    FAILED = "failed"  # a verb's failed state: waits for an operator or a retry
    MAINTENANCE = "maintenance"  # repair, upgrade, reprovisioning
    BRINGUP = "bringup"  # enrolled up to joining: not yet serving
    RETIRED = "retired"


C = Capacity
# Every state, once: a state added to the machine without a row here fails a test.
CAPACITY: dict[State, Capacity] = {
    State.ENROLLED: C.BRINGUP, State.INSPECTING: C.BRINGUP, State.AVAILABLE: C.BRINGUP,
    State.PROVISIONING: C.BRINGUP, State.PROVISIONED: C.BRINGUP, State.BURNING_IN: C.BRINGUP,
    State.ACCEPTED: C.BRINGUP, State.JOINING: C.BRINGUP,
    State.INSPECT_FAILED: C.FAILED, State.PROVISION_FAILED: C.FAILED, State.JOIN_FAILED: C.FAILED,
    State.UPGRADE_FAILED: C.FAILED, State.DECOMMISSION_FAILED: C.FAILED,
    State.QUARANTINED: C.QUARANTINED,
    State.IN_SERVICE: C.IN_SERVICE,
    State.DRAINING: C.DRAINING, State.DRAINED: C.DRAINING,
    State.LENDING: C.LENT, State.LENT: C.LENT, State.RECLAIMING: C.LENT,
    State.REPROVISIONING: C.MAINTENANCE, State.UPGRADING: C.MAINTENANCE, State.REPAIRING: C.MAINTENANCE,
    State.DECOMMISSIONING: C.RETIRED, State.DECOMMISSIONED: C.RETIRED,
}

# The "-ing" states (burning_in among them): a node should pass through them, not stay (the
# stuck-node alert, docs/prometheus/alerts.yaml; a test holds its list to this one).
TRANSITIONAL: frozenset[State] = frozenset({
    State.INSPECTING, State.PROVISIONING, State.BURNING_IN, State.JOINING, State.DRAINING, State.LENDING,
    State.RECLAIMING, State.REPROVISIONING, State.UPGRADING, State.REPAIRING, State.DECOMMISSIONING})

# Out of service: serving no scheduler, neither its own pool's nor (lent) the other's.
SERVING: frozenset[State] = frozenset({State.IN_SERVICE, State.LENT})

# DBOS's statuses of a run that has ended.
ENDED = frozenset({"SUCCESS", "ERROR", "CANCELLED", "MAX_RECOVERY_ATTEMPTS_EXCEEDED", "RETRIES_EXCEEDED"})


@dataclass(frozen=True)
class NodeRow:
    name: str
    pool: str
    sku: str
    gpus: int
    state: State
    state_since: datetime
    last_event: str | None  # the event of the node's last transition ("enroll" for a new node)
    last_run: str | None


@dataclass(frozen=True)
class RunRow:
    id: str
    workflow: str
    status: str
    created_at: datetime
    updated_at: datetime

    @property
    def ended(self) -> bool:
        return self.status in ENDED

    @property
    def duration_s(self) -> float:
        return max(0.0, (self.updated_at - self.created_at).total_seconds())


@dataclass(frozen=True)
class AcceptanceRow:
    node: str
    sku: str
    passed: bool
    created_at: datetime
    checks: tuple[tuple[str, str], ...]  # (check, verdict) of each finding


@dataclass(frozen=True)
class Fleet:
    at: datetime
    pools: tuple[str, ...]
    nodes: tuple[NodeRow, ...]
    runs: tuple[RunRow, ...]
    acceptance: tuple[AcceptanceRow, ...]
    observations: dict[str, Observation]
    unreadable: tuple[str, ...]  # nodes whose stored observation this version cannot read
    drift: tuple[Drift, ...]
    floors: dict[str, int] = field(default_factory=dict)  # pool -> min_nodes (0: no floor)
    cycles: tuple[CycleRow, ...] = ()  # role swaps and upgrades with their phase times
    breakers: tuple[repair_breaker.BreakerCount, ...] = ()  # each pool's repair circuit breaker
    bmc_errors: tuple[bmc_calls.CallErrorCount, ...] = ()  # failed BMC calls by driver, vendor and class
    partitions: dict[str, str] = field(default_factory=dict)  # Slurm pool -> its partition
    health: dict[tuple[str, str], int] = field(default_factory=dict)  # (pool, outcome) -> Xid events recorded

    def pool_of(self, node: str) -> str:
        return next((n.pool for n in self.nodes if n.name == node), "")


def _aware(value: datetime) -> datetime:
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def _ms(value: int | None) -> datetime:
    return datetime.fromtimestamp((value or 0) / 1000, UTC)


def _nodes(store: Store) -> tuple[list[NodeRecord], tuple[NodeRow, ...]]:
    records = store.nodes()
    t = db.transitions
    latest = sa.select(t.c.node, sa.func.max(t.c.id).label("id")).group_by(t.c.node).subquery()
    q = sa.select(t.c.node, t.c.event, t.c.run_id).join(latest, t.c.id == latest.c.id)
    with store.reader.connect() as conn:
        last = {r.node: (r.event, r.run_id) for r in conn.execute(q)}
    rows = tuple(
        NodeRow(r.name, r.pool, r.sku, SKUS[r.sku].gpu_count if r.sku in SKUS else 0, r.state,
                _aware(r.state_since), *last.get(r.name, (None, None)))
        for r in records)
    return records, rows


def _runs(store: Store) -> tuple[RunRow, ...]:
    """Every run in DBOS's status table (none when no workflow has run on this database)."""
    schema = None if db.is_sqlite(store.url) else "dbos"
    if not sa.inspect(store.engine).has_table("workflow_status", schema=schema):
        return ()
    ws = sa.table("workflow_status", sa.column("workflow_uuid"), sa.column("name"), sa.column("status"),
                  sa.column("created_at"), sa.column("updated_at"), schema=schema)
    q = sa.select(ws.c.workflow_uuid, ws.c.name, ws.c.status, ws.c.created_at, ws.c.updated_at)
    with store.reader.connect() as conn:
        return tuple(RunRow(r.workflow_uuid, r.name or "unknown", r.status or "UNKNOWN",
                            _ms(r.created_at), _ms(r.updated_at)) for r in conn.execute(q))


def _acceptance(store: Store, skus: dict[str, str]) -> tuple[AcceptanceRow, ...]:
    a = db.acceptance_records
    q = sa.select(a.c.node, a.c.passed, a.c.created_at, a.c.summary).order_by(a.c.created_at)
    out = []
    with store.reader.connect() as conn:
        for r in conn.execute(q):
            try:
                summary = json.loads(r.summary)
                findings = summary.get("findings", []) if isinstance(summary, dict) else []
                checks = tuple((str(f["check"]), str(f["verdict"])) for f in findings if isinstance(f, dict))
            except (ValueError, KeyError, TypeError):
                checks = (("summary", "unreadable"),)  # counted, never read as a pass
            out.append(AcceptanceRow(r.node, skus.get(r.node, "unknown"), bool(r.passed), _aware(r.created_at),
                                     checks))
    return tuple(out)


def read_fleet(store: Store, now: datetime | None = None) -> Fleet:
    """The fleet as the store holds it now: nodes, pools, runs, acceptance, observations and drift."""
    now = now or datetime.now(UTC)
    records, nodes = _nodes(store)
    with store.reader.connect() as conn:
        specs = {r.name: r.spec for r in conn.execute(sa.select(db.pools.c.name, db.pools.c.spec))}
    pools = tuple(sorted(set(specs) | {n.pool for n in nodes}))
    parsed = {p: Pool.model_validate(json.loads(spec)) for p, spec in specs.items() if spec}
    floors = {p: pool.min_nodes for p, pool in parsed.items()}
    partitions = {p: pool.partition for p, pool in parsed.items() if pool.scheduler == "slurm" and pool.partition}
    observed: dict[str, Observation] = {}
    unreadable: list[str] = []
    for name, (_at, doc) in stored_observations.load(store).items():
        try:
            observed[name] = Observation.from_json(doc)
        except ValidationError:
            unreadable.append(name)
    found: list[Drift] = []
    pool_specs: dict[str, Pool] = {}
    for rec in records:
        if rec.name in observed:
            # What planner.observe.desired wants without an inventory file: the stored spec and pool.
            spec = rec.node()
            pool = pool_specs.setdefault(rec.pool, store.pool(rec.pool))
            found += drift(observed[rec.name], Desired(spec, pool, spec.image, None))
    return Fleet(now, pools, nodes, _runs(store), _acceptance(store, {n.name: n.sku for n in nodes}),
                 observed, tuple(sorted(unreadable)), tuple(found), floors, read_cycles(store),
                 repair_breaker.counts(store), bmc_calls.counts(store), partitions, dict(health.counts(store)))


def by_pool(nodes: Sequence[NodeRow]) -> dict[str, list[NodeRow]]:
    out: dict[str, list[NodeRow]] = {}
    for n in nodes:
        out.setdefault(n.pool, []).append(n)
    return out

"""racklife's Prometheus metrics: computed from the store each time they are scraped.

A custom collector (:class:`FleetCollector`) reads the fleet once per scrape
(:func:`lifecycle.service.fleet.read_fleet`) and turns it into metric
families; nothing is kept in process-global gauges, so there is nothing a
workflow can forget to update and nothing a restart resets. A store that
cannot be read fails the scrape (HTTP 500, Prometheus's ``up`` goes to 0)
rather than serving zeros that look like an empty fleet.

Every metric name is listed in :data:`METRICS`: the dashboard's and the
alert rules' queries are checked against it by the tests.

Front ends: ``racklife metrics serve`` (:func:`serve`), ``racklife metrics
textfile`` (:func:`write_textfile`, for node exporter's textfile collector),
and ``racklife serve`` mounts the same app with one call (:func:`serve`, or
:func:`wsgi_app` inside a server of its own).
"""

from __future__ import annotations

import os
import tempfile
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, generate_latest, make_wsgi_app
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.exposition import ThreadingWSGIServer, _SilentHandler
from prometheus_client.registry import Collector

from lifecycle.model.states import State
from lifecycle.service import queue as slurm_queue
from lifecycle.service.fleet import CAPACITY, SERVING, Capacity, Fleet, by_pool, read_fleet
from lifecycle.store import Store, health

# Run durations span a power cycle (minutes) to a rack's acceptance (hours).
DURATION_BUCKETS: tuple[float, ...] = (1, 5, 15, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200, 14400, 28800,
                                       86400)

# name (as exposed, without a counter's _total) -> help text.
METRICS: dict[str, str] = {
    "racklife_nodes": "Nodes by pool and lifecycle state (every state of every pool, zeros included).",
    "racklife_node_state_seconds": "Seconds each node has been in its current state.",
    "racklife_nodes_out_of_service": "Nodes serving no scheduler, by pool, state and the event that put them there.",
    "racklife_pool_min_nodes": "The pool's floor (min_nodes in the inventory): the fewest nodes it keeps in "
                               "service (0: none).",
    "racklife_pool_gpus": "GPUs per pool by what they are doing (in_service, lent, draining, quarantined, ...).",
    "racklife_slurm_drains": "Nodes drained or down in Slurm at the last refresh, by pool and drain owner.",
    "racklife_kube_cordons": "Nodes cordoned in Kubernetes at the last refresh, by pool and cordon owner.",
    "racklife_nodes_unobserved": "Nodes with no readable observation (never refreshed, or unreadable).",
    "racklife_observation_age_seconds": "Seconds since each node was last observed by racklife refresh.",
    "racklife_drift": "Nodes whose last observation differs from the inventory, by pool, source and kind.",
    "racklife_workflow_runs": "Workflow runs in DBOS's status table, by workflow and status.",
    "racklife_workflow_duration_seconds": "Duration of ended workflow runs (created to last update), by workflow "
                                          "and status.",
    "racklife_node_cycles": "Role swaps and upgrades the node history records, by workflow and outcome (done, "
                            "failed, unreadable).",
    "racklife_node_cycle_phase_seconds": "Seconds each phase of a role swap or upgrade took (drain_wait, each "
                                         "change, retest, join, rollback), by workflow, phase and outcome.",
    "racklife_acceptance_records": "Acceptance records by SKU and outcome (pass or fail).",
    "racklife_acceptance_checks": "Judged acceptance findings by SKU, check and verdict.",
    "racklife_acceptance_last_pass_age_seconds": "Seconds since each node's newest passing acceptance record.",
    "racklife_bmc_call_errors": "Failed BMC calls by driver (redfish, ipmi), vendor (as the BMC named itself; "
                                "unknown if it never did) and class (timeout, connection, tls, auth, http_4xx, "
                                "http_5xx, throttled, protocol, ipmi_completion).",
    "racklife_health_events": "Xid events racklife serve read from nodes' kernel logs, by pool and what became of "
                              "them (pending, started, breaker_open, refused, none, covered, repaired, failed, "
                              "quarantined).",
    "racklife_repair_breaker_open": "1 while the pool's repair circuit breaker is open: as many nodes under repair "
                                    "as max_repair_percent allows, so new automatic repairs are refused.",
    "racklife_repair_breaker_repairs": "Nodes of the pool the repair circuit breaker counts: repairing, or leased "
                                       "to a repair run.",
    "racklife_repair_breaker_limit": "Repairs the pool's breaker allows at once (max_repair_percent of its nodes, "
                                     "at least one).",
}


def _g(name: str, labels: list[str]) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, METRICS[name], labels=labels)


def _c(name: str, labels: list[str]) -> CounterMetricFamily:
    return CounterMetricFamily(name, METRICS[name], labels=labels)


def _nodes(f: Fleet) -> Iterator[Metric]:
    pools = by_pool(f.nodes)
    nodes = _g("racklife_nodes", ["pool", "state"])
    gpus = _g("racklife_pool_gpus", ["pool", "status"])
    for pool in f.pools:
        members = pools.get(pool, [])
        per_state = Counter(n.state for n in members)
        for state in State:
            nodes.add_metric([pool, state.value], per_state[state])
        per_capacity = Counter[Capacity]()
        for n in members:
            per_capacity[CAPACITY[n.state]] += n.gpus
        for cap in Capacity:
            gpus.add_metric([pool, cap.value], per_capacity[cap])
    yield nodes
    yield gpus
    floors = _g("racklife_pool_min_nodes", ["pool"])
    for pool in f.pools:
        floors.add_metric([pool], f.floors.get(pool, 0))
    yield floors
    since = _g("racklife_node_state_seconds", ["node", "pool", "state"])
    for n in f.nodes:
        since.add_metric([n.name, n.pool, n.state.value], max(0.0, (f.at - n.state_since).total_seconds()))
    yield since
    out = _g("racklife_nodes_out_of_service", ["pool", "state", "reason"])
    for (pool, state_name, reason), count in sorted(Counter(
            (n.pool, n.state.value, n.last_event or "unknown") for n in f.nodes if n.state not in SERVING).items()):
        out.add_metric([pool, state_name, reason], count)
    yield out


def _observed(f: Fleet) -> Iterator[Metric]:
    drains, cordons = Counter[tuple[str, str]](), Counter[tuple[str, str]]()
    age = _g("racklife_observation_age_seconds", ["node", "pool"])
    for name, o in sorted(f.observations.items()):
        pool = f.pool_of(name)
        age.add_metric([name, pool], max(0.0, (f.at - o.at).total_seconds()))
        if o.slurm is not None and (o.slurm.drained or o.slurm.down):
            drains[(pool, o.slurm.owner)] += 1
        if o.kube is not None and o.kube.cordoned:
            cordons[(pool, o.kube.cordon_owner)] += 1
    for name, counts in (("racklife_slurm_drains", drains), ("racklife_kube_cordons", cordons)):
        fam = _g(name, ["pool", "owner"])
        for pool in f.pools:
            for owner in ("racklife", "other"):
                fam.add_metric([pool, owner], counts[(pool, owner)])
        yield fam
    yield age
    unobserved = _g("racklife_nodes_unobserved", ["pool", "why"])
    missing = Counter((n.pool, "unreadable" if n.name in f.unreadable else "never")
                      for n in f.nodes if n.name not in f.observations)
    for pool in f.pools:
        for why in ("never", "unreadable"):
            unobserved.add_metric([pool, why], missing[(pool, why)])
    yield unobserved
    drift = _g("racklife_drift", ["pool", "source", "kind"])
    for (pool, source, kind), count in sorted(Counter(
            (f.pool_of(d.node), d.source.value, d.kind) for d in f.drift).items()):
        drift.add_metric([pool, source, kind], count)
    yield drift


def _runs(f: Fleet) -> Iterator[Metric]:
    runs = _g("racklife_workflow_runs", ["workflow", "status"])
    for (name, status), count in sorted(Counter((r.workflow, r.status) for r in f.runs).items()):
        runs.add_metric([name, status], count)
    yield runs
    hist = HistogramMetricFamily("racklife_workflow_duration_seconds",
                                 METRICS["racklife_workflow_duration_seconds"], labels=["workflow", "status"])
    groups: dict[tuple[str, str], list[float]] = {}
    for r in f.runs:
        if r.ended:
            groups.setdefault((r.workflow, r.status), []).append(r.duration_s)
    for (name, status), durations in sorted(groups.items()):
        buckets = [(str(float(b)), sum(1 for d in durations if d <= b)) for b in DURATION_BUCKETS]
        buckets.append(("+Inf", len(durations)))
        hist.add_metric([name, status], buckets, sum(durations))
    yield hist


def _acceptance(f: Fleet) -> Iterator[Metric]:
    records = _c("racklife_acceptance_records", ["sku", "outcome"])
    for (sku, outcome), count in sorted(Counter(
            (a.sku, "pass" if a.passed else "fail") for a in f.acceptance).items()):
        records.add_metric([sku, outcome], count)
    yield records
    checks = _c("racklife_acceptance_checks", ["sku", "check", "verdict"])
    for (sku, check, verdict), count in sorted(Counter(
            (a.sku, c, v) for a in f.acceptance for c, v in a.checks).items()):
        checks.add_metric([sku, check, verdict], count)
    yield checks
    newest: dict[str, datetime] = {}
    for a in f.acceptance:
        if a.passed and (a.node not in newest or a.created_at > newest[a.node]):
            newest[a.node] = a.created_at
    age = _g("racklife_acceptance_last_pass_age_seconds", ["node", "pool", "sku"])
    for n in f.nodes:
        if n.name in newest:
            age.add_metric([n.name, n.pool, n.sku], max(0.0, (f.at - newest[n.name]).total_seconds()))
    yield age


def _cycles(f: Fleet) -> Iterator[Metric]:
    count = _c("racklife_node_cycles", ["workflow", "outcome"])
    for (workflow, outcome), n in sorted(Counter((c.workflow, c.outcome) for c in f.cycles).items()):
        count.add_metric([workflow, outcome], n)
    yield count
    hist = HistogramMetricFamily("racklife_node_cycle_phase_seconds", METRICS["racklife_node_cycle_phase_seconds"],
                                 labels=["workflow", "phase", "outcome"])
    groups: dict[tuple[str, str, str], list[float]] = {}
    for c in f.cycles:
        for phase, seconds in c.phases.items():
            groups.setdefault((c.workflow, phase, c.outcome), []).append(seconds)
    for labels, durations in sorted(groups.items()):
        buckets = [(str(float(b)), sum(1 for d in durations if d <= b)) for b in DURATION_BUCKETS]
        buckets.append(("+Inf", len(durations)))
        hist.add_metric(list(labels), buckets, sum(durations))
    yield hist


def _breakers(f: Fleet) -> Iterator[Metric]:
    is_open = _g("racklife_repair_breaker_open", ["pool"])
    repairs = _g("racklife_repair_breaker_repairs", ["pool"])
    limit = _g("racklife_repair_breaker_limit", ["pool"])
    for b in f.breakers:
        is_open.add_metric([b.pool], 1 if b.open else 0)
        repairs.add_metric([b.pool], len(b.repairing))
        limit.add_metric([b.pool], b.limit)
    yield from (is_open, repairs, limit)


def _health(f: Fleet) -> Iterator[Metric]:
    events = _g("racklife_health_events", ["pool", "outcome"])
    for pool in f.pools:
        for outcome in health.Outcome:
            events.add_metric([pool, outcome.value], f.health.get((pool, outcome.value), 0))
    yield events


def _bmc_errors(f: Fleet) -> Iterator[Metric]:
    errors = _c("racklife_bmc_call_errors", ["driver", "vendor", "class"])
    for e in f.bmc_errors:
        errors.add_metric([e.hardware_type, e.vendor, e.error_class], e.count)
    yield errors


_FAMILIES: tuple[Callable[[Fleet], Iterator[Metric]], ...] = (_nodes, _observed, _runs, _acceptance, _cycles,
                                                              _breakers, _health, _bmc_errors)


# Every metric a scrape can carry: the store's, and the Slurm queue's when a queue reader is given.
ALL_METRICS: dict[str, str] = METRICS | slurm_queue.HELP


class FleetCollector(Collector):
    """Reads the store at each scrape; ``clock`` is injected so tests pin the ages.

    ``queue``: Slurm's queue, read live at each scrape too (``lifecycle/service/queue.py``); None: not read.
    """

    def __init__(self, store: Store, clock: Callable[[], datetime] = lambda: datetime.now(UTC),
                 queue: slurm_queue.QueueReader | None = None) -> None:
        self.store, self.clock, self.queue = store, clock, queue

    def describe(self) -> list[Metric]:
        return []  # nothing to read at registration: the store is read per scrape

    def collect(self) -> Iterator[Metric]:
        fleet = read_fleet(self.store, self.clock())
        for family in _FAMILIES:
            yield from family(fleet)
        if self.queue is not None:
            yield from slurm_queue.families(self.queue, fleet.partitions, fleet.at)


Queue = slurm_queue.QueueReader | None


def registry(store: Store, clock: Callable[[], datetime] | None = None, queue: Queue = None) -> CollectorRegistry:
    reg = CollectorRegistry(auto_describe=False)
    reg.register(FleetCollector(store, clock, queue) if clock else FleetCollector(store, queue=queue))
    return reg


def render(store: Store, clock: Callable[[], datetime] | None = None, queue: Queue = None) -> str:
    """The metrics in Prometheus's text format, as a scrape would see them."""
    return generate_latest(registry(store, clock, queue)).decode()


def wsgi_app(store: Store, clock: Callable[[], datetime] | None = None, queue: Queue = None) -> Any:
    """A WSGI app answering ``/metrics`` (any path, as prometheus_client does) from the store."""
    return make_wsgi_app(registry(store, clock, queue))


@dataclass
class MetricsServer:
    """A running metrics endpoint; ``close`` stops it."""

    server: WSGIServer
    thread: threading.Thread

    @property
    def host(self) -> str:
        return str(self.server.server_address[0])

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


def serve(store: Store, host: str = "127.0.0.1", port: int = 9464,
          clock: Callable[[], datetime] | None = None, queue: Queue = None) -> MetricsServer:
    """Serve the metrics on ``host:port`` in a background thread (port 0: any free port)."""
    from wsgiref.simple_server import make_server

    server = make_server(host, port, wsgi_app(store, clock, queue), ThreadingWSGIServer,
                         handler_class=_SilentHandler)
    thread = threading.Thread(target=server.serve_forever, name="racklife-metrics", daemon=True)
    thread.start()
    return MetricsServer(server, thread)


def write_textfile(store: Store, path: Path, clock: Callable[[], datetime] | None = None,
                   queue: Queue = None) -> None:
    """Write the metrics to ``path`` atomically (a temp file in the same directory, then rename).

    node exporter's textfile collector may read the file at any moment; it
    must see the old content or the new, never half of it.
    """
    text = render(store, clock, queue)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise

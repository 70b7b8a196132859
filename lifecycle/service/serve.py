"""`racklife serve`: the long-running controller that front ends hand their runs to.

A command run on its own (embedded) launches the workflow engine, runs its
workflows and shuts the engine down; a run it leaves behind when killed waits
for the next command of the same kind. A fleet needs one place that always
runs: it recovers every kind of run, notices a peer that died, and keeps
watching the fleet between commands. That is this service:

* it runs the workflows front ends hand it on the ``racklife-serve`` queue
  (among them a whole ``racklife apply``: ``lifecycle.planner.durable``;
  ``registry.SERVE_QUEUE``; a command sees the service's fresh heartbeat and
  enqueues instead of running embedded, see
  :class:`lifecycle.workflows.controller.Controller`), and the queues those
  runs fan out on (provisioning's), together with every other live service on
  the same database;
* its executor id is unique per process start and heartbeats in the store;
  every ``takeover_interval_s`` it re-enqueues the PENDING runs of any
  executor that is gone (same host: its pid; another host: silent for
  ``HEARTBEAT_TIMEOUT_S``), so they resume here or on a peer. DBOS alone
  never notices a dead peer without its hosted Conductor;
* one live service (the oldest) refreshes the fleet every
  ``refresh_interval_s`` — the planner's refresh: every source read, the
  observations stored with their time, the drift logged — and acts on none
  of it;
* with ``health`` set (``racklife serve --auto-repair``), the same live service
  reads every in-service node's kernel log on its interval (the refresh
  interval unless told), records
  each new Xid and starts the repair the table maps it to, through the pool's
  circuit breaker (:mod:`lifecycle.service.health`);
* optionally it runs the boot server (``boot``), so that provisioning runs
  handed to it have one that outlives the command that asked, and the
  Prometheus endpoint (``metrics``, :mod:`lifecycle.service.metrics`).

SIGTERM or SIGINT stops it: the loops end, the engine stops, and runs still in
flight are left PENDING with the executor marked silent, so a peer (or this
service started again) adopts them at once. Steps are at-least-once, which the
workflows are built for (each reads actual state first; a power cycle is
claimed in the store before it is sent).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, replace

from lifecycle.planner import durable, observe
from lifecycle.planner.fleet import refresh
from lifecycle.planner.observed import drift
from lifecycle.service import health, metrics
from lifecycle.service import queue as slurm_queue
from lifecycle.store import Store, shared_store
from lifecycle.workflows import registry, repair
from lifecycle.workflows.boot_run import BootSettings, boot_server
from lifecycle.workflows.controller import SERVE_ROLE, Controller, live_services

log = logging.getLogger(__name__)
WORKFLOWS = (durable.apply_fleet,)  # the planner's own workflows, registered before the engine launches


@dataclass(frozen=True)
class ServeSettings:
    url: str | None = None  # the shared database (default: the store's)
    refresh_interval_s: float = 300.0  # 0: no periodic refresh
    takeover_interval_s: float = 5.0
    workers: int = 64  # runs from the service queue at once, per service process
    firmware: bool = False  # the periodic refresh reads firmware versions too (many BMC requests)
    boot: BootSettings | None = None  # run the boot server here
    metrics: tuple[str, int] | None = None  # serve /metrics on (host, port) here
    health: health.HealthSettings | None = None  # read nodes' Xids and repair them automatically


@dataclass
class Tick:
    """What one pass of a loop did, for the log and the tests."""

    adopted: dict[str, list[str]]
    refreshed: int | None = None  # nodes observed, when this pass refreshed
    drift: int = 0


class Service:
    def __init__(self, cfg: ServeSettings, say: Callable[[str], None] = log.info) -> None:
        self.cfg = cfg
        self.say = say
        self.ctl: Controller | None = None

    def run(self, stop: threading.Event, ready: Callable[[Controller], None] = lambda _c: None) -> None:
        """Serve until ``stop`` is set; ``ready`` is called once the service takes work."""
        with ExitStack() as stack:
            url = self.cfg.url
            if self.cfg.boot is not None:
                # Up before the Controller adopts a killed service's runs: their nodes may be booting now.
                boot = stack.enter_context(boot_server(shared_store(url), self.cfg.boot))
                self.say(f"boot server on {self.cfg.boot.listen}, advertised as {boot.url}")
                if self.cfg.health is not None:  # automatic reimages go through this boot server
                    self.cfg = replace(self.cfg, health=replace(self.cfg.health, provision=boot.settings))
            ctl = stack.enter_context(Controller(SERVE_ROLE, url, self.say, hand_off=False))
            self.ctl = ctl
            if self.cfg.metrics is not None:
                server = metrics.serve(ctl.store, *self.cfg.metrics, queue=slurm_queue.from_env())
                stack.callback(server.close)
                self.say(f"serving metrics on http://{server.host}:{server.port}/metrics")
            ctl.register_queue(registry.SERVE_QUEUE, self.cfg.workers, per_process=True)
            self.say(f"racklife serve: executor {ctl.executor_id} on {ctl.url}, taking runs from queue "
                     f"{registry.SERVE_QUEUE}")
            loops = [threading.Thread(target=self._loop, args=(stop, self.cfg.takeover_interval_s, self.take_over),
                                      name="racklife-takeover", daemon=True)]
            if self.cfg.refresh_interval_s > 0:
                loops.append(threading.Thread(target=self._loop, args=(stop, self.cfg.refresh_interval_s,
                                                                        self.refresh_if_first),
                                              name="racklife-refresh", daemon=True))
            if self.cfg.health is not None and self.cfg.health.interval_s > 0:
                loops.append(threading.Thread(target=self._loop, args=(stop, self.cfg.health.interval_s,
                                                                        self.health_if_first),
                                              name="racklife-health", daemon=True))
            for t in loops:
                t.start()
            ready(ctl)
            stop.wait()
            self.say("racklife serve: stopping; runs in flight are left to a peer or the next start")
            for t in loops:
                t.join(timeout=30)
            # Leaving the Controller: the engine stops, the executor is retired or marked silent.

    def _loop(self, stop: threading.Event, every_s: float, tick: Callable[[], object]) -> None:
        while True:
            try:
                tick()
            except Exception:  # one failed pass (the store unreachable a moment) must not end the service
                log.exception("racklife serve: %s failed; trying again in %.0f s", tick.__name__, every_s)
            if stop.wait(every_s):
                return

    def take_over(self) -> Tick:
        assert self.ctl is not None
        adopted = self.ctl.take_over()
        return Tick(adopted)

    def _first(self) -> bool:
        """Whether this is the oldest live service (the one that refreshes and watches the fleet)."""
        assert self.ctl is not None
        peers = live_services(self.ctl.store)
        first = min(peers, key=lambda ex: (ex.started_at, ex.id), default=None)
        return first is None or first.id == self.ctl.executor_id

    def refresh_if_first(self) -> Tick:
        """Refresh the fleet if this is the oldest live service (one refresh per interval, not one each)."""
        assert self.ctl is not None
        if not self._first():
            return Tick({})
        return self.refresh(self.ctl.store)

    def health_if_first(self) -> health.Pass | None:
        """Read the nodes in service for Xids and start their repairs, if this is the oldest live service."""
        assert self.ctl is not None and self.cfg.health is not None
        if not self._first():
            return None
        ctl = self.ctl

        def start(node: str, settings: repair.RepairSettings, run_id: str) -> None:
            ctl.start(repair.repair_node, node, settings, workflow_id=run_id, nodes=[node])

        done = health.health_pass(ctl.store, self.cfg.health, start)
        for node, why in sorted(done.unreadable.items()):
            self.say(f"health: cannot read the kernel log of {node}: {why}")
        for e in done.new:
            self.say(f"health: {e.node} Xid {e.xid} on {e.pci} ({e.bucket}): the table says {e.action}")
        for node, run_id in sorted(done.started.items()):
            self.say(f"health: automatic repair of {node} started (run {run_id})")
        for node, why in sorted(done.held.items()):
            self.say(f"health: no automatic repair of {node}: {why}")
        return done

    def refresh(self, store: Store) -> Tick:
        if not store.nodes():
            return Tick({}, 0)
        fresh = refresh(store, None, None, observe.default_sources(firmware=self.cfg.firmware, store=store))
        found = [d for o in fresh.observations for d in drift(o, fresh.wants[o.node])]
        for d in found:
            self.say(f"drift: {d.node} ({d.source.value}, {d.kind}): {d.message}")
        self.say(f"refreshed {len(fresh.observations)} node(s): {len(found)} drift(s)")
        return Tick({}, len(fresh.observations), len(found))

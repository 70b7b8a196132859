"""The automatic repair path: Xids read from nodes in service, recorded once, repaired under the breaker.

Nothing else feeds live GPU events to racklife: burn-in reads the kernel log
only while a node is tested. So the service reads it: every pass, each node
``in_service`` answers ``dmesg --time-format iso`` over SSH (as burn-in reaches
it), the lines go through the XID parser burn-in uses
(:mod:`burnin.parsers.xid`, NVIDIA's catalog) and each new line is stored once
(:mod:`lifecycle.store.health`) with the action the repair table gives it
(:mod:`lifecycle.workflows.repair_table`).

Then, per node, the most drastic action its waiting events call for is
started as a repair run (:mod:`lifecycle.workflows.repair`), ``automatic``:
the service takes the run's lease through the pool's breaker first
(``repair_breaker.take``, one transaction), with the run id it then starts,
so an open breaker starts no run at all. An event held back is marked
``breaker_open`` with the breaker's numbers, logged, and tried again on the
next pass; the count and every event are in the store, where ``racklife
repair status`` and a metrics scrape read them. A node's events of an action
racklife does not perform automatically (``none``) are closed as such; a
``reset-gpu`` on a node whose SKU cannot reset its GPUs becomes a ``reboot``.

A kernel log that cannot be read (SSH down, ``dmesg`` refused, not a kernel
log) is said in the pass's log line and counted; it is never taken for a
clean one.
"""

from __future__ import annotations

import logging
import os
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from burnin.parsers import ParseError
from burnin.parsers import xid as xid_parser
from lifecycle.model.states import State
from lifecycle.store import Store, health, leases, repair_breaker
from lifecycle.workflows import repair, repair_table
from lifecycle.workflows.accept import AcceptSettings
from lifecycle.workflows.kube_pool import KubeSettings
from lifecycle.workflows.provision import ProvisionSettings
from lifecycle.workflows.repair_actions import gpu_reset_refusal, ssh_run
from lifecycle.workflows.repair_table import RepairAction

log = logging.getLogger(__name__)

# How drastic an action is: a node with several waiting events gets the most drastic one.
SEVERITY: dict[RepairAction, int] = {RepairAction.NONE: 0, RepairAction.RESET_GPU: 1, RepairAction.REBOOT: 2,
                                     RepairAction.REIMAGE: 3, RepairAction.RMA: 4}
DMESG = ("dmesg", "--time-format", "iso")


@dataclass(frozen=True)
class HealthSettings:
    """What the service needs to read nodes and to re-test the ones it repairs."""

    ssh_config: str
    work_dir: str
    operator: str = "racklife-serve"
    profile: str | None = None
    burnin_python: str = "python3"
    kube: KubeSettings | None = None
    read_timeout_s: float = 30.0
    readers: int = 16  # nodes read at once
    repair: bool = True  # False: record events only
    interval_s: float = 300.0  # between passes (``racklife serve``: the refresh interval unless told)
    provision: ProvisionSettings | None = None
    """The boot server's provisioning settings, when this service runs one (a ``reimage`` needs it)."""


@dataclass
class Pass:
    """What one pass did, for the log and the tests."""

    read: int = 0
    unreadable: dict[str, str] = field(default_factory=dict)
    new: list[health.HealthEvent] = field(default_factory=list)
    started: dict[str, str] = field(default_factory=dict)  # node -> run id
    held: dict[str, str] = field(default_factory=dict)  # node -> why no repair started (newly, or for a new reason)
    still_held: dict[str, str] = field(default_factory=dict)  # node -> the same reason as on the last pass


Reader = Callable[[str], str]


def ssh_reader(ssh_config: str, timeout_s: float) -> Reader:
    """Read a node's kernel log over SSH, as burn-in reaches it; raises ``OSError`` with why not."""

    def read(node: str) -> str:
        got = ssh_run(node, ssh_config, list(DMESG), timeout_s)
        if got.exit_code != 0:
            raise OSError(f"dmesg exited {got.exit_code}: {got.stderr.strip()[-200:]}")
        return got.stdout

    return read


def parse_log(node: str, text: str) -> list[health.SeenXid]:
    """The Xid lines of one node's kernel log, each with the repair table's action (ParseError: not a log)."""
    out = []
    for e in xid_parser.parse(text).events:
        rep = repair_table.for_xid(e.xid)
        out.append(health.SeenXid(node, e.xid, e.pci, e.timestamp or "", e.message[:500], e.bucket, rep.action.value))
    return out


def collect(store: Store, read: Reader, readers: int = 16) -> Pass:
    """Read every node in service and store the Xid lines not seen before."""
    nodes = [n.name for n in store.nodes() if n.state is State.IN_SERVICE]
    done = Pass()
    seen: list[health.SeenXid] = []

    def one(node: str) -> tuple[str, list[health.SeenXid] | str]:
        try:
            return node, parse_log(node, read(node))
        except (OSError, ParseError, ValueError) as exc:
            return node, str(exc)[:300] or type(exc).__name__

    with ThreadPoolExecutor(max(1, min(readers, len(nodes) or 1))) as pool:
        for node, got in pool.map(one, nodes):
            if isinstance(got, str):
                done.unreadable[node] = got
            else:
                done.read += 1
                seen += got
    done.new = health.record(store, seen)
    return done


def _action_for(store: Store, node: str, events: list[health.HealthEvent]) -> tuple[RepairAction, str]:
    worst = max(events, key=lambda e: SEVERITY[RepairAction(e.action)])
    action = RepairAction(worst.action)
    reason = repair_table.for_xid(worst.xid).reason
    if action is RepairAction.RESET_GPU:
        refusal = gpu_reset_refusal(store.get(node).node().sku)
        if refusal:
            action, reason = RepairAction.REBOOT, f"{reason}; rebooted instead: {refusal}"
    return action, reason


def act(store: Store, cfg: HealthSettings, start: Callable[[str, repair.RepairSettings, str], None],
        done: Pass) -> Pass:
    """Start the repairs the waiting events call for, each through its pool's breaker; mark every event."""
    by_node: dict[str, list[health.HealthEvent]] = defaultdict(list)
    for e in health.waiting(store):
        by_node[e.node].append(e)
    for node, events in by_node.items():
        rec = store.get(node)
        act_on = [e for e in events if RepairAction(e.action) is not RepairAction.NONE]
        for e in events:
            if e not in act_on:
                health.set_outcome(store, e.id, health.Outcome.NONE.value, repair_table.for_xid(e.xid).reason)
        if not act_on:
            continue
        if rec.state is not State.IN_SERVICE:
            why = f"node is {rec.state.value}; automatic repairs are for nodes in service"
            for e in act_on:
                health.set_outcome(store, e.id, health.Outcome.REFUSED.value, why)
            done.held[node] = why
            continue
        action, reason = _action_for(store, node, act_on)
        run_id = f"repair-{os.urandom(6).hex()}"
        took = repair_breaker.take(store, node, run_id, automatic=True)
        if not took.ok:
            outcome = health.Outcome.REFUSED if took.held is not None else health.Outcome.BREAKER_OPEN
            why = (f"node {node} is held by run {took.held.run_id} ({took.held.workflow})" if took.held is not None
                   else took.count.describe())
            if all((e.outcome, e.detail) == (outcome.value, why) for e in act_on):
                done.still_held[node] = why  # said on an earlier pass: not said again every interval
                continue
            for e in act_on:
                health.set_outcome(store, e.id, outcome.value, why)
            done.held[node] = why
            log.warning("racklife serve: no automatic repair of %s (Xid %s): %s", node,
                        ", ".join(str(e.xid) for e in act_on), why)
            continue
        first, *rest = act_on
        settings = _settings(cfg, node, rec.pool, store, action, reason, first.id)
        try:
            start(node, settings, run_id)
        except Exception as exc:
            leases.release(store, run_id)
            health.set_outcome(store, first.id, health.Outcome.PENDING.value, f"the repair did not start: {exc}")
            raise
        health.set_outcome(store, first.id, health.Outcome.STARTED.value, f"repair {action.value}: {reason}", run_id)
        for e in rest:
            health.set_outcome(store, e.id, health.Outcome.COVERED.value, f"repaired with event {first.id}", run_id)
        done.started[node] = run_id
        log.info("racklife serve: automatic repair %s of %s (run %s): %s", action.value, node, run_id, reason)
    return done


def _settings(cfg: HealthSettings, node: str, pool: str, store: Store, action: RepairAction, reason: str,
              event: int) -> repair.RepairSettings:
    level = store.pool(pool).retest_level
    work = Path(cfg.work_dir) / f"repair-{os.urandom(6).hex()}" / node
    accept = AcceptSettings(level=level, work_dir=str(work), report_dir=str(work / "reports"),
                            operator=cfg.operator, ssh_config=cfg.ssh_config, profile=cfg.profile,
                            burnin_python=cfg.burnin_python, max_in_flight=1, multi_node=False)
    return repair.RepairSettings(action=action, reason=reason, operator=cfg.operator, accept=accept,
                                 automatic=True, kube=cfg.kube, event=event, provision=cfg.provision)


def health_pass(store: Store, cfg: HealthSettings, start: Callable[[str, repair.RepairSettings, str], None],
                read: Reader | None = None) -> Pass:
    """One pass: read every node in service, record new Xids, start the repairs they call for."""
    done = collect(store, read or ssh_reader(cfg.ssh_config, cfg.read_timeout_s), cfg.readers)
    return act(store, cfg, start, done) if cfg.repair else done


"""Rack acceptance as a durable workflow: burn in, judge, keep the evidence, gate the nodes.

Nodes move provisioned (or accepted, quarantined, drained) → burning_in; burn-in
fans out over SSH; the rack is judged against each node's SKU profile and
against its peers; the evidence bundle and the three reports are written;
then every node gets an acceptance record and moves to ``accepted`` or
``quarantined``. A quarantined node in a Slurm pool is drained with
racklife's owner prefix so the scheduler stops using it. Missing data is a
failure (the judge fails closed).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from dbos import DBOS

from acceptance.evidence import BundleMeta, write_bundle
from acceptance.fanout import BurninCommand, OpenSSHConfig, Target, fan_out, to_input
from acceptance.judge import judge_rack
from acceptance.reports import ReportInput, write_reports
from burnin.result import load_result
from lifecycle import __version__
from lifecycle.store import AcceptanceRecord, shared_store
from lifecycle.workflows.node_ops import current_run_id, node_state, transition

READY_FOR_BURN_IN = ("provisioned", "accepted", "quarantined", "drained")


@dataclass(frozen=True)
class AcceptSettings:
    level: str
    work_dir: str
    report_dir: str
    operator: str
    ssh_config: str
    profile: str | None = None  # None: each node's SKU
    burnin_python: str = "python3"
    max_in_flight: int = 8
    timeout_s: float = 3600.0


@dataclass
class NodeVerdict:
    node: str
    passed: bool
    state: str
    reasons: list[str] = field(default_factory=list)
    record: str | None = None
    slurm_drain: str | None = None


@DBOS.step()
def burn_in(nodes: list[str], settings: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Run burn-in on every node (bounded, per-node timeout); return where each result landed."""
    cfg = AcceptSettings(**settings)
    store = shared_store()
    skus = {n: store.get(n).sku for n in nodes}
    transport = OpenSSHConfig(Path(cfg.ssh_config))
    out: dict[str, dict[str, Any]] = {}
    by_profile: dict[str, list[str]] = {}
    for n in nodes:
        by_profile.setdefault(cfg.profile or skus[n], []).append(n)
    for profile, group in sorted(by_profile.items()):
        command = BurninCommand(profile, cfg.level, current_run_id(), python=cfg.burnin_python)
        outcomes = fan_out(transport, [Target(n, n) for n in group], command, Path(cfg.work_dir) / "collected",
                           max_in_flight=cfg.max_in_flight, timeout_s=cfg.timeout_s)
        for o in outcomes:
            out[o.node] = {"profile": profile, "status": o.status, "reason": o.reason,
                           "local_dir": str(o.local_dir) if o.local_dir else None,
                           "started_at": o.started_at, "ended_at": o.ended_at}
    return out


@DBOS.step()
def judge_and_record(nodes: list[str], collected: dict[str, dict[str, Any]], settings: dict[str, Any],
                     started_at: str) -> list[dict[str, Any]]:
    """Judge the rack, write evidence and reports, and store one acceptance record per node."""
    from acceptance.fanout import NodeOutcome

    cfg = AcceptSettings(**settings)
    run_id = current_run_id()
    store = shared_store()
    recs = {n: store.get(n) for n in nodes}
    inputs = []
    for n in nodes:
        c = collected[n]
        result = None
        if c["local_dir"] and (Path(c["local_dir"]) / "result.json").is_file():
            result = load_result((Path(c["local_dir"]) / "result.json").read_text(encoding="utf-8"))
        outcome = NodeOutcome(n, c["status"], c["reason"], result,
                              Path(c["local_dir"]) if c["local_dir"] else None, None,
                              c["started_at"], c["ended_at"])
        inputs.append(to_input(outcome, c["profile"], recs[n].u, recs[n].rack))
    judgement = judge_rack(inputs)
    ended = datetime.now(UTC).isoformat(timespec="seconds")
    racks = sorted({r.rack for r in recs.values()})
    meta = BundleMeta(",".join(racks), cfg.operator, started_at, ended, __version__, cfg.level,
                      policy=f"racklife accept ({cfg.operator})")
    evidence_dir = Path(cfg.work_dir) / "evidence"
    node_dirs = {n: Path(c["local_dir"]) for n, c in collected.items() if c["local_dir"]}
    digest = write_bundle(evidence_dir, judgement, inputs, node_dirs, meta)
    write_reports(Path(cfg.report_dir), ReportInput(judgement, inputs, meta, evidence_digest=digest))
    verdicts = []
    now = datetime.now(UTC)
    existing = {n: {a.id for a in store.acceptance_records(n)} for n in nodes}
    for j in judgement.nodes:
        rec_id = f"{run_id}:{j.node}"
        pool = store.pool(recs[j.node].pool)
        summary = {"verdict": j.verdict, "reasons": j.reasons(), "profile": j.profile,
                   "report_dir": cfg.report_dir,
                   "findings": [json.loads(json.dumps(asdict(f), default=str)) for f in j.findings]}
        if rec_id not in existing[j.node]:  # a step re-run after a crash must not insert twice
            store.add_acceptance_record(AcceptanceRecord(
                rec_id, j.node, j.passed, cfg.level, j.profile, now,
                now + timedelta(days=pool.acceptance_validity_days), cfg.operator, run_id, summary,
                str(evidence_dir), digest))
        verdicts.append(asdict(NodeVerdict(j.node, j.passed, "", j.reasons(), rec_id)))
    return verdicts


@DBOS.step()
def quarantine_in_slurm(node: str, reason: str) -> str:
    """Drain a quarantined node in Slurm, owned by this run; say what happened (never raises)."""
    from lifecycle.drivers.errors import DriverError
    from lifecycle.drivers.slurm.driver import SlurmDriver
    from lifecycle.drivers.slurm.runner import CommandRunner

    try:
        owners = SlurmDriver(CommandRunner()).drain([node], current_run_id(), f"quarantined: {reason}")
    except (DriverError, ValueError) as exc:
        return f"not drained in Slurm: {exc}"
    owner = owners.get(node)
    return f"drained in Slurm ({owner.describe()})" if owner else "drained in Slurm"


@DBOS.workflow()
def accept_nodes(nodes: list[str], settings: dict[str, Any]) -> list[dict[str, Any]]:
    started_at = datetime.now(UTC).isoformat(timespec="seconds")
    skipped: list[dict[str, Any]] = []
    testing: list[str] = []
    for n in nodes:
        state = node_state(n)
        if state in READY_FOR_BURN_IN:
            transition(n, "burn_in", f"acceptance at level {settings['level']}")
            testing.append(n)
        elif state == "burning_in":
            testing.append(n)
        else:
            skipped.append(asdict(NodeVerdict(n, False, state, [f"node is {state}; acceptance needs one of "
                                                                   f"{', '.join(READY_FOR_BURN_IN)}"])))
    if not testing:
        return skipped
    collected = burn_in(testing, settings)
    verdicts = judge_and_record(testing, collected, settings, started_at)
    store = shared_store()
    slurm_pools = {n: store.pool(store.get(n).pool).scheduler == "slurm" for n in testing}
    for v in verdicts:
        if v["passed"]:
            v["state"] = transition(v["node"], "accept", f"passed acceptance (record {v['record']})")
        else:
            reason = "; ".join(v["reasons"]) or "failed acceptance"
            v["state"] = transition(v["node"], "quarantine", reason[:500])
            if slurm_pools[v["node"]]:
                v["slurm_drain"] = quarantine_in_slurm(v["node"], reason[:200])
    return skipped + verdicts

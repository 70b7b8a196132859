"""Rack acceptance as a durable workflow: burn in, judge, keep the evidence, gate the nodes.

Nodes move provisioned (or accepted, quarantined, drained) → burning_in; burn-in
fans out over SSH; nodes that pass it run all_reduce across nodes (``srun`` in a
Slurm pool, ``mpirun`` started over SSH in a Kubernetes pool or none: pairs and rings
from the topology labels, then isolation rounds when a run is slow); the rack is
judged against each node's SKU profile, against its peers, by the multi-node runs
each node took part in, and on whether the multi-node testing its profile requires at
this level was done (or explicitly waived by the operator); the evidence bundle
(signed with the controller's key) and the three reports are written; then every node
gets an acceptance record (with the bundle's digest and any waiver) and moves to
``accepted`` or ``quarantined``. A quarantined node in a Slurm pool is drained with
racklife's owner prefix so the scheduler stops using it. Missing data is a
failure (the judge fails closed).
"""

from __future__ import annotations

import json
import threading
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from dbos import DBOS

from acceptance import plots
from acceptance.coverage import MultiNodeDemand, judge_acceptance
from acceptance.evidence import BundleMeta, write_bundle
from acceptance.fanout import BurninCommand, NodeOutcome, Target, fan_out, to_input
from acceptance.judge import NodeInput, Request, Waiver, judge_rack
from acceptance.reports import MultiNodeStage, ReportInput, write_reports
from acceptance.signing import ControllerKey
from burnin.result import load_result
from lifecycle import __version__
from lifecycle.drivers.slurm.driver import SlurmDriver
from lifecycle.model.inventory import Pool
from lifecycle.model.states import Actor
from lifecycle.model.vocab import LEVELS, Level
from lifecycle.store import AcceptanceRecord, NodeRecord, shared_store
from lifecycle.store.db import default_home
from lifecycle.workflows.accept_multinode import NCCL_LOOKUP_S, ask_nccl_binary, multi_node_runs, run_multi_node
from lifecycle.workflows.leasing import release_leases, take_leases
from lifecycle.workflows.node_ops import current_run_id
from lifecycle.workflows.retry import retrier, step
from lifecycle.workflows.waiting import waiting

READY_FOR_BURN_IN = ("provisioned", "accepted", "quarantined", "drained", "repairing")


@dataclass(frozen=True)
class AcceptSettings:
    level: Level
    work_dir: str
    report_dir: str
    operator: str
    ssh_config: str
    profile: str | None = None  # None: each node's SKU
    burnin_python: str = "python3"
    max_in_flight: int = 8
    timeout_s: float = 3600.0
    multi_node: bool = True
    nccl_binary: str | None = None  # None: the all_reduce_perf on the nodes' PATH, asked over SSH
    multi_node_timeout_s: float = 1800.0  # per round of srun jobs
    multi_node_max_parallel: int | None = None  # srun jobs at once; None: a whole round
    waivers: tuple[Waiver, ...] = ()  # what the operator waived for this run (racklife accept --waive)
    slurm_ready_s: float = 120.0  # how long to wait for just-provisioned nodes to be idle in Slurm
    kernel_log_since: str | None = None
    """The run's cut-off on the nodes' clock (ISO 8601): kernel_xid judges only the kernel log lines from then
    on, e.g. a repair's re-test from just before its GPU reset (the log keeps the repaired Xid). None: the
    whole log."""
    expect_driver: str | None = None
    """The GPU driver version each node must report (a driver upgrade's re-test): the judge fails a node whose
    burn-in read another version, or none. None: not judged against a version."""

    def __post_init__(self) -> None:
        # The type says so to mypy; this says so to a caller that built the settings from a plain string.
        if self.level not in LEVELS:
            raise ValueError(f"acceptance settings: level must be one of {', '.join(LEVELS)}, not {self.level!r}")


@dataclass
class NodeVerdict:
    node: str
    passed: bool
    state: str
    reasons: list[str] = field(default_factory=list)
    record: str | None = None
    slurm_drain: str | None = None
    refused_by: str | None = None  # why it was not tested: the run that holds it, or a state acceptance refuses


@step(idempotent=False)  # hours of burn-in on the nodes: never started twice by a retry
def burn_in(nodes: list[str], cfg: AcceptSettings) -> dict[str, dict[str, Any]]:
    """Run burn-in on every node (bounded, per-node timeout); return where each result landed."""
    from acceptance.ssh_fabric import FabricSSH  # fabric and paramiko: only when SSH is used

    store = shared_store()
    skus = {n: store.get(n).sku for n in nodes}
    transport = FabricSSH(Path(cfg.ssh_config))
    out: dict[str, dict[str, Any]] = {}
    by_profile: dict[str, list[str]] = {}
    for n in nodes:
        by_profile.setdefault(cfg.profile or skus[n], []).append(n)
    # Work the rack's tail needs, done while the nodes burn in: matplotlib for the report,
    # and where all_reduce_perf lives for the multi-node stage (one SSH round trip each).
    plots.preload()
    binaries: dict[str, str | None] = {}
    lookups = [threading.Thread(target=_lookup_nccl_binary, args=(cfg, sorted(group)[0], profile, binaries),
                                name=f"nccl-lookup-{profile}", daemon=True)
               for profile, group in sorted(by_profile.items()) if cfg.multi_node and not cfg.nccl_binary]
    for t in lookups:
        t.start()
    waits = ExitStack()  # each node's wait record, cleared when the fan-out ends
    try:
        says = {n: waits.enter_context(waiting(n, "burn-in", f"a burn-in slot (at most {cfg.max_in_flight} at once)"))
                for n in nodes}

        def started(t: Target) -> None:
            says[t.node](f"burn-in on the node ({cfg.level}, up to {cfg.timeout_s:g} s)")

        def done(o: NodeOutcome) -> None:
            says[o.node](f"burn-in of the other nodes (this one: {o.status})")

        for profile, group in sorted(by_profile.items()):
            command = BurninCommand(profile, cfg.level, current_run_id(), python=cfg.burnin_python,
                                    kernel_log_since=cfg.kernel_log_since)
            outcomes = fan_out(transport, [Target(n, n) for n in group], command, Path(cfg.work_dir) / "collected",
                               max_in_flight=cfg.max_in_flight, timeout_s=cfg.timeout_s,
                               on_start=started, on_done=done)
            for o in outcomes:
                out[o.node] = {"profile": profile, "status": o.status, "reason": o.reason,
                               "local_dir": str(o.local_dir) if o.local_dir else None,
                               "started_at": o.started_at, "ended_at": o.ended_at}
    finally:
        waits.close()
        transport.close()
        for t in lookups:
            t.join(timeout=NCCL_LOOKUP_S)
    for c in out.values():
        c["nccl_binary"] = binaries.get(c["profile"])
    return out


def _lookup_nccl_binary(cfg: AcceptSettings, node: str, profile: str, found: dict[str, str | None]) -> None:
    """Ask ``node`` where its all_reduce_perf is (a thread beside the fan-out).

    A failure here only means no answer: the multi-node stage then asks a node that passed
    burn-in itself, in its own step, where an error is raised and recorded as usual."""
    try:
        found[profile] = ask_nccl_binary(cfg, node)
    except Exception:  # any failure: no answer, asked again by the stage
        found[profile] = None


def node_inputs(nodes: list[str], collected: dict[str, dict[str, Any]],
                recs: dict[str, NodeRecord], run_id: str, level: Level,
                kernel_log_since: str | None = None, expect_driver: str | None = None) -> list[NodeInput]:
    """The judge's view of what the fan-out brought back (re-read from disk: steps pass JSON), each
    bound to what this run asked of the node."""
    inputs = []
    for n in nodes:
        c = collected[n]
        result = None
        if c["local_dir"] and (Path(c["local_dir"]) / "result.json").is_file():
            result = load_result((Path(c["local_dir"]) / "result.json").read_text(encoding="utf-8"))
        outcome = NodeOutcome(n, c["status"], c["reason"], result,
                              Path(c["local_dir"]) if c["local_dir"] else None, None,
                              c["started_at"], c["ended_at"])
        inputs.append(to_input(outcome, c["profile"], recs[n].u, recs[n].rack,
                               Request(run_id, n, level, recs[n].serial, kernel_log_since, expect_driver)))
    return inputs


@step(idempotent=False)  # NCCL runs across nodes through Slurm jobs
def multi_node(nodes: list[str], collected: dict[str, dict[str, Any]], cfg: AcceptSettings) -> dict[str, Any]:
    """All_reduce across nodes through Slurm for the nodes that passed burn-in; isolate slow ones."""
    store = shared_store()
    recs = {n: store.get(n) for n in nodes}
    inputs = node_inputs(nodes, collected, recs, current_run_id(), cfg.level, cfg.kernel_log_since,
                         cfg.expect_driver)
    single = judge_rack(inputs).by_node()
    found = {c["profile"]: c["nccl_binary"] for c in collected.values() if c.get("nccl_binary")}
    with ExitStack() as waits:
        for n in nodes:
            if single[n].passed:
                waits.enter_context(waiting(n, "multi-node", "multi-node all_reduce jobs (pairs, rings, isolation)"))
        return run_multi_node(recs, {n: collected[n]["profile"] for n in nodes},
                              {n: single[n].passed for n in nodes},
                              {n: store.pool(r.pool) for n, r in recs.items()}, cfg, current_run_id(), found)


@step(idempotent=False)  # writes and signs the evidence bundle once
def judge_and_record(nodes: list[str], collected: dict[str, dict[str, Any]], cfg: AcceptSettings,
                     started_at: str, mn: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Judge the rack, write evidence and reports, and store one acceptance record per node."""
    run_id = current_run_id()
    store = shared_store()
    recs = {n: store.get(n) for n in nodes}
    inputs = node_inputs(nodes, collected, recs, run_id, cfg.level, cfg.kernel_log_since,
                         cfg.expect_driver)
    runs, culprits, isolation = multi_node_runs(mn or {})
    left_out = dict(mn["left_out"]) if mn is not None else \
        {n: "multi-node runs were turned off (--no-multi-node)" for n in nodes}
    waivers = cfg.waivers
    judgement = judge_acceptance(inputs, groups=runs, culprits=culprits,
                                 demand=MultiNodeDemand(cfg.level, left_out, waivers))
    ended = datetime.now(UTC).isoformat(timespec="seconds")
    racks = sorted({r.rack for r in recs.values()})
    meta = BundleMeta(",".join(racks), cfg.operator, started_at, ended, __version__, cfg.level,
                      policy=f"racklife accept ({cfg.operator})")
    evidence_dir = Path(cfg.work_dir) / "evidence"
    node_dirs = {n: Path(c["local_dir"]) for n, c in collected.items() if c["local_dir"]}
    signer = ControllerKey(default_home()).load(create=True)
    digest = write_bundle(evidence_dir, judgement, inputs, node_dirs, meta, isolation=isolation,
                          extra_rack_data={"multi_node_stage": _stage_summary(mn or {})}, signer=signer)
    stage = MultiNodeStage(left_out, (mn or {}).get("error"))
    write_reports(Path(cfg.report_dir), ReportInput(judgement, inputs, meta, isolation=isolation,
                                                    evidence_digest=digest, waivers=waivers, multi_node=stage,
                                                    evidence_dir=str(evidence_dir)))
    verdicts = []
    now = datetime.now(UTC)
    existing = {n: {a.id for a in store.acceptance_records(n)} for n in nodes}
    pools = {name: store.pool(name) for name in {r.pool for r in recs.values()}}
    for j in judgement.nodes:
        rec_id = f"{run_id}:{j.node}"
        pool = pools[recs[j.node].pool]
        summary = {"verdict": j.verdict, "reasons": j.reasons(), "profile": j.profile,
                   "report_dir": cfg.report_dir, "waivers": [asdict(w) for w in j.waivers],
                   "findings": [json.loads(json.dumps(asdict(f), default=str)) for f in j.findings]}
        if rec_id not in existing[j.node]:  # a step re-run after a crash must not insert twice
            store.add_acceptance_record(AcceptanceRecord(
                rec_id, j.node, j.passed, cfg.level, j.profile, now,
                now + timedelta(days=pool.acceptance_validity_days), cfg.operator, run_id, summary,
                str(evidence_dir.resolve()), digest))
        verdicts.append(asdict(NodeVerdict(j.node, j.passed, "", j.reasons(), rec_id)))
    return verdicts


def _stage_summary(mn: dict[str, Any]) -> dict[str, Any]:
    """What rack.json keeps of the stage (the raw outputs are files of their own in the bundle)."""
    return {"left_out": mn.get("left_out", {}), "error": mn.get("error"),
            "stages": [{k: v for k, v in st.items() if k != "launches"}
                       | {"runs": [{k: v for k, v in x.items() if k not in ("stdout", "stderr")}
                                   for x in st["launches"]]} for st in mn.get("stages", [])]}


@step(idempotent=True)  # drain reads first; ours again is already done
def quarantine_in_slurm(node: str, reason: str) -> str:
    """Drain a quarantined node in Slurm, owned by this run; say what happened (never raises)."""
    from lifecycle.drivers.errors import DriverError
    from lifecycle.drivers.slurm.runner import CommandRunner

    try:
        owners = retrier().call(SlurmDriver(CommandRunner()).drain, [node], current_run_id(),
                                f"quarantined: {reason}")
    except (DriverError, ValueError) as exc:
        return f"not drained in Slurm: {exc}"
    owner = owners.get(node)
    return f"drained in Slurm ({owner.describe()})" if owner else "drained in Slurm"


@step(idempotent=True)  # this run's transitions replay as done
def begin_burn_in(nodes: list[str], level: Level, operator: str) -> tuple[list[str], list[dict[str, Any]]]:
    """Move every ready node to ``burning_in`` in one step; return the nodes to test and the skipped.

    One step for the rack rather than two per node (read, move): each step is a commit of its
    own. A re-run after a crash finds the nodes it already moved in ``burning_in`` (this run's
    transitions) and tests them, as it would a node left there by a cut-off run.
    """
    store = shared_store()
    testing: list[str] = []
    skipped: list[dict[str, Any]] = []
    for n in nodes:
        state = store.get(n).state.value
        if state in READY_FOR_BURN_IN:
            store.transition(n, "burn_in", Actor.WORKFLOW, f"acceptance at level {level}, asked by {operator}",
                             run_id=current_run_id())
            testing.append(n)
        elif state == "burning_in":
            testing.append(n)
        else:
            why = f"node is {state}; acceptance needs one of {', '.join(READY_FOR_BURN_IN)}"
            # A precondition, not a verdict: refused (exit 5), never a FAIL of a node nobody tested.
            skipped.append(asdict(NodeVerdict(n, False, state, [why], refused_by=why)))
    return testing, skipped


@step(idempotent=True)  # this run's transitions replay as done
def gate_nodes(verdicts: list[dict[str, Any]], operator: str) -> list[dict[str, Any]]:
    """Accept the nodes that passed and quarantine the rest, in one step; say which to drain in Slurm.

    Replay-safe: the store returns this run's recorded transition when the node already made it.
    """
    store = shared_store()
    pools: dict[str, Pool] = {}
    out = []
    for v in verdicts:
        v = dict(v)
        if v["passed"]:
            t = store.transition(v["node"], "accept", Actor.WORKFLOW,
                                 f"passed acceptance (record {v['record']}), asked by {operator}",
                                 run_id=current_run_id())
            v["drain"] = False
        else:
            reason = "; ".join(v["reasons"]) or "failed acceptance"
            t = store.transition(v["node"], "quarantine", Actor.WORKFLOW, reason[:500], run_id=current_run_id())
            pool_name = store.get(v["node"]).pool
            if pool_name not in pools:
                pools[pool_name] = store.pool(pool_name)
            v["drain"] = pools[pool_name].scheduler == "slurm"
        v["state"] = t.target.value
        out.append(v)
    return out


@DBOS.workflow(name="accept_nodes")
def accept_nodes(nodes: list[str], cfg: AcceptSettings) -> list[dict[str, Any]]:
    """Accept ``nodes`` as one run that holds them all (one run per node) from start to end."""
    held = take_leases(nodes, "accept_nodes")
    if held:  # nothing touched: say who holds what
        return [asdict(NodeVerdict(n, False, "", [held[n]] if n in held else
                                   ["not started: other nodes of the request are held by another run"],
                                   refused_by=held.get(n))) for n in nodes]
    try:
        return _accept(nodes, cfg)
    finally:
        release_leases()


def _accept(nodes: list[str], cfg: AcceptSettings) -> list[dict[str, Any]]:
    started_at = datetime.now(UTC).isoformat(timespec="seconds")
    testing, skipped = begin_burn_in(nodes, cfg.level, cfg.operator)
    if not testing:
        return skipped
    collected = burn_in(testing, cfg)
    mn = multi_node(testing, collected, cfg) if cfg.multi_node else None
    verdicts = gate_nodes(judge_and_record(testing, collected, cfg, started_at, mn), cfg.operator)
    for v in verdicts:
        if v.pop("drain"):
            reason = "; ".join(v["reasons"]) or "failed acceptance"
            v["slurm_drain"] = quarantine_in_slurm(v["node"], reason[:200])
    return skipped + verdicts

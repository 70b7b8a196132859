"""The issue's scripted sequence on a 4-node lab, judged by a scrape of `racklife metrics serve` over HTTP.

node-01..03 start in the training pool (Slurm), node-04 in inference
(Kubernetes); node-03's NVLink is slow. In order: `racklife build` provisions
all four and accepts three (node-03 fails its single-node all_reduce and is
quarantined); an 8-GPU job runs on node-01 for 5 s; node-02 moves to inference
(`role-swap`, re-tested on the way); node-03 is decommissioned; a held job with
two GPUs waits in the training partition. Every command writes its events to one file
(``RACKLIFE_EVENT_LOG``). Then:

- `racklife metrics serve --port 0` (a process, the lab's environment, so it
  reads the Slurm queue too) is scraped over HTTP and parsed with
  ``prometheus_client.parser``: the nodes, GPUs, out-of-service reasons,
  acceptance records and checks, workflow runs, the role swap's phases, the
  queue, the breakers and the BMC call errors have the values the sequence
  implies, exactly;
- every event line is JSON with the required keys, and the transitions in it
  are the store's, one for one;
- `racklife report capacity --slurm-accounting` reconciles the training pool
  with the lab's slurmdbd: the allocated GPU-hours are what ``sacct`` itself
  says (GPUs times ElapsedRaw), acceptance's own multi-node job is explained
  as testing, nothing is unexplained;
- no secret of the run (the lab's BMC password, HTTP Basic's base64 of the
  credentials, the slurmrestd JWT) appears in any command's output, the event
  log, any file of the lab (its logs, Slurm's state, the store's database)
  other than the credentials file itself.
"""

from __future__ import annotations

import base64
import json
import re
import signal
import sqlite3
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from lifecycle.model import events
from tests.e2e.conftest import EXE, RunningLab
from tests.service.test_metrics import parse, scrape

pytestmark = [pytest.mark.xdist_group("lab-b"), pytest.mark.slow]

SKU = "h100-sxm-8"
NCCL = "nccl.all_reduce.single_node"


class Recorded:
    """The lab, with every racklife command's output kept (for the secret search) and one event log."""

    def __init__(self, lab: RunningLab) -> None:
        self.lab = lab
        self.event_log = lab.root / "events.jsonl"
        self.outputs: list[str] = []

    def racklife(self, *args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
        res = self.lab.racklife(*args, timeout=timeout, env_extra={"RACKLIFE_EVENT_LOG": str(self.event_log)})
        self.outputs += [res.stdout, res.stderr]
        assert "Traceback" not in res.stderr, res.stderr
        return res


@pytest.fixture(scope="module")
def lab() -> Iterator[RunningLab]:
    running = RunningLab(4, faults={"node-03": "slow-nvlink"})
    try:
        yield running
    finally:
        running.down()


def slurm_env(lab: RunningLab) -> dict[str, str]:
    """For Slurm's own clients; without the JWT (Slurm keeps a job's environment, and srun must not use it)."""
    return {k: v for k, v in lab.env.items() if k != "RACKLIFE_SLURM_JWT"}


def sequence(rec: Recorded, images: Path) -> None:
    res = rec.racklife("build", str(rec.lab.inventory), "--images", str(images), "--boot-timeout", "60",
                       timeout=1500)
    assert res.returncode == 1, res.stdout[-3000:] + res.stderr[-2000:]  # one node failed acceptance
    states = {n["name"]: n["state"] for n in json.loads(rec.racklife("nodes", "list", "--json").stdout)}
    assert states == {"node-01": "in_service", "node-02": "in_service", "node-03": "quarantined",
                      "node-04": "in_service"}, states
    done = subprocess.run(["srun", "-p", "training", "-w", "node-01", "--gres=gpu:8", "sleep", "5"],
                          env=slurm_env(rec.lab), capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    res = rec.racklife("role-swap", "node-02", "--to", "inference", "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    [swapped] = json.loads(res.stdout)
    assert swapped["ok"] and (swapped["state"], swapped["pool"]) == ("in_service", "inference"), swapped
    res = rec.racklife("decommission", "node-03", "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    assert json.loads(res.stdout)[0]["state"] == "decommissioned"
    # A job that must pend.
    done = subprocess.run(["sbatch", "--parsable", "-p", "training", "--hold", "-N1", "--gres=gpu:2", "--wrap",
                           "sleep 1"], env=slurm_env(rec.lab), capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 0, done.stderr


def scraped(rec: Recorded) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    proc = subprocess.Popen([EXE, "metrics", "serve", "--port", "0"], env=rec.lab.env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        match = re.search(r"http://127\.0\.0\.1:(\d+)/metrics", line)
        assert match, line
        text = scrape(f"http://127.0.0.1:{match.group(1)}/metrics")
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    rec.outputs += [text, out, err]
    samples, _ = parse(text)
    return samples


def by_labels(samples: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str,
              **fixed: str) -> dict[tuple[tuple[str, str], ...], float]:
    """The series of ``name`` whose labels include ``fixed``, keyed by their other labels, zeros left out."""
    out = {}
    for (n, labels), v in samples.items():
        if n == name and set(fixed.items()) <= labels and v != 0:
            out[tuple(sorted((k, x) for k, x in labels if k not in fixed))] = v
    return out


def test_the_scripted_sequence_gives_the_expected_metrics_events_and_no_secret(
        lab: RunningLab, minimal_image: Path) -> None:
    rec = Recorded(lab)
    since = (datetime.now(UTC) - timedelta(seconds=2)).replace(microsecond=0)
    sequence(rec, minimal_image)
    started = time.monotonic()
    samples = scraped(rec)
    assert time.monotonic() - started < 30

    # Nodes and GPUs: training keeps node-01 (node-03 retired), inference has node-02 and node-04.
    assert by_labels(samples, "racklife_nodes", pool="training") == {(("state", "in_service"),): 1,
                                                                     (("state", "decommissioned"),): 1}
    assert by_labels(samples, "racklife_nodes", pool="inference") == {(("state", "in_service"),): 2}
    assert by_labels(samples, "racklife_pool_gpus", pool="training") == {(("status", "in_service"),): 8,
                                                                         (("status", "retired"),): 8}
    assert by_labels(samples, "racklife_pool_gpus", pool="inference") == {(("status", "in_service"),): 16}
    assert by_labels(samples, "racklife_nodes_out_of_service") == {
        (("pool", "training"), ("reason", "decommission_done"), ("state", "decommissioned")): 1}

    # Acceptance: four passing records (three at the build, node-02's re-test) and node-03's failure.
    assert by_labels(samples, "racklife_acceptance_records_total", sku=SKU) == {
        (("outcome", "pass"),): 4, (("outcome", "fail"),): 1}
    assert by_labels(samples, "racklife_acceptance_checks_total", sku=SKU, check=NCCL) == {
        (("verdict", "pass"),): 4, (("verdict", "fail"),): 1}
    assert not [k for k, v in by_labels(samples, "racklife_acceptance_checks_total", sku=SKU, verdict="fail").items()
                if k != (("check", NCCL),)]
    assert set(by_labels(samples, "racklife_acceptance_last_pass_age_seconds")) == {
        (("node", n), ("pool", p), ("sku", SKU)) for n, p in
        (("node-01", "training"), ("node-02", "inference"), ("node-04", "inference"))}

    # Workflow runs: every one succeeded (a failed acceptance is a verdict, not a failed run).
    assert by_labels(samples, "racklife_workflow_runs") == {
        (("status", "SUCCESS"), ("workflow", w)): n for w, n in (
            ("provision_many", 1), ("provision_node", 4), ("accept_nodes", 1), ("join_node", 2),
            ("join_kube_node", 1), ("role_swap", 1), ("decommission_node", 1))}
    # The role swap: one cycle, done, each phase timed once.
    assert by_labels(samples, "racklife_node_cycles_total") == {(("outcome", "done"), ("workflow", "role_swap")): 1}
    assert by_labels(samples, "racklife_node_cycle_phase_seconds_count", workflow="role_swap", outcome="done") == {
        (("phase", p),): 1 for p in ("drain_wait", "switch", "move", "retest", "join")}

    # The queue as the training pool sees it: the held job and its two GPUs.
    assert samples[("racklife_slurm_queue_readable", frozenset())] == 1
    assert by_labels(samples, "racklife_slurm_pending_jobs") == {(("partition", "training"), ("pool", "training")): 1}
    assert by_labels(samples, "racklife_slurm_pending_gpus") == {(("partition", "training"), ("pool", "training")): 2}
    assert by_labels(samples, "racklife_slurm_pending_reasons") == {
        (("partition", "training"), ("pool", "training"), ("reason", "JobHeldUser")): 1}
    # Nothing under repair, and no BMC call failed.
    assert by_labels(samples, "racklife_repair_breaker_open") == {}
    assert by_labels(samples, "racklife_repair_breaker_limit", pool="training") == {(): 1}
    assert by_labels(samples, "racklife_bmc_call_errors_total") == {}

    _reconciled_with_slurms_accounting(rec, since)
    _events_are_json_and_match_the_store(rec)
    _no_secret_anywhere(rec)


def _reconciled_with_slurms_accounting(rec: Recorded, since: datetime) -> None:
    env = slurm_env(rec.lab)

    def accounted() -> list[list[str]]:
        out = subprocess.run(["sacct", "-a", "-X", "-n", "-P", "-r", "training", "-S", since.astimezone().strftime("%Y-%m-%dT%H:%M:%S"),
                              "-o", "JobIDRaw,JobName,State,ElapsedRaw,AllocTRES"], env=env, capture_output=True,
                             text=True, timeout=30, check=True).stdout
        return [line.split("|") for line in out.splitlines() if line]

    deadline = time.monotonic() + 60
    while not [r for r in accounted() if r[1] == "sleep" and r[2] == "COMPLETED"]:  # slurmdbd is told after the end
        assert time.monotonic() < deadline, accounted()
        time.sleep(1)
    rows = accounted()
    gpus = {r[0]: int(t.split("=")[1]) for r in rows for t in r[4].split(",") if t.startswith("gres/gpu=")}
    expected = sum(gpus.get(r[0], 0) * int(r[3]) for r in rows) / 3600
    assert any(r[1].startswith("racklife-accept-") for r in rows), rows  # acceptance's multi-node round
    res = rec.racklife("report", "capacity", "--since", since.isoformat(), "--slurm-accounting", "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    doc = json.loads(res.stdout)
    r = doc["slurm_accounting"]["training"]
    assert r["partition"] == "training" and r["consistent"] is True and r["unexplained"] == 0, r
    assert r["allocated"] == pytest.approx(expected, abs=0.002), (r, rows)
    assert r["allocated"] >= 0.01  # the 8-GPU job's five seconds (0.011 GPU-hours) at least
    assert r["in_service"] == doc["pools"]["training"]["capacity"]["in_service"] > 0
    assert r["idle"] == pytest.approx(r["in_service"] - r["allocated"], abs=0.002)
    assert r["jobs"] == sum(1 for x in rows if gpus.get(x[0]) and int(x[3]) > 0), (r, rows)


def _store_transitions(lab: RunningLab) -> Counter[tuple[str, str]]:
    db = sqlite3.connect(Path(lab.env["RACKLIFE_HOME"]) / "racklife.sqlite")
    try:
        return Counter(db.execute("SELECT node, event FROM racklife_transitions").fetchall())
    finally:
        db.close()


def _events_are_json_and_match_the_store(rec: Recorded) -> None:
    docs: list[dict[str, Any]] = [json.loads(line) for line in rec.event_log.read_text().splitlines()]
    assert docs
    for doc in docs:
        assert set(events.REQUIRED) <= set(doc), doc
        assert doc["kind"] in ("transition", "step"), doc
    moved = Counter((d["node"], d["step"]) for d in docs if d["kind"] == "transition")
    assert moved == _store_transitions(rec.lab)  # one line per transition, the import's enrolments too
    steps = [d for d in docs if d["kind"] == "step"]
    assert steps and all(d["run_id"] for d in steps)
    assert {d["outcome"] for d in steps} <= {"ok", "error"}


def _no_secret_anywhere(rec: Recorded) -> None:
    lab = rec.lab
    credentials_file = lab.dir / "bmc-credentials"
    user, _, password = credentials_file.read_text().strip().partition(":")
    secrets = {"BMC password": password.encode(),
               "HTTP Basic": base64.b64encode(f"{user}:{password}".encode()),
               "slurmrestd JWT": lab.env["RACKLIFE_SLURM_JWT"].encode()}
    assert all(len(s) >= 8 for s in secrets.values())
    found = [(what, "output") for what, s in secrets.items() for text in rec.outputs if s in text.encode()]
    files = [p for p in [rec.event_log, *lab.root.rglob("*")] if p.is_file() and not p.is_symlink()
             and p != credentials_file]
    assert len(files) > 20  # the lab's logs, Slurm's state, the store
    for path in files:
        try:
            data = path.read_bytes()
        except OSError:
            continue  # a socket or a file gone since the walk
        found += [(what, str(path)) for what, s in secrets.items() if s in data]
    assert not found, found

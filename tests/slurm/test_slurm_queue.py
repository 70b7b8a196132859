"""Slurm's pending jobs as the pools see them: squeue's real output parsed, then a real cluster scraped.

The parser is held to a capture of Debian's squeue 22.05.8 in the lab
(tests/fixtures/slurm, SOURCES.md); the metrics to a real slurmctld with
jobs that must pend (held, or not to begin for an hour), scraped over HTTP
and parsed with prometheus_client.parser.
"""

from __future__ import annotations

import subprocess
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from lifecycle.drivers.errors import OperationFailed
from lifecycle.drivers.slurm.queue import parse_pending
from lifecycle.lab.slurm import LabSlurm
from lifecycle.model.inventory import Inventory
from lifecycle.service import metrics
from lifecycle.service.queue import SqueueReader, pool_queues
from lifecycle.store import Store
from tests.service.test_metrics import parse, scrape

CAPTURE = Path(__file__).resolve().parents[1] / "fixtures" / "slurm" / "lab_squeue-pending-22.05.8.txt"


def test_the_captured_squeue_output_parses_to_each_jobs_gpus_and_reason() -> None:
    jobs = parse_pending(CAPTURE.read_text())
    at = datetime(2026, 12, 1, 14, 54, 10, tzinfo=UTC)
    assert [(j.job_id, j.partitions, j.submitted, j.nodes, j.gpus, j.reason) for j in jobs] == [
        ("2", ("training",), at, 1, 4, "Resources"),  # --gres=gpu:4 on one node
        ("3", ("training",), at, 2, 3, "Priority"),  # --gpus=3 for the job
        ("4", ("training",), at, 1, 0, "JobHeldUser"),
    ]
    [q] = pool_queues(jobs, {"training": "training"}, datetime(2026, 12, 1, 15, 4, 10, tzinfo=UTC))
    assert (q.jobs, q.gpus, q.oldest_s, q.reasons) == (3, 7, 600.0, {"JobHeldUser": 1, "Priority": 1,
                                                                     "Resources": 1})


def test_later_slurm_spelling_and_several_partitions() -> None:
    [job] = parse_pending("7|train,flex|2026-12-01T10:00:00|2|gres/gpu:h100:8|N/A|ReqNodeNotAvail, UnavailableNodes:n1\n")
    assert (job.partitions, job.gpus, job.reason) == (("train", "flex"), 16, "ReqNodeNotAvail, UnavailableNodes:n1")
    queues = pool_queues([job], {"training": "train", "flex": "flex", "other": "batch"}, job.submitted)
    assert [(q.pool, q.jobs, q.gpus) for q in queues] == [("flex", 1, 16), ("other", 0, 0), ("training", 1, 16)]


@pytest.mark.parametrize("line", ["2|training|2026-12-01T14:54:10|1|N/A", "2|training|yesterday|1|N/A|N/A|Priority"])
def test_a_line_that_does_not_fit_is_an_error(line: str) -> None:
    with pytest.raises(OperationFailed, match="line 1"):
        parse_pending(line + "\n")


@pytest.mark.root
@pytest.mark.slow
def test_pending_jobs_on_a_real_cluster_are_scraped_per_pool(lab: LabSlurm, site16: Inventory,
                                                              tmp_path: Path) -> None:
    env = lab.env()

    def sbatch(*args: str) -> str:
        done = subprocess.run(["sbatch", "--parsable", *args, "--wrap", "sleep 1"], env=env, capture_output=True,
                              text=True, timeout=30, check=False)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    store = Store(f"sqlite:///{tmp_path / 'rl.sqlite'}")
    store.import_inventory(site16)
    submitted = time.time()
    jobs = [sbatch("-p", "train", "--hold", "-N2", "--gres=gpu:2"),
            sbatch("-p", "train", "--begin=now+3600", "--gpus=3"),
            sbatch("-p", "flex", "--hold", "-N1")]
    server = metrics.serve(store, "127.0.0.1", 0, queue=SqueueReader(env))
    # A missing slurm.conf makes squeue look for the controller in DNS for about a minute: it times out.
    broken = metrics.serve(store, "127.0.0.1", 0,
                           queue=SqueueReader(env | {"SLURM_CONF": str(tmp_path / "no.conf")}, timeout_s=1.0))
    try:
        time.sleep(1.0)
        samples, _ = parse(scrape(f"http://127.0.0.1:{server.port}/metrics"))
        down, _ = parse(scrape(f"http://127.0.0.1:{broken.port}/metrics"))
    finally:
        server.close()
        broken.close()
        subprocess.run(["scancel", *jobs], env=env, check=False, timeout=30)
        store.close()
    elapsed = time.time() - submitted

    def value(name: str, **labels: str) -> float | None:
        return samples.get((name, frozenset(labels.items())))

    assert value("racklife_slurm_queue_readable") == 1
    assert value("racklife_slurm_pending_jobs", pool="training", partition="train") == 2
    assert value("racklife_slurm_pending_jobs", pool="flex", partition="flex") == 1
    assert value("racklife_slurm_pending_gpus", pool="training", partition="train") == 7  # 2 nodes x 2, and 3
    assert value("racklife_slurm_pending_gpus", pool="flex", partition="flex") == 0
    assert value("racklife_slurm_pending_reasons", pool="training", partition="train", reason="JobHeldUser") == 1
    assert value("racklife_slurm_pending_reasons", pool="training", partition="train", reason="BeginTime") == 1
    oldest = value("racklife_slurm_oldest_pending_seconds", pool="training", partition="train")
    assert oldest is not None and 0.5 <= oldest <= elapsed + 1.5  # SubmitTime has whole seconds
    # The inference pool is Kubernetes': not a Slurm queue.
    assert not [k for k in samples if k[0].startswith("racklife_slurm_pending") and ("pool", "inference") in k[1]]
    # squeue timing out: said so, and no queue series rather than zeros; the store's metrics still there.
    assert down[("racklife_slurm_queue_readable", frozenset())] == 0
    assert not [k for k in down if k[0].startswith("racklife_slurm_pending")]
    assert ("racklife_nodes", frozenset({"pool": "training", "state": "enrolled"}.items())) in down


@pytest.mark.root
@pytest.mark.slow
def test_report_capacity_against_a_slurm_without_accounting_is_exit_6(lab: LabSlurm, site16: Inventory,
                                                                       tmp_path: Path) -> None:
    """The lab's Slurm keeps no accounting (no slurmdbd): the reconciliation says so and exits 6, no traceback."""
    import json
    import os
    import sys

    url = f"sqlite:///{tmp_path / 'rl.sqlite'}"
    store = Store(url)
    store.import_inventory(site16)
    store.close()
    env = lab.env() | {"RACKLIFE_DB": url, "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
    done = subprocess.run([sys.executable, "-c", "from lifecycle.cli import main; main()", "report", "capacity",
                           "--since", "1h", "--slurm-accounting", "--json"], env=env, capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 6, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    assert "accounting storage is disabled" in json.loads(done.stdout)["error"]["message"], done.stdout

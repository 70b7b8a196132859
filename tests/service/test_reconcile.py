"""The capacity ledger against Slurm's accounting: in service against allocated GPU-hours, explained.

The accounting side is ``sacct`` output in Slurm 22.05's documented
``--parsable2`` layout (tests/fixtures/slurm, SOURCES.md: constructed; the
lab's real slurmdbd is met in tests/e2e/test_observability_lab.py); the ledger side is the store of test_ledger.py
(r01-n01, 8 GPUs, in service from T0+2h to T0+6h: 32 GPU-hours).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from datetime import datetime
from pathlib import Path

import pytest

from lifecycle.drivers.errors import OperationFailed
from lifecycle.drivers.slurm.accounting import JobAllocation, parse_allocations, sacct_argv
from lifecycle.service.ledger import capacity_ledger
from lifecycle.service.reconcile import reconcile
from lifecycle.store import Store
from tests.service.test_ledger import T0, H, store  # noqa: F401 - the fixture

SACCT = Path(__file__).resolve().parents[1] / "fixtures" / "slurm" / "CONSTRUCTED_sacct-allocations.txt"


@pytest.fixture(autouse=True)
def utc(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """sacct's times are local: the fixture's are written in UTC."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def test_sacct_lines_give_each_jobs_gpus_and_hours() -> None:
    jobs = parse_allocations(SACCT.read_text())
    assert [(j.job_id, j.state, j.gpus, j.start is None, j.end is None) for j in jobs] == [
        ("101", "COMPLETED", 8, False, False), ("102", "CANCELLED by 0", 4, False, False),
        ("103", "CANCELLED by 0", 8, True, False), ("104", "COMPLETED", 0, False, False),
        ("105", "RUNNING", 2, False, True)]
    hours = {j.job_id: j.gpu_hours(T0, T0 + 10 * H) for j in jobs}
    assert hours == {"101": 16.0, "102": 2.0, "103": 0.0, "104": 0.0, "105": pytest.approx(2 * 4.25)}
    assert jobs[0].gpu_hours(T0 + 3 * H, T0 + 10 * H) == 8.0  # clipped to the window
    argv = sacct_argv("train", T0, T0 + 10 * H)
    assert argv[argv.index("--starttime") + 1] == "2026-11-20T00:00:00" and "--allocations" in argv


def test_a_site_tracking_only_typed_gpus_has_them_summed() -> None:
    [job] = parse_allocations("7|train|COMPLETED|2026-11-20T02:00:00|2026-11-20T03:00:00|"
                              "billing=8,cpu=8,gres/gpu:a100=2,gres/gpu:h100=4,node=1\n")
    assert job.gpus == 6


@pytest.mark.parametrize("line", ["101|train|COMPLETED|2026-11-20T02:00:00|billing=1",
                                  "101|train|COMPLETED|yesterday|Unknown|gres/gpu=8"])
def test_a_line_that_does_not_fit_is_an_error(line: str) -> None:
    with pytest.raises(OperationFailed, match="line 1"):
        parse_allocations(line + "\n")


def read(text: str) -> object:
    def reader(partition: str, since: datetime, until: datetime) -> Sequence[JobAllocation]:
        assert partition == "train" and until > since
        return parse_allocations(text)
    return reader


def test_allocated_within_in_service_leaves_the_rest_idle(store: Store) -> None:  # noqa: F811
    ledger = capacity_ledger(store, T0, T0 + 6 * H)  # the running job counted to the window's end
    [r] = reconcile(ledger, {"training": "train"}, read(SACCT.read_text()))  # type: ignore[arg-type]
    assert (r.in_service, r.allocated, r.jobs) == (32.0, pytest.approx(16 + 2 + 0.5), 3)
    assert (r.idle, r.during_drain, r.unexplained, r.consistent) == (13.5, 0.0, 0.0, True)
    assert r.explanation == (
        "Slurm allocated 18.50 GPU-hours to 3 job(s) in partition train; racklife had 32.00 in service (57.8%).",
        "13.50 GPU-hours in service were held by no job (idle, or waiting for jobs that fit).")


def test_more_allocated_than_racklife_served_is_a_disagreement(store: Store) -> None:  # noqa: F811
    extra = "106|train|COMPLETED|2026-11-20T00:00:00|2026-11-20T06:00:00|billing=8,cpu=8,gres/gpu=8,node=1\n"
    ledger = capacity_ledger(store, T0, T0 + 6 * H)
    [r] = reconcile(ledger, {"training": "train"}, read(SACCT.read_text() + extra))  # type: ignore[arg-type]
    # r01-n01 burnt in for a minute of the window (8 GPUs): that much of it is racklife's own testing.
    assert (r.allocated, r.testing, r.consistent) == (pytest.approx(66.5), pytest.approx(8 / 60), False)
    assert r.unexplained == pytest.approx(34.5 - 8 / 60, abs=0.001)
    assert f"{r.unexplained:.2f} GPU-hours Slurm allocated on capacity racklife did not count as serving" in r.explanation[-1]
    assert r.to_json()["consistent"] is False


def test_jobs_finishing_during_a_drain_are_explained_not_a_disagreement() -> None:
    from lifecycle.service.reconcile import Reconciliation

    r = Reconciliation("training", "train", in_service=10.0, draining=4.0, testing=0.0, allocated=12.0, jobs=2)
    assert (r.idle, r.during_drain, r.unexplained, r.consistent) == (0.0, 2.0, 0.0, True)
    assert r.explanation[-1] == "2.00 GPU-hours ran on nodes racklife was draining (a drain lets running jobs finish)."
    r = Reconciliation("training", "train", in_service=10.0, draining=1.0, testing=2.0, allocated=12.5, jobs=3)
    assert (r.during_drain, r.during_tests, r.unexplained, r.consistent) == (1.0, 1.5, 0.0, True)
    assert r.explanation[-1] == ("1.50 GPU-hours were racklife's own acceptance jobs on nodes it was testing "
                                 "(burning_in).")
    r = Reconciliation("training", "train", in_service=10.0, draining=1.0, testing=2.0, allocated=14.0, jobs=3)
    assert (r.unexplained, r.consistent) == (1.0, False)

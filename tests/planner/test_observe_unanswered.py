"""A dead source is retried once per hold, not on every observation, and a wave stops waiting for it.

Measured before: `racklife apply` against a dead slurmctld spent 261 s re-reading it (20 reads: scontrol's
9 s against a closed port, four attempts with backoff per observation, four observations and the final
plan); 69 s (6 reads) after. Here the peer is real: scontrol against a slurm.conf whose controller port
nothing listens on (``MessageTimeout=1``, so each refused read takes milliseconds); the hold's clock is
virtual.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from lifecycle.drivers.bmc.base import BmcDriver
from lifecycle.drivers.slurm.driver import SlurmDriver
from lifecycle.drivers.slurm.runner import CommandRunner
from lifecycle.model.inventory import BmcSpec, Inventory
from lifecycle.planner import apply, observe
from lifecycle.planner.apply import ApplySettings, decide
from lifecycle.planner.observed import Source
from lifecycle.store import Store
from lifecycle.workflows.retry import Retrier, RetryPolicy, using
from tests.bmc.ipmi_fixtures import Lab, ipmi_lab_fixture  # noqa: F401 - fixture
from tests.planner.conftest import example_site


@pytest.fixture
def inv(repo_dir: Path) -> Inventory:
    """The example site, one node, in a Slurm pool."""
    return example_site(repo_dir, "training", {"scheduler": "slurm", "partition": "train"}, count=1)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The hold's clock, moved by the test (tests/conftest.py empties the record of failing sources)."""
    now = [1000.0]
    monkeypatch.setattr(observe.UNANSWERED, "clock", lambda: now[0])
    return now


def _dead_slurm(tmp_path: Path, port: int) -> tuple[SlurmDriver, CommandRunner]:
    """The real Slurm client, its controller on ``port``, where nothing listens."""
    conf = tmp_path / "slurm.conf"
    conf.write_text(f"ClusterName=dead\nSlurmctldHost=localhost\nSlurmctldPort={port}\nMessageTimeout=1\n"
                    "NodeName=gpu-r01-u01 CPUs=1\nPartitionName=train Nodes=gpu-r01-u01\n")
    runner = CommandRunner(env={"SLURM_CONF": str(conf), "PATH": "/usr/bin:/bin"}, timeout_s=30)
    return SlurmDriver(runner), runner


def _sources(lab: Lab, slurm: SlurmDriver) -> observe.Sources:
    def bmc(_node: str, _spec: BmcSpec) -> BmcDriver:
        return lab.driver()

    def unused() -> observe.KubeReader:
        raise AssertionError("no Kubernetes pool here")

    return observe.Sources(bmc, lambda: slurm, unused, firmware=False)


def test_a_dead_slurmctld_is_retried_once_per_hold_and_an_answer_ends_it(
        tmp_path: Path, store: Store, inv: Inventory, ipmi_lab: Lab, clock: list[float],
        free_port: Callable[[], int]) -> None:
    store.import_inventory(inv)
    rec = store.get(inv.nodes[0].name)
    slurm, runner = _dead_slurm(tmp_path, free_port())
    waited: list[float] = []
    with using(Retrier(RetryPolicy(attempts=3, backoff_s=2.0), waited.append)):
        [first] = observe.observe(store, [rec], _sources(ipmi_lab, slurm), {rec.name: "slurm"})
        assert "unable to contact slurm controller" in first.errors[Source.SLURM].lower()
        assert waited == [2.0, 4.0] and runner.calls == 3
        assert observe.UNANSWERED.failing() == ["slurm"]

        clock[0] += observe.UNANSWERED_HOLD_S - 1  # still held: one read, no backoff
        [second] = observe.observe(store, [rec], _sources(ipmi_lab, slurm), {rec.name: "slurm"})
        assert Source.SLURM in second.errors and Source.BMC not in second.errors
        assert waited == [2.0, 4.0] and runner.calls == 4

        clock[0] += 2  # the hold ran out (it counts from the failure of the whole policy): retried again
        observe.observe(store, [rec], _sources(ipmi_lab, slurm), {rec.name: "slurm"})
        assert waited == [2.0, 4.0, 2.0, 4.0] and runner.calls == 7
        assert observe.UNANSWERED.failing() == ["slurm"]

    # A read that answers ends the hold: the BMC here answered every time and was never held.
    assert "bmc:" + rec.name not in observe.UNANSWERED.failing()


@pytest.mark.parametrize(("patience_s", "reads"), [(3600.0, 4), (0.0, 2)])
def test_a_wave_looks_again_at_a_dead_source_only_within_its_patience(
        tmp_path: Path, store: Store, inv: Inventory, ipmi_lab: Lab, clock: list[float],
        free_port: Callable[[], int], monkeypatch: pytest.MonkeyPatch,
        patience_s: float, reads: int) -> None:
    store.import_inventory(inv)
    slurm, runner = _dead_slurm(tmp_path, free_port())
    monkeypatch.setattr(apply, "UNREADABLE_PAUSES_S", (0.01, 0.01))
    monkeypatch.setattr(apply, "UNREADABLE_PATIENCE_S", patience_s)
    waited: list[float] = []
    with using(Retrier(RetryPolicy(attempts=2, backoff_s=5.0), waited.append)):
        wave = decide(store, inv, None, _sources(ipmi_lab, slurm), ApplySettings("test"), frozenset(), frozenset())
    assert wave.action is None
    assert wave.blocked[inv.nodes[0].name].startswith("unreadable: slurm: ")
    # The first look takes the policy's two attempts; each look after a pause is one read (held), no backoff.
    assert waited == [5.0]
    assert runner.calls == reads  # within the patience: a look after each of the two pauses; without: none

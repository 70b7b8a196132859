"""Role-swap and upgrade phase times: the history line node_cycle writes, read back into metrics."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from lifecycle.model.states import Actor
from lifecycle.service import cycles, metrics
from lifecycle.store import Store
from lifecycle.workflows.node_cycle import CycleOutcome, summary
from tests.service import scripted
from tests.service.test_metrics import parse

SWAP = CycleOutcome("r01-n01", ok=True, state="in_service", reason="moved to inference",
                    phases={"drain_wait": 12.0, "switch": 3.5, "retest": 61.0, "join": 2.25})
FAILED = CycleOutcome("r01-n04", ok=False, state="quarantined", reason="retest failed: nccl",
                      phases={"drain_wait": 4.0, "image": 700.0, "retest": 30.0, "rollback": 1.5})


def test_the_history_line_round_trips() -> None:
    assert cycles.parse(f"run r1: {summary(SWAP)}") == ("done", {"drain_wait": 12.0, "switch": 3.5,
                                                                  "retest": 61.0, "join": 2.2})  # one decimal
    assert cycles.parse(f"run r2: {summary(FAILED)}") == ("failed", FAILED.phases)
    assert cycles.parse("imported from site.yaml") is None
    assert cycles.parse("run r3: done; drain wait twelve s; x") is None


@pytest.fixture
def store(repo_dir: Path, tmp_path: Path) -> Iterator[Store]:
    s = scripted.build(repo_dir, f"sqlite:///{tmp_path / 'rl.sqlite'}")
    s.record_change("r01-n01", "role-swap", "training", "inference", Actor.WORKFLOW, f"run rs1: {summary(SWAP)}")
    for kind in ("image", "firmware"):  # one upgrade of two changes writes two rows: one cycle
        s.record_change("r01-n04", kind, None, "x", Actor.WORKFLOW, f"run up1: {summary(FAILED)}")
    s.record_change("r01-n07", "role-swap", "inference", "training", Actor.WORKFLOW, "run rs2: garbled")
    s.record_change("r01-n07", "pool", "inference", "training", Actor.OPERATOR, "inventory import")
    yield s
    s.close()


def test_phase_histograms_and_counts(store: Store) -> None:
    samples, types = parse(metrics.render(store, lambda: scripted.NOW))
    assert types["racklife_node_cycle_phase_seconds"] == "histogram"

    def v(name: str, **labels: str) -> float | None:
        return samples.get((name, frozenset(labels.items())))
    assert v("racklife_node_cycles_total", workflow="role_swap", outcome="done") == 1
    assert v("racklife_node_cycles_total", workflow="role_swap", outcome="unreadable") == 1
    assert v("racklife_node_cycles_total", workflow="upgrade", outcome="failed") == 1
    hist = "racklife_node_cycle_phase_seconds"
    assert v(f"{hist}_sum", workflow="role_swap", phase="retest", outcome="done") == 61.0
    assert v(f"{hist}_bucket", workflow="role_swap", phase="retest", outcome="done", le="60.0") == 0
    assert v(f"{hist}_bucket", workflow="role_swap", phase="retest", outcome="done", le="120.0") == 1
    assert v(f"{hist}_count", workflow="upgrade", phase="image", outcome="failed") == 1
    assert v(f"{hist}_count", workflow="upgrade", phase="rollback", outcome="failed") == 1
    assert not [k for k in samples if k[0] == f"{hist}_count" and ("outcome", "unreadable") in k[1]]

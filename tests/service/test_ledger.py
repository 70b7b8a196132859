"""The capacity ledger: GPU-hours per pool and state from the transitions, over a window."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

from lifecycle.model.inventory import load_inventory
from lifecycle.model.states import Actor
from lifecycle.service.ledger import capacity_ledger
from lifecycle.store import AcceptanceRecord, Store
from lifecycle.store import db as dbm

T0 = datetime(2026, 11, 20, 0, 0, tzinfo=UTC)
H = timedelta(hours=1)
RACKLIFE = [sys.executable, "-c", "from lifecycle.cli import main; main()"]


@pytest.fixture
def store(repo_dir: Path, tmp_path: Path) -> Store:
    """r01-n01 (8 GPUs): enrolled at T0, in service at T0+2h, lending at T0+6h, lent at T0+6.5h."""
    s = Store(f"sqlite:///{tmp_path / 'rl.sqlite'}")
    s.import_inventory(load_inventory(repo_dir / "examples" / "site-h100-2rack.yaml"))
    node = "r01-n01"
    for e in ["inspect", "inspect_done", "provision", "provision_done", "burn_in", "accept"]:
        s.transition(node, e, Actor.WORKFLOW, e, run_id="r")
    now = datetime.now(UTC)
    s.add_acceptance_record(AcceptanceRecord("acc", node, True, "quick", "h100-sxm-8", now, now + 30 * 24 * H,
                                             "policy:test", "r", {}, None, None))
    s.transition(node, "join", Actor.WORKFLOW, "join", "r", acceptance_record="acc")
    for e in ["join_done", "lend", "lend_done"]:
        s.transition(node, e, Actor.WORKFLOW, e, run_id="r")
    at = [T0 + timedelta(minutes=i) for i in range(8)] + [T0 + 2 * H, T0 + 6 * H, T0 + 6.5 * H]
    t = dbm.transitions
    with s.engine.begin() as conn:
        ids = [r.id for r in conn.execute(sa.select(t.c.id).where(t.c.node == node).order_by(t.c.id))]
        assert len(ids) == len(at)
        for i, when in zip(ids, at, strict=True):
            conn.execute(sa.update(t).where(t.c.id == i).values(at=when))
        # every other node was enrolled at T0 + 9 h
        conn.execute(sa.update(t).where(t.c.node != node).values(at=T0 + 9 * H))
    yield s  # type: ignore[misc]
    s.close()


def test_gpu_hours_by_capacity_and_state(store: Store) -> None:
    ledger = capacity_ledger(store, T0, T0 + 10 * H)
    training = ledger.by_capacity["training"]
    # r01-n01: 2 h bring-up, 4 h in service, 0.5 h lending + 3.5 h lent; 11 other training nodes enrolled 1 h
    assert training["bringup"] == pytest.approx(8 * 2 + 11 * 8 * 1)
    assert training["in_service"] == pytest.approx(8 * 4)
    assert training["lent"] == pytest.approx(8 * 4)
    assert ledger.moving("training") == pytest.approx(8 * 0.5)
    assert ledger.by_state["training"]["lent"] == pytest.approx(8 * 3.5)
    assert ledger.by_capacity["inference"]["bringup"] == pytest.approx(4 * 8 * 1)
    assert ledger.by_capacity["spare"] == dict.fromkeys(training, 0.0)


def test_the_window_cuts_the_intervals(store: Store) -> None:
    ledger = capacity_ledger(store, T0 + 5 * H, T0 + 7 * H)
    training = ledger.by_capacity["training"]
    assert training["in_service"] == pytest.approx(8 * 1)
    assert training["lent"] == pytest.approx(8 * 1)
    assert training["bringup"] == 0
    with pytest.raises(ValueError, match="window is empty"):
        capacity_ledger(store, T0 + 7 * H, T0 + 5 * H)


def test_a_pool_change_moves_the_hours_after_it(store: Store) -> None:
    with store.engine.begin() as conn:
        serial = conn.execute(sa.select(dbm.nodes.c.serial).where(dbm.nodes.c.name == "r01-n01")).scalar_one()
        conn.execute(sa.update(dbm.nodes).where(dbm.nodes.c.name == "r01-n01").values(pool="inference"))
        conn.execute(sa.insert(dbm.node_changes).values(node="r01-n01", serial=serial, kind="pool", old="training",
                                                        new="inference", actor="operator", reason="test",
                                                        at=T0 + 4 * H))
    ledger = capacity_ledger(store, T0, T0 + 10 * H)
    assert ledger.by_capacity["training"]["in_service"] == pytest.approx(8 * 2)
    assert ledger.by_capacity["inference"]["in_service"] == pytest.approx(8 * 2)
    assert ledger.by_capacity["inference"]["lent"] == pytest.approx(8 * 4)


def test_report_capacity_command(store: Store) -> None:
    env = os.environ | {"RACKLIFE_DB": store.url}
    done = subprocess.run([*RACKLIFE, "report", "capacity", "--since", T0.isoformat(), "--until",
                           (T0 + 10 * H).isoformat(), "--json"], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["unit"] == "GPU-hours"
    assert doc["pools"]["training"]["capacity"]["in_service"] == 32
    assert doc["pools"]["training"]["moving"] == 4
    bad = subprocess.run([*RACKLIFE, "report", "capacity", "--since", "last tuesday"], env=env,
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "--since 'last tuesday'" in bad.stderr and "Traceback" not in bad.stderr

"""The store: idempotent, all-or-nothing import; transitions only through the state machine."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

from lifecycle.model.inventory import load_inventory
from lifecycle.model.states import Actor, IllegalTransition, State
from lifecycle.store import AcceptanceRecord, NodeNotFound, Store, StoreError
from lifecycle.store import db as dbm


@pytest.fixture
def store(tmp_path: Path) -> Store:
    s = Store(f"sqlite:///{tmp_path / 'rl.sqlite'}")
    yield s  # type: ignore[misc]
    s.close()


@pytest.fixture
def inv(repo_dir: Path):  # type: ignore[no-untyped-def]
    return load_inventory(repo_dir / "examples" / "site-h100-2rack.yaml")


def dump(store: Store) -> list[tuple[object, ...]]:
    with store.engine.connect() as conn:
        rows: list[tuple[object, ...]] = []
        for t in (dbm.nodes, dbm.transitions, dbm.acceptance_records):
            rows += [tuple(r) for r in conn.execute(sa.select(t))]
    return rows


def walk_to(store: Store, node: str, events: list[str]) -> None:
    for e in events:
        store.transition(node, e, Actor.WORKFLOW, f"test {e}")


def test_sqlite_is_in_wal_mode(store: Store) -> None:
    with store.engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"


def test_import_is_idempotent(store: Store, inv) -> None:  # type: ignore[no-untyped-def]
    first = store.import_inventory(inv)
    assert len(first.added) == 16
    again = store.import_inventory(inv)
    assert again.added == [] and again.updated == [] and len(again.unchanged) == 16
    assert all(r.state == State.ENROLLED for r in store.nodes())
    assert len(store.history("r01-n01")) == 1


def test_changed_node_in_service_refuses_whole_import(store: Store, inv) -> None:  # type: ignore[no-untyped-def]
    store.import_inventory(inv)
    walk_to(store, "r01-n01", ["inspect", "inspect_done", "provision", "provision_done", "burn_in", "accept"])
    rec = _record(store, "r01-n01", passed=True)
    store.transition("r01-n01", "join", Actor.WORKFLOW, "join", acceptance_record=rec.id)
    store.transition("r01-n01", "join_done", Actor.WORKFLOW, "joined")
    before = dump(store)
    nodes = [n.model_copy(update={"pool": "inference"}) if n.name in ("r01-n01", "r01-n02") else n
             for n in inv.nodes]
    changed = inv.model_copy(update={"nodes": nodes})
    with pytest.raises(StoreError, match="r01-n01"):
        store.import_inventory(changed)
    assert dump(store) == before  # r01-n02's change was not written either


def _record(store: Store, node: str, passed: bool, age: timedelta = timedelta(0),
            valid: timedelta = timedelta(days=30)) -> AcceptanceRecord:
    now = datetime.now(UTC) - age
    rec = AcceptanceRecord(f"acc-{node}-{passed}-{age.total_seconds()}", node, passed, "quick",
                           "h100-sxm-8", now, now + valid, "policy:test", None, {}, None, None)
    store.add_acceptance_record(rec)
    return rec


def test_transitions_record_who_why_and_run(store: Store, inv) -> None:  # type: ignore[no-untyped-def]
    store.import_inventory(inv)
    t = store.transition("r01-n02", "inspect", Actor.OPERATOR, "first look", run_id="wf-1")
    assert (t.source, t.target) == (State.ENROLLED, State.INSPECTING)
    hist = store.history("r01-n02")
    assert [(h.event, h.actor, h.reason, h.run_id) for h in hist][-1] == (
        "inspect", Actor.OPERATOR, "first look", "wf-1")
    assert store.get("r01-n02").state == State.INSPECTING


def test_replayed_step_is_not_recorded_twice(store: Store, inv) -> None:  # type: ignore[no-untyped-def]
    store.import_inventory(inv)
    store.transition("r01-n03", "inspect", Actor.WORKFLOW, "inspect", run_id="wf-9")
    again = store.transition("r01-n03", "inspect", Actor.WORKFLOW, "inspect", run_id="wf-9")
    assert again.target == State.INSPECTING
    assert len(store.history("r01-n03")) == 2
    with pytest.raises(IllegalTransition):  # a different run may not repeat it
        store.transition("r01-n03", "inspect", Actor.WORKFLOW, "inspect", run_id="wf-10")


def test_illegal_transition_changes_nothing(store: Store, inv) -> None:  # type: ignore[no-untyped-def]
    store.import_inventory(inv)
    before = dump(store)
    with pytest.raises(IllegalTransition):
        store.transition("r01-n01", "join_done", Actor.WORKFLOW, "skip ahead")
    with pytest.raises(NodeNotFound):
        store.transition("nope", "inspect", Actor.WORKFLOW, "x")
    assert dump(store) == before


@pytest.mark.parametrize(("passed", "age", "valid", "why"), [
    (False, timedelta(0), timedelta(days=30), "did not pass"),
    (True, timedelta(days=40), timedelta(days=30), "expired"),
])
def test_join_gate_fails_closed(store: Store, inv, passed: bool, age: timedelta,  # type: ignore[no-untyped-def]
                                valid: timedelta, why: str) -> None:
    store.import_inventory(inv)
    walk_to(store, "r02-n01", ["inspect", "inspect_done", "provision", "provision_done", "burn_in", "accept"])
    rec = _record(store, "r02-n01", passed, age, valid)
    with pytest.raises(IllegalTransition, match=why):
        store.transition("r02-n01", "join", Actor.WORKFLOW, "join", acceptance_record=rec.id)
    assert store.get("r02-n01").state == State.ACCEPTED
    assert store.valid_acceptance("r02-n01") is None


def test_join_gate_refuses_evidence_older_than_the_build(store: Store, inv) -> None:  # type: ignore[no-untyped-def]
    store.import_inventory(inv)
    walk_to(store, "r02-n02", ["inspect", "inspect_done", "provision"])
    rec = _record(store, "r02-n02", True, age=timedelta(hours=1))
    walk_to(store, "r02-n02", ["provision_done", "burn_in", "accept"])
    with pytest.raises(IllegalTransition, match="predates"):
        store.transition("r02-n02", "join", Actor.WORKFLOW, "join", acceptance_record=rec.id)


def test_the_operator_of_a_run_names_its_moves_and_its_childrens(tmp_path: Path, repo_dir: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from lifecycle.store import operators

    monkeypatch.setenv(operators.ENV, "carol")
    store = Store(f"sqlite:///{tmp_path / 'op.sqlite'}")
    try:
        store.import_inventory(load_inventory(repo_dir / "examples" / "site-h100-2rack.yaml"))
        store.record_operator("run-1", "alice")
        store.record_operator("run-1", "mallory")  # once: a recovered run keeps who started it
        store.transition("r01-n01", "inspect", Actor.WORKFLOW, "test", run_id="run-1")
        store.transition("r01-n02", "inspect", Actor.WORKFLOW, "test", run_id="run-1-3")  # a child run
        store.transition("r01-n03", "inspect", Actor.WORKFLOW, "test", run_id="other")  # none recorded
        who = {n: store.history(n)[-1].operator for n in ("r01-n01", "r01-n02", "r01-n03")}
        assert who == {"r01-n01": "alice", "r01-n02": "alice", "r01-n03": "carol"}
        assert store.history("r01-n01")[0].operator == "carol"  # the import's enrolment
        store.record_change("r01-n01", "firmware", None, "BMC", Actor.WORKFLOW, "test", run_id="run-1")
        assert store.changes("r01-n01")[-1].operator == "alice"
    finally:
        store.close()

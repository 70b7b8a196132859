"""One run per node, across real processes on one SQLite store with real DBOS.

A run holds its nodes; a second process's run wanting one of them is refused
with the holder's id while the holder lives, and the holder's runs are left
alone. Once the holder is SIGKILLed, the next process of its role recovers and
finishes its run: leases released, nothing PENDING. A killed run this code
cannot replay (another application version) is cancelled, its node put where
the state machine says a failed attempt lands, and its lease released.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from dbos import DBOSClient

from lifecycle.model.inventory import load_inventory
from lifecycle.model.states import State
from lifecycle.store import Store, leases, operators

APP = Path(__file__).with_name("lease_app.py")


def _app(url: str, work: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, str(APP), url, str(work), *args], env=os.environ | {"RACKLIFE_DB": url} | (env or {}),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _holding(work: Path, proc: subprocess.Popen[str], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not (work / f"holding-{proc.pid}").exists():
        assert proc.poll() is None, proc.communicate()[0]
        assert time.monotonic() < deadline, "the run never reached its hold step"
        time.sleep(0.05)


def _kill(proc: subprocess.Popen[str]) -> str:
    proc.send_signal(signal.SIGKILL)
    out, _ = proc.communicate(timeout=30)
    return out


def _finish(proc: subprocess.Popen[str], timeout: float = 120) -> str:
    out, _ = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, out
    assert "Traceback" not in out, out
    return out


def _status(url: str, run_id: str) -> str:
    client = DBOSClient(system_database_url=url)
    try:
        [s] = client.list_workflows(workflow_ids=[run_id])
        return str(s.status)
    finally:
        client.destroy()


@pytest.fixture
def setup(tmp_path: Path, repo_dir: Path) -> Iterator[tuple[str, Path, Store]]:
    url = f"sqlite:///{tmp_path / 'rl.sqlite'}"
    store = Store(url)
    store.import_inventory(load_inventory(repo_dir / "examples" / "site-h100-2rack.yaml"))
    work = tmp_path / "work"
    work.mkdir()
    yield url, work, store
    store.close()


def test_held_node_refuses_a_second_run_then_a_killed_holder_is_finished_once(
        setup: tuple[str, Path, Store]) -> None:
    url, work, store = setup
    first = _app(url, work, "start", "wf-a", "r01-n01", "r01-n02", env={"RACKLIFE_OPERATOR": "alice"})
    try:
        _holding(work, first)
        second = _finish(_app(url, work, "start", "wf-b", "r01-n02"))
        refused = json.loads(second.split("result ", 1)[1])["refused"]
        assert list(refused) == ["r01-n02"] and "held by run wf-a" in refused["r01-n02"], second
        assert "recovering" not in second  # the holder is alive: its run is not taken from it
    finally:
        _kill(first)
    assert store.get("r01-n01").state == State.INSPECTING
    assert _status(url, "wf-a") == "PENDING"

    (work / "go").touch()
    third = _finish(_app(url, work, "recover", env={"RACKLIFE_OPERATOR": "bob"}))
    assert "recovered wf-a" in third and '"done": ["r01-n01", "r01-n02"]' in third, third
    # Who asked stays with the run: the moves made after its recovery by bob's process are alice's too.
    moves = [t for t in store.history("r01-n01") if t.run_id == "wf-a"]
    assert [t.event for t in moves] == ["inspect", "inspect_done"] and {t.operator for t in moves} == {"alice"}
    assert store.run_operator("wf-a") == "alice"
    # A write no run makes (the import's enrolment) names this process's operator.
    enrolled = store.history("r01-n01")[0]
    assert enrolled.event == "enroll" and enrolled.operator == operators.current() and enrolled.operator
    assert _status(url, "wf-a") == "SUCCESS"
    assert leases.holders(store) == {}
    assert {store.get(n).state for n in ("r01-n01", "r01-n02")} == {State.AVAILABLE}
    assert leases.executors(store) == []  # every process ended or was found dead and retired


def test_a_killed_run_of_another_version_is_cancelled_and_its_node_restored(
        setup: tuple[str, Path, Store]) -> None:
    url, work, store = setup
    old = _app(url, work, "start", "wf-old", "r01-n03", env={"RACKLIFE_TEST_APP_VERSION": "racklife-0.0-test"})
    try:
        _holding(work, old)
    finally:
        _kill(old)
    assert store.get("r01-n03").state == State.INSPECTING
    assert leases.holders(store)["r01-n03"].run_id == "wf-old"
    out = _finish(_app(url, work, "recover"))
    assert "run wf-old cannot be recovered (started by racklife version racklife-0.0-test" in out, out
    assert "r01-n03 -> inspect_failed" in out, out
    assert _status(url, "wf-old") == "CANCELLED"
    assert store.get("r01-n03").state == State.INSPECT_FAILED
    assert store.history("r01-n03")[-1].run_id == "wf-old"
    assert leases.holders(store) == {}
    # A second sweep finds nothing left to do.
    assert "cannot be recovered" not in _finish(_app(url, work, "recover"))


def _cut_off_one(url: str, work: Path, store: Store, node: str) -> str:
    """A one-node command killed while its run holds ``node``: that run's id."""
    first = _app(url, work, "one", node)
    try:
        _holding(work, first)
        return leases.holders(store)[node].run_id
    finally:
        _kill(first)


def _result(out: str) -> Any:
    """The ``result JSON`` line a one-node command printed."""
    return json.loads(out.split("result ", 1)[1].splitlines()[0])


def test_a_run_queued_again_by_a_process_that_died_before_taking_it_is_finished_not_doubled(
        setup: tuple[str, Path, Store]) -> None:
    """DBOS recovers a dead process's run by putting it back on its internal queue (ENQUEUED); a process
    killed before it took the run from there left it ENQUEUED under the first dead executor. The next
    one-node command did not count it as recovered and started a second run, refused by the node's lease
    (seen in the role-swap lab test: a controller killed one second after it began recovering)."""
    url, work, store = setup
    cut_off = _cut_off_one(url, work, store, "r01-n06")
    # What a second process's recovery did before it was killed: the run back on DBOS's queue, not taken.
    engine = sa.create_engine(url)
    try:
        with engine.begin() as conn:
            done = conn.execute(sa.text("UPDATE workflow_status SET status = 'ENQUEUED', queue_name = "
                                        "'_dbos_internal_queue', started_at_epoch_ms = NULL WHERE "
                                        "workflow_uuid = :id AND status = 'PENDING'"), {"id": cut_off})
            assert done.rowcount == 1
    finally:
        engine.dispose()
    (work / "go").touch()
    out = _finish(_app(url, work, "one", "r01-n06"))
    assert f"recovering run {cut_off}" in out and f"finishing hold_node run {cut_off}" in out, out
    result = _result(out)
    assert result == {"done": ["r01-n06"], "run": cut_off}, out  # that run, finished; no second one
    assert _status(url, cut_off) == "SUCCESS" and leases.holders(store) == {}


def test_a_killed_run_whose_arguments_cannot_be_decoded_is_cancelled_and_recovery_goes_on(
        setup: tuple[str, Path, Store]) -> None:
    """DBOS gives back a run's arguments as text when it cannot decode them (their class is gone): recovery
    indexed that text and stopped with a TypeError, so no run of any process was recovered after it."""
    url, work, store = setup
    opaque = Path(__file__).with_name("opaque_app.py")
    env = os.environ | {"RACKLIFE_DB": url}
    first = subprocess.Popen([sys.executable, str(opaque), url, str(work), "start", "wf-opaque", "r01-n04"], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        _holding(work, first)
    finally:
        _kill(first)
    assert leases.holders(store)["r01-n04"].run_id == "wf-opaque"
    out = _finish(subprocess.Popen([sys.executable, str(opaque), url, str(work), "recover"], env=env,
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    assert "run wf-opaque cannot be recovered (its recorded arguments cannot be decoded" in out, out
    assert "abandoned wf-opaque" in out and "recovered wf-opaque" not in out, out
    assert _status(url, "wf-opaque") == "CANCELLED"
    assert leases.holders(store) == {}


def test_a_one_node_command_finishes_the_cut_off_run_of_its_node_else_starts_one(
        setup: tuple[str, Path, Store]) -> None:
    """``Controller.start_or_finish``: what role-swap, decommission and repair do with a killed run."""
    url, work, store = setup
    cut_off = _cut_off_one(url, work, store, "r01-n04")
    (work / "go").touch()
    out = _finish(_app(url, work, "one", "r01-n04"))
    assert f"finishing hold_node run {cut_off}, cut off earlier" in out, out
    result = _result(out)
    assert result == {"done": ["r01-n04"], "run": cut_off}, out  # that run, finished; no second one
    assert [t.event for t in store.history("r01-n04")][1:] == ["inspect", "inspect_done"]  # after enroll
    out = _finish(_app(url, work, "one", "r01-n05"))  # nothing cut off for this node: a new run
    assert "finishing" not in out, out
    assert _result(out)["run"] != cut_off
    assert leases.holders(store) == {}


def test_a_retired_executors_role_is_read_from_its_id() -> None:
    """A dead executor another process already retired has no row: its role comes from HOST/ROLE/UNIQUE (the
    whole tail was taken for the role, so its runs never matched a command's role)."""
    from lifecycle.workflows.controller import Controller

    assert Controller._role_of("gpu-ctl/roleswap/0a1b2c3d", {}) == "roleswap"
    assert Controller._role_of("gpu-ctl/elastic/node-01/0a1b2c3d", {}) == "elastic/node-01"
    assert Controller._role_of("gpu-ctl/elastic/node-01", {}) == "elastic/node-01"  # an older worker's id
    assert Controller._role_of("gpu-ctl/roleswap", {}) == "roleswap"  # an older racklife's HOST/ROLE

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

import pytest
from dbos import DBOSClient

from lifecycle.model.inventory import load_inventory
from lifecycle.model.states import State
from lifecycle.store import Store, leases

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
    first = _app(url, work, "start", "wf-a", "r01-n01", "r01-n02")
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
    third = _finish(_app(url, work, "recover"))
    assert "recovered wf-a" in third and '"done": ["r01-n01", "r01-n02"]' in third, third
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

"""Two `racklife serve` on one PostgreSQL; one SIGKILLed mid-provisioning of 16 nodes; the other finishes.

The provisioning is asked for by a plain `racklife provision`, which sees the
services' heartbeats and hands its run to them instead of running it
embedded; the boot server runs as its own process (`racklife boot serve`) so
that it outlives the kill. The service killed is the one running the parent
run (the worst case: the parent and its share of the per-node runs must both
be adopted). The two services have executor ids of two hosts, so the
survivor cannot see the victim's pid: it takes over when the victim's
heartbeat has been silent for 30 s, which the test times (within 60 s of
the kill). The lab counts every power-on of every node itself: each node
booted once at `lab up` plus at most once per boot attempt its run made, so no
re-run step power-cycled a node twice.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from lifecycle.model.states import State
from lifecycle.store import Store, connect, leases
from tests.e2e.conftest import EXE, RunningLab
from tests.postgres import throwaway_postgres
from tests.serving import stop_services

pytestmark = [pytest.mark.xdist_group("lab-b"), pytest.mark.slow]


@pytest.fixture(scope="module")
def lab16() -> Iterator[RunningLab]:
    lab = RunningLab(16, boot_time=4.0)
    try:
        yield lab
    finally:
        lab.down()


@pytest.fixture(scope="module")
def pg(tmp_path_factory: pytest.TempPathFactory, free_port: Callable[[], int]) -> Iterator[str]:
    with throwaway_postgres(tmp_path_factory.mktemp("pg"), free_port(), "racklife_serve") as url:
        yield url


def _wait(what: str, cond: Callable[[], bool], timeout: float, logs: list[Path]) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}\n" + "\n".join(
                f"--- {p.name}\n{p.read_text()[-3000:]}" for p in logs if p.exists()))
        time.sleep(0.3)


def _runs(url: str) -> list[sa.Row[tuple[str, str, str, str | None]]]:
    eng = sa.create_engine(connect.sqlalchemy_url(url))
    try:
        with eng.connect() as c:
            return list(c.execute(sa.text("select workflow_uuid, name, status, executor_id from dbos.workflow_status")))
    finally:
        eng.dispose()


def test_survivor_finishes_a_killed_services_runs(lab16: RunningLab, pg: str, minimal_image: Path,
                                                  tmp_path: Path) -> None:
    env = lab16.env | {"RACKLIFE_DB": pg}
    store = Store(pg)
    procs: list[subprocess.Popen[bytes]] = []

    def start(name: str, *args: str, host: str | None = None) -> subprocess.Popen[bytes]:
        with (tmp_path / f"{name}.log").open("wb") as log:
            p = subprocess.Popen([EXE, *args], env=env | ({"RACKLIFE_EXECUTOR_ID": host} if host else {}),
                                 stdout=log, stderr=subprocess.STDOUT)
        procs.append(p)
        return p

    logs = [tmp_path / f"{n}.log" for n in ("boot", "serve-a", "serve-b", "provision")]
    try:
        assert subprocess.run([EXE, "inventory", "import", str(lab16.inventory)], env=env,
                              capture_output=True, timeout=120).returncode == 0
        start("boot", "boot", "serve", "--images", str(minimal_image))
        # Two "hosts" (executor ids): a peer cannot see the other's pid, only its heartbeat go silent.
        serves = {name: start(name, "serve", "--refresh-interval", "0", "--takeover-interval", "2", host=name)
                  for name in ("serve-a", "serve-b")}
        _wait("two live services", lambda: sum(ex.role == "serve" for ex in leases.executors(store)) == 2, 120, logs)
        by_pid = {ex.pid: ex.id for ex in leases.executors(store) if ex.role == "serve"}

        client = start("provision", "provision", "--all", "--max-in-flight", "8", "--boot-timeout", "45",
                       "--images", str(minimal_image), "--json")
        _wait("4 nodes provisioned", lambda: len(store.nodes(state=State.PROVISIONED)) >= 4, 300, logs)
        parent = [r for r in _runs(pg) if r.name == "provision_many"]
        assert len(parent) == 1 and parent[0].executor_id in by_pid.values(), parent
        victim = next(n for n, p in serves.items() if by_pid.get(p.pid) == parent[0].executor_id)
        survivor = next(n for n in serves if n != victim)
        killed_at = time.monotonic()
        serves[victim].send_signal(signal.SIGKILL)
        serves[victim].wait(30)
        assert len(store.nodes(state=State.PROVISIONED)) < 16, "the kill came too late to test anything"
        assert "handing runs to racklife serve" in (tmp_path / "provision.log").read_text()

        survivor_log = tmp_path / f"{survivor}.log"
        _wait("the takeover", lambda: f"executor {parent[0].executor_id} is silent" in survivor_log.read_text(),
              90, logs)
        taken_after = time.monotonic() - killed_at
        # Silent for 30 s first (heartbeats every 5 s), then adopted at the next look (every 2 s): within 60 s.
        assert 25 <= taken_after <= 60, taken_after
        client.wait(600)
        out = (tmp_path / "provision.log").read_text()
        assert client.returncode == 0, out[-4000:]
        outcomes = json.loads(out[out.index("["):])
        assert len(outcomes) == 16 and all(o["state"] == "provisioned" for o in outcomes), outcomes
        took = time.monotonic() - killed_at

        runs = _runs(pg)
        assert not [r for r in runs if r.status in ("PENDING", "ENQUEUED")], runs
        assert all(r.status == "SUCCESS" for r in runs if r.name.startswith("provision")), runs
        assert all(r.executor_id != parent[0].executor_id for r in runs if r.name == "provision_many"), runs
        assert parent[0].executor_id not in {ex.id for ex in leases.executors(store)}  # retired by the survivor

        status = lab16.status()
        boots = {n["name"]: n["boots"] for n in status["nodes"]}
        attempts = {o["node"]: sum(s.startswith("boot attempt") for s in o["steps"]) for o in outcomes}
        assert all(1 <= a <= 2 for a in attempts.values()), attempts
        for n in boots:  # at most one power cycle per boot attempt, across the kill and the takeover
            assert 0 < boots[n] - 1 <= attempts[n], (n, boots, attempts)
        print(f"taken over {taken_after:.0f} s and finished {took:.0f} s after the kill; boots {boots}; "
              f"attempts {attempts}")
    finally:
        stop_services(procs)
        store.close()

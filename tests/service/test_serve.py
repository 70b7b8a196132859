"""`racklife serve` without a lab: its heartbeat, how commands decide to hand runs to it, its clean stop.

The takeover of a killed service's runs on PostgreSQL, with real provisioning,
is tests/e2e/test_serve_takeover.py.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from lifecycle.store import Store, leases
from lifecycle.workflows import engine, registry
from lifecycle.workflows.controller import STOPPED_AT, Controller, executor_alive, live_services

EXE = str(Path(sys.executable).with_name("racklife"))
NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def _row(role: str, host: str, beat: datetime, pid: int = 1) -> leases.Executor:
    return leases.Executor(f"{host}/{role}/0000", host, role, pid, None, beat - timedelta(hours=1), beat)


@pytest.mark.parametrize(("silent_s", "alive"), [(29, True), (31, False)])
def test_another_hosts_executor_is_dead_after_30_s_of_silence(silent_s: int, alive: bool) -> None:
    ex = _row("serve", "elsewhere", NOW - timedelta(seconds=silent_s))
    assert executor_alive(ex, "here", NOW) is alive


def test_a_stopped_service_is_dead_at_once() -> None:
    assert not executor_alive(_row("serve", "elsewhere", STOPPED_AT), "here", NOW)


def test_a_command_hands_off_only_to_a_live_service(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'racklife.sqlite'}"
    store = Store(url)
    try:
        now = datetime.now(UTC)
        leases.register_executor(store, _row("serve", "elsewhere", now - timedelta(seconds=60)))
        leases.register_executor(store, _row("provision", "elsewhere", now))  # fresh, but not a service
        assert live_services(store, "here") == []
        with Controller("accept", url) as ctl:  # nothing live: embedded, the engine launched here
            assert ctl.service is None and engine._launched_url == url
        live = _row("serve", "otherhost", now)
        leases.register_executor(store, live)
        with Controller("accept", url) as ctl:
            assert ctl.service is not None and ctl.service.id == live.id
            assert engine._launched_url is None  # nothing runs here: no engine, no recovery
    finally:
        store.close()


def test_a_handed_run_says_when_no_service_is_left_to_run_it(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    from lifecycle.workflows import power
    from lifecycle.workflows.controller import Handed

    monkeypatch.setattr(Handed, "WARN_AFTER_S", 0.5)
    url = f"sqlite:///{tmp_path / 'racklife.sqlite'}"
    with Controller("probe", url):  # the engine's tables, made once by an embedded launch
        pass
    store = Store(url)
    said: list[str] = []
    try:
        live = _row("serve", "otherhost", datetime.now(UTC))
        leases.register_executor(store, live)
        with Controller("power", url, say=said.append) as ctl:
            ctl.register_queue(registry.SERVE_QUEUE, 64, per_process=True)  # as the service does at start
            handle = ctl.start(power.power_on_node, "r01-n01", power.PowerOnSettings(), workflow_id="handed-1")
            leases.heartbeat(store, live.id, at=STOPPED_AT)  # the service is gone; nothing dequeues the run
            ended: list[BaseException] = []

            def wait() -> None:
                try:
                    handle.get_result()
                except BaseException as exc:  # the cancel below ends it
                    ended.append(exc)

            waiter = threading.Thread(target=wait, daemon=True)
            waiter.start()
            deadline = time.monotonic() + 30
            while not any("no racklife serve is alive: run handed-1 waits" in m for m in said):
                assert time.monotonic() < deadline, said
                time.sleep(0.2)
            assert waiter.is_alive()  # it keeps waiting: the run starts when a service is back
            with Controller("slurm", url):  # an embedded command never takes the service's work
                time.sleep(3)  # its queue workers poll every second
            insp = engine.Inspector(url)
            try:
                assert insp.get_run("handed-1").status == "ENQUEUED"  # type: ignore[union-attr]
                insp.cancel("handed-1")
            finally:
                insp.close()
            waiter.join(30)
            assert not waiter.is_alive() and ended
    finally:
        store.close()


def test_serve_heartbeats_serves_metrics_and_stops_cleanly_on_sigterm(tmp_path: Path,
                                                                      free_port: Callable[[], int]) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RACKLIFE_")} | {"RACKLIFE_HOME": str(tmp_path)}
    url = f"sqlite:///{tmp_path / 'racklife.sqlite'}"
    port = free_port()
    with (tmp_path / "serve.log").open("wb") as log:
        proc = subprocess.Popen([EXE, "serve", "--refresh-interval", "0", "--metrics-listen", f"127.0.0.1:{port}"],
                                env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, (tmp_path / "serve.log").read_text()
            assert time.monotonic() < deadline, (tmp_path / "serve.log").read_text()
            if (tmp_path / "racklife.sqlite").exists():
                store = Store(url)
                try:
                    found = live_services(store)
                finally:
                    store.close()
                if found:
                    break
            time.sleep(0.3)
        assert [ex.pid for ex in found] == [proc.pid]
        first = found[0].heartbeat_at
        time.sleep(6)  # one heartbeat interval and a bit
        store = Store(url)
        try:
            assert leases.executors(store)[0].heartbeat_at > first
            # Taken for dead by a peer (its row retired) while it was only slow: it registers again.
            leases.retire_executor(store, found[0].id)
            time.sleep(6)
            assert [ex.id for ex in leases.executors(store)] == [found[0].id]
        finally:
            store.close()
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
            assert b"racklife_nodes" in resp.read()
        shown = subprocess.run([EXE, "status", "--json"], env=env, capture_output=True, text=True, timeout=60)
        assert shown.returncode == 0 and json.loads(shown.stdout)["services"] == [found[0].id], shown.stdout
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0, (tmp_path / "serve.log").read_text()
        store = Store(url)
        try:
            assert leases.executors(store) == []  # nothing left running: retired, not left for a peer
        finally:
            store.close()
        assert "stopping" in (tmp_path / "serve.log").read_text()
        shown = subprocess.run([EXE, "status"], env=env | {"COLUMNS": "200"}, capture_output=True, text=True,
                               timeout=60)
        assert "racklife serve: none running" in shown.stdout, shown.stdout
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


INVENTORY = """\
site: {name: t}
racks: [{name: r01}]
pools:
  inference: {scheduler: kubernetes}
nodes:
  - name: r01-n01
    serial: S1
    rack: r01
    u: 2
    sku: h100-sxm-8
    pool: inference
    bmc: {driver: redfish, address: "https://127.0.0.1:1", credentials: "env:RACKLIFE_TEST_NO_SUCH_BMC"}
    nics:
      - {name: eno1, mac: "3c:ec:ef:01:01:00", role: boot}
"""


def test_serve_refreshes_the_fleet_on_its_interval_and_records_the_drift(tmp_path: Path) -> None:
    from lifecycle.planner import observe

    env = {k: v for k, v in os.environ.items() if not k.startswith("RACKLIFE_") and k != "KUBECONFIG"}
    env["RACKLIFE_HOME"] = str(tmp_path)
    (tmp_path / "inv.yaml").write_text(INVENTORY)
    assert subprocess.run([EXE, "inventory", "import", str(tmp_path / "inv.yaml")], env=env,
                          capture_output=True, timeout=120).returncode == 0
    log = tmp_path / "serve.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([EXE, "serve", "--refresh-interval", "1"], env=env, stdout=out,
                                stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 90
        while log.read_text().count("refreshed 1 node(s)") < 2:  # twice: it is an interval, not a one-off
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.3)
        text = log.read_text()
        assert "drift: r01-n01 (kube, unreadable): could not read: no kubeconfig" in text, text
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0, log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    store = Store(f"sqlite:///{tmp_path / 'racklife.sqlite'}")
    try:
        seen = observe.load(store)["r01-n01"]
        assert "kube" in seen.errors and "bmc" in seen.errors  # stored with what could not be read
    finally:
        store.close()


def test_provisioning_is_not_handed_off_without_a_boot_server_that_outlives_the_command(
        tmp_path: Path, free_port: Callable[[], int]) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RACKLIFE_")} | {"RACKLIFE_HOME": str(tmp_path)}
    (tmp_path / "inv.yaml").write_text(INVENTORY)
    assert subprocess.run([EXE, "inventory", "import", str(tmp_path / "inv.yaml")], env=env,
                          capture_output=True, timeout=120).returncode == 0
    store = Store(f"sqlite:///{tmp_path / 'racklife.sqlite'}")
    try:
        leases.register_executor(store, _row("serve", "otherhost", datetime.now(UTC)))
    finally:
        store.close()
    res = subprocess.run([EXE, "provision", "r01-n01", "--boot-listen", f"127.0.0.1:{free_port()}",
                          "--images", str(tmp_path)], env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 2, res.stdout + res.stderr
    assert "no boot server answers at 127.0.0.1:" in res.stderr and "racklife boot serve" in res.stderr, res.stderr
    runs = subprocess.run([EXE, "workflows", "list", "--json"], env=env, capture_output=True, text=True, timeout=60)
    assert runs.returncode == 0 and json.loads(runs.stdout) == [], runs.stdout  # nothing was handed off


def test_no_wait_hands_the_run_to_the_service_and_watch_follows_it(tmp_path: Path) -> None:
    """`--no-wait`: the run id on stdout, exit 0 at once; `workflows show RUN --watch` follows it to its end.

    Without a live service, `--no-wait` is refused (5) with nothing started: embedded, the run would
    stop with the command that returned.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("RACKLIFE_")} | {"RACKLIFE_HOME": str(tmp_path)}
    (tmp_path / "inv.yaml").write_text(INVENTORY)
    assert subprocess.run([EXE, "inventory", "import", str(tmp_path / "inv.yaml")], env=env,
                          capture_output=True, timeout=120).returncode == 0
    alone = subprocess.run([EXE, "slurm", "join", "r01-n01", "--no-wait"], env=env, capture_output=True, text=True,
                           timeout=120)
    assert alone.returncode == 5 and "--no-wait needs a live `racklife serve`" in alone.stderr, alone.stderr
    for cmd in (["build", str(tmp_path / "inv.yaml")], ["kube", "join", "r01-n01", "--kubeconfig", str(tmp_path)]):
        refused = subprocess.run([EXE, *cmd, "--no-wait"], env=env, capture_output=True, text=True, timeout=120)
        assert refused.returncode in (2, 5), refused.stderr  # kube join: the kubeconfig is checked first (2)
        assert "Traceback" not in refused.stderr, refused.stderr
    kube_cfg = tmp_path / "kubeconfig"
    kube_cfg.write_text("apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\nusers: []\n")
    refused = subprocess.run([EXE, "kube", "join", "r01-n01", "--kubeconfig", str(kube_cfg), "--no-wait"], env=env,
                             capture_output=True, text=True, timeout=120)
    assert refused.returncode == 5 and "--no-wait needs a live" in refused.stderr, refused.stderr
    refused = subprocess.run([EXE, "build", str(tmp_path / "inv.yaml"), "--no-wait"], env=env, capture_output=True,
                             text=True, timeout=120)
    assert refused.returncode == 5 and "--no-wait needs a live" in refused.stderr, refused.stderr
    runs = subprocess.run([EXE, "workflows", "list", "--json"], env=env, capture_output=True, text=True, timeout=60)
    assert json.loads(runs.stdout) == [], runs.stdout  # nothing started
    log = tmp_path / "serve.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([EXE, "serve", "--refresh-interval", "0"], env=env, stdout=out,
                                stderr=subprocess.STDOUT)
    try:
        url = f"sqlite:///{tmp_path / 'racklife.sqlite'}"
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            store = Store(url)
            try:
                if live_services(store):
                    break
            finally:
                store.close()
            time.sleep(0.3)
        handed = subprocess.run([EXE, "slurm", "join", "r01-n01", "--no-wait"], env=env, capture_output=True,
                                text=True, timeout=120)
        assert handed.returncode == 0, handed.stdout + handed.stderr
        [run_id] = handed.stdout.split()  # the run id alone: `$(racklife … --no-wait)` is usable
        assert f"racklife workflows show {run_id} --watch" in handed.stderr
        watched = subprocess.run([EXE, "workflows", "show", run_id, "--watch", "0.2", "--json"], env=env,
                                 capture_output=True, text=True, timeout=120)
        doc = json.loads(watched.stdout)
        assert doc["status"] == "SUCCESS" and doc["executor"].split("/")[1] == "serve", doc  # ran in the service
        as_json = subprocess.run([EXE, "slurm", "join", "r01-n01", "--no-wait", "--json"], env=env,
                                 capture_output=True, text=True, timeout=120)
        handed_doc = json.loads(as_json.stdout)
        assert handed_doc["waited"] is False and len(handed_doc["runs"]) == 1 and handed_doc["service"], handed_doc
        built = subprocess.run([EXE, "build", str(tmp_path / "inv.yaml"), "--no-wait", "--json"], env=env,
                               capture_output=True, text=True, timeout=120)
        # The BMC is unreadable, so apply has nothing to hand over: it says the fleet is blocked (1) at
        # once, and build, passing --no-wait on, returns its document without waiting or counting states.
        assert "--no-wait --json" in built.stderr.replace("\n", " "), built.stderr
        built_doc = json.loads(built.stdout)
        assert built.returncode == 1 and built_doc["exit_code"] == 1, built.stdout + built.stderr
        assert built_doc["apply"]["converged"] is False and built_doc["states"] is None, built_doc
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()

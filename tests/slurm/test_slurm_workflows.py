"""`racklife slurm join|leave` on the lab's real Slurm: the gate, ownership, and every job reported."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from lifecycle.drivers.slurm.driver import SlurmDriver
from lifecycle.drivers.slurm.runner import CommandRunner
from lifecycle.lab.slurm import LabSlurm
from lifecycle.model.inventory import Inventory
from lifecycle.model.states import Actor, State
from lifecycle.store import AcceptanceRecord, Store

pytestmark = pytest.mark.xdist_group("slurm")


@pytest.fixture(scope="module")
def env(lab: LabSlurm, site16: Inventory, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    db = tmp_path_factory.mktemp("store") / "rl.sqlite"
    store = Store(f"sqlite:///{db}")
    store.import_inventory(site16)
    store.close()
    yield lab.env() | {"RACKLIFE_DB": f"sqlite:///{db}"}
    subprocess.run(["scancel", "--user=root"], env=lab.env(), check=False, timeout=15)


def racklife(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("racklife") or str(Path(sys.executable).with_name("racklife"))
    return subprocess.run([exe, *args], env=env, capture_output=True, text=True, timeout=300)


def store_of(env: dict[str, str]) -> Store:
    return Store(env["RACKLIFE_DB"])


def accept(env: dict[str, str], node: str, passed: bool = True) -> None:
    store = store_of(env)
    try:
        for event in ("inspect", "inspect_done", "provision", "provision_done", "burn_in", "accept"):
            store.transition(node, event, Actor.WORKFLOW, f"test setup: {event}")
        now = datetime.now(UTC)
        store.add_acceptance_record(AcceptanceRecord(f"acc-{node}", node, passed, "quick", "h100-sxm-8", now,
                                                     now + timedelta(days=30), "policy:test", None, {}, None, None))
    finally:
        store.close()


def slurm(env: dict[str, str]) -> SlurmDriver:
    return SlurmDriver(CommandRunner(env=env))


def state(env: dict[str, str], node: str) -> State:
    store = store_of(env)
    try:
        return store.get(node).state
    finally:
        store.close()


def test_join_without_acceptance_fails_closed(env: dict[str, str]) -> None:
    res = racklife(env, "slurm", "join", "gpu-003", "--json")
    assert res.returncode == 5, res.stderr
    [out] = json.loads(res.stdout)
    assert not out["ok"] and "no passing, unexpired acceptance record" in out["reason"]
    assert state(env, "gpu-003") == State.ENROLLED


def test_admin_drain_is_never_lifted_even_by_join(env: dict[str, str]) -> None:
    accept(env, "gpu-004")
    subprocess.run(["scontrol", "update", "nodename=gpu-004", "state=drain", "reason=admin: bad DIMM"],
                   env=env, check=True, timeout=15)
    res = racklife(env, "slurm", "join", "gpu-004", "--json")
    assert res.returncode == 5
    [out] = json.loads(res.stdout)
    assert out["reason"].startswith("drained by another owner: admin: bad DIMM; not lifted")
    node = slurm(env).node("gpu-004")
    assert node.state.drain and node.reason == "admin: bad DIMM"
    assert state(env, "gpu-004") == State.JOIN_FAILED
    subprocess.run(["scontrol", "update", "nodename=gpu-004", "state=resume"], env=env, check=True, timeout=15)


def test_join_resumes_our_drain_and_records_in_service(env: dict[str, str]) -> None:
    accept(env, "gpu-005")
    slurm(env).drain(["gpu-005"], "quarantine-run-1", "burn-in pending")
    res = racklife(env, "slurm", "join", "gpu-005", "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    [out] = json.loads(res.stdout)
    assert out["ok"] and out["report"]["resume"] == [{"node": "gpu-005", "action": "resumed"}]
    assert not slurm(env).node("gpu-005").state.drain
    assert state(env, "gpu-005") == State.IN_SERVICE
    store = store_of(env)
    try:
        hist = store.history("gpu-005")
    finally:
        store.close()
    assert [h.event for h in hist][-2:] == ["join", "join_done"]
    assert hist[-1].run_id and hist[-1].run_id == hist[-2].run_id


def test_leave_requeues_a_two_node_job_and_reports_it(env: dict[str, str]) -> None:
    for n in ("gpu-006", "gpu-007"):
        accept(env, n)
        assert racklife(env, "slurm", "join", n).returncode == 0
    job = subprocess.run(["sbatch", "--parsable", "--chdir=/tmp", "--output=/dev/null", "-p", "train", "-N2",
                          "--exclusive", "-w", "gpu-[006-007]", "--wrap", "sleep 300"],
                         env=env, capture_output=True, text=True, check=True, timeout=15).stdout.strip()
    deadline = time.monotonic() + 30
    while slurm(env).job(job).state != "RUNNING":
        assert time.monotonic() < deadline, "job did not start"
        time.sleep(0.3)
    # A dry run names the job it would requeue and changes nothing; without --yes (no terminal) it is refused.
    dry = racklife(env, "slurm", "leave", "gpu-006", "--policy", "requeue", "--dry-run", "--json")
    assert dry.returncode == 0, dry.stdout + dry.stderr
    plan = json.loads(dry.stdout)
    assert plan["targets"] == ["gpu-006"] and any(f"job {job} " in e and "requeued" in e for e in plan["effects"])
    refused = racklife(env, "slurm", "leave", "gpu-006", "--policy", "requeue", "--json")
    assert refused.returncode == 5 and json.loads(refused.stdout)["error"]["code"] == "refused"
    assert not slurm(env).node("gpu-006").state.drain and slurm(env).job(job).state == "RUNNING"
    res = racklife(env, "slurm", "leave", "gpu-006", "--policy", "requeue", "--deadline", "1", "--json",
                   "--yes")
    assert res.returncode == 0, res.stdout + res.stderr
    [out] = json.loads(res.stdout)
    assert [(j["job_id"], j["action"]) for j in out["report"]["jobs"]] == [(job, "requeued")]
    assert out["state"] == "drained" and state(env, "gpu-006") == State.DRAINED
    drained = slurm(env).node("gpu-006")
    assert drained.state.drain and drained.reason.startswith("racklife:")
    assert slurm(env).job(job).state in ("PENDING", "RUNNING", "CONFIGURING")  # not lost


def start_job(env: dict[str, str], node: str) -> str:
    job = subprocess.run(["sbatch", "--parsable", "--chdir=/tmp", "--output=/dev/null", "-p", "train", "-N1",
                          "--exclusive", "-w", node, "--wrap", "sleep 300"],
                         env=env, capture_output=True, text=True, check=True, timeout=15).stdout.strip()
    deadline = time.monotonic() + 30
    while slurm(env).job(job).state != "RUNNING":
        assert time.monotonic() < deadline, "job did not start"
        time.sleep(0.3)
    return job


def test_leave_never_touches_a_node_someone_else_drained(env: dict[str, str]) -> None:
    """An admin drained the node under a running job: leave reports it and touches nothing."""
    accept(env, "gpu-008")
    assert racklife(env, "slurm", "join", "gpu-008").returncode == 0
    job = start_job(env, "gpu-008")
    subprocess.run(["scontrol", "update", "nodename=gpu-008", "state=drain", "reason=admin: reseating cable"],
                   env=env, check=True, timeout=15)
    try:
        res = racklife(env, "slurm", "leave", "gpu-008", "--policy", "cancel", "--deadline", "0", "--json",
                       "--yes")
        assert res.returncode == 5, res.stdout + res.stderr
        [out] = json.loads(res.stdout)
        assert not out["ok"] and out["report"] == {}
        assert out["reason"].startswith("drained by another owner: admin: reseating cable; racklife leaves "
                                        "the node and its jobs alone (set by root")
        assert slurm(env).job(job).state == "RUNNING"  # neither cancelled nor requeued
        node = slurm(env).node("gpu-008")
        assert node.state.drain and node.reason == "admin: reseating cable"
        assert state(env, "gpu-008") == State.IN_SERVICE  # not recorded as drained by racklife
        store = store_of(env)
        try:
            assert [h.event for h in store.history("gpu-008")][-1] == "join_done"
        finally:
            store.close()
    finally:
        subprocess.run(["scancel", job], env=env, check=False, timeout=15)
        subprocess.run(["scontrol", "update", "nodename=gpu-008", "state=resume"], env=env, check=True,
                       timeout=15)


def test_join_reads_slurm_before_saying_already_in_service(env: dict[str, str]) -> None:
    accept(env, "gpu-009")
    assert racklife(env, "slurm", "join", "gpu-009").returncode == 0
    again = racklife(env, "slurm", "join", "gpu-009", "--json")
    assert again.returncode == 0 and json.loads(again.stdout)[0]["reason"] == "already in service"
    subprocess.run(["scontrol", "update", "nodename=gpu-009", "state=drain", "reason=admin: reseating cable"],
                   env=env, check=True, timeout=15)
    try:
        res = racklife(env, "slurm", "join", "gpu-009", "--json")
        assert res.returncode == 5, res.stdout + res.stderr
        [out] = json.loads(res.stdout)
        assert not out["ok"] and out["state"] == "in_service"
        assert out["reason"].startswith("drained by another owner: admin: reseating cable; not lifted")
        node = slurm(env).node("gpu-009")
        assert node.state.drain and node.reason == "admin: reseating cable"
        table = racklife(env, "slurm", "join", "gpu-009")
        assert table.returncode == 5 and "REFUSED" in table.stdout and "already in service" not in table.stdout
    finally:
        subprocess.run(["scontrol", "update", "nodename=gpu-009", "state=resume"], env=env, check=True,
                       timeout=15)


def test_unknown_node_is_bad_input(env: dict[str, str]) -> None:
    res = racklife(env, "slurm", "join", "gpu-999")
    assert res.returncode == 2 and "unknown node(s): gpu-999" in res.stderr
    assert os.environ.get("RACKLIFE_DB") != env["RACKLIFE_DB"]


def test_ctrl_c_stops_waiting_not_the_run_and_says_so(env: dict[str, str]) -> None:
    """SIGINT while leave waits for a job: exit 130, no traceback, the pending run named with how to cancel it."""
    accept(env, "gpu-010")
    assert racklife(env, "slurm", "join", "gpu-010").returncode == 0
    job = start_job(env, "gpu-010")
    exe = shutil.which("racklife") or str(Path(sys.executable).with_name("racklife"))
    # A shell starts a background job with SIGINT ignored, the ignore is inherited through exec, and Python
    # installs no KeyboardInterrupt handler over it: under a backgrounded CI run this command ignored the
    # SIGINT. A terminal's Ctrl-C reaches racklife with the default disposition; give it that here.
    args = [exe, "slurm", "leave", "gpu-010", "--policy", "wait", "--deadline", "600", "--yes"]
    default_sigint = "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.execv(sys.argv[1], sys.argv[1:])"
    waiting = subprocess.Popen([sys.executable, "-c", default_sigint, *args],
                               env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not slurm(env).node("gpu-010").state.drain:  # the run has started: it drained the node
            assert time.monotonic() < deadline and waiting.poll() is None, waiting.communicate()
            time.sleep(0.2)
        time.sleep(1.5)  # a progress line: the wait is visible
        waiting.send_signal(signal.SIGINT)
        out, err = waiting.communicate(timeout=60)
    finally:
        if waiting.poll() is None:
            waiting.kill()
    assert waiting.returncode == 130, (out, err)
    assert "Traceback" not in out + err, err
    assert "slurm leave" in err and "waited" not in out  # progress on stderr, nothing of it on stdout
    [line] = [x for x in err.splitlines() if "was left pending" in x]
    run_id = line.split("run ", 1)[1].split(" ", 1)[0]
    assert f"racklife workflows cancel {run_id}" in line and "the next `racklife slurm`" in line
    assert slurm(env).job(job).state == "RUNNING"  # the interrupt touched no job
    assert racklife(env, "workflows", "cancel", run_id).returncode == 0

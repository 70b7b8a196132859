"""`racklife slurm join|leave` on the lab's real Slurm: the gate, ownership, and every job reported."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

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


def _dead_and_ours(lab: LabSlurm, env: dict[str, str], node: str) -> None:
    """The node's slurmd is gone (Slurm has it not responding) and it is down with racklife's reason."""
    lab.stop_node(node)
    slurm(env).down([node], "power-run-1", "powered off for maintenance")
    deadline = time.monotonic() + 90  # slurmctld pings every SlurmdTimeout/3 (lab: 10 s)
    while slurm(env).node(node).state.responding:
        assert time.monotonic() < deadline, f"Slurm never had {node} not responding: {slurm(env).node(node).state}"
        time.sleep(0.5)


def test_a_join_ends_only_when_slurm_has_the_node_serving(lab: LabSlurm, env: dict[str, str], site16: Inventory,
                                                         tmp_path: Path) -> None:
    """Resumed while its slurmd is gone, a node is ``idle*``: the join waits, and fails it (held again) at the
    pool's join_deadline_s; with the slurmd back in time, it joins once Slurm would start a job on it."""
    node = "gpu-002"
    _dead_and_ours(lab, env, node)
    started = False
    try:
        # A pool whose joins wait 6 s: the node never answers, the join fails and racklife drains it again.
        pools = {k: p.model_copy(update={"join_deadline_s": 6}) for k, p in site16.pools.items()}
        short = Store(f"sqlite:///{tmp_path / 'short.sqlite'}")
        short.import_inventory(site16.model_copy(update={"pools": pools}))
        short.close()
        short_env = env | {"RACKLIFE_DB": f"sqlite:///{tmp_path / 'short.sqlite'}"}
        accept(short_env, node)
        began = time.monotonic()
        res = racklife(short_env, "slurm", "join", node, "--json")
        assert "Traceback" not in res.stderr, res.stderr
        [out] = json.loads(res.stdout)
        assert res.returncode != 0 and not out["ok"], out
        assert "did not have the node serving within 6 s of its resume" in out["reason"], out
        assert "NOT_RESPONDING" in out["reason"], out
        assert time.monotonic() - began >= 6
        held = slurm(env).node(node)
        assert held.state.drain and held.owner.kind == "racklife" and "join failed" in held.reason, held
        assert state(short_env, node) != State.IN_SERVICE

        # The module's pool waits 300 s: the join waits on Slurm until the slurmd is back, then ends in service.
        accept(env, node)
        proc = subprocess.Popen([shutil.which("racklife") or str(Path(sys.executable).with_name("racklife")),
                                 "slurm", "join", node, "--json"], env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 60
            while slurm(env).node(node).state.drain:  # resumed: Slurm has it idle*, serving nothing
                assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()
                time.sleep(0.2)
            time.sleep(3)
            now = slurm(env).node(node).state
            assert not now.serving and proc.poll() is None, (now, proc.poll())
            assert state(env, node) != State.IN_SERVICE  # not in service while Slurm cannot use it
            lab.start_node(node, wait=False)
            started = True
            out_text, err = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        assert proc.returncode == 0 and "Traceback" not in err, out_text + err
        [joined] = json.loads(out_text)
        assert joined["ok"] and joined["state"] == "in_service", joined
        assert slurm(env).node(node).state.serving and state(env, node) == State.IN_SERVICE
    finally:
        if not started:
            lab.start_node(node, wait=False)
        subprocess.run(["scontrol", "update", f"nodename={node}", "state=resume"], env=env, check=False,
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


# ---------------------------------------------------------------- progress: what a leave waits on


def _leave_waiting_for_a_job(env: dict[str, str], node: str, run_env: dict[str, str],
                             **popen: Any) -> tuple[subprocess.Popen[Any], str]:
    """A leave (policy wait, a 6 s deadline) of a node running a job: it waits on the drain of that job."""
    accept(env, node)
    assert racklife(env, "slurm", "join", node).returncode == 0
    job = start_job(env, node)
    exe = shutil.which("racklife") or str(Path(sys.executable).with_name("racklife"))
    args = [exe, "slurm", "leave", node, "--policy", "wait", "--deadline", "6", "--yes"]
    return subprocess.Popen(args, env=run_env, **popen), job


def test_progress_off_a_terminal_names_the_job_the_drain_waits_on(env: dict[str, str]) -> None:
    """Plain timestamped lines on stderr, whole at COLUMNS=60: the node, its phase, the job it waits on."""
    proc, job = _leave_waiting_for_a_job(env, "gpu-011", env | {"COLUMNS": "60"},
                                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
        subprocess.run(["scancel", job], env=env, check=False, timeout=15)
    assert proc.returncode == 5, (out, err)  # the job still runs at the deadline: the leave is refused
    waits = [x for x in err.splitlines() if f"drain of job {job}" in x]
    assert waits, err
    assert re.fullmatch(rf"\d\d:\d\d:\d\d gpu-011 draining \(\d+ s\): waiting on drain of job {job} \(root, wrap\) "
                        rf"\(deadline 6 s\) for \d+ s", waits[0]), waits  # one line, longer than 60, not wrapped
    assert "drain of job" not in out and "Traceback" not in err


_CSI = re.compile(r"\x1b\[([0-9;?]*)([A-Za-z])")


def _run_on_a_pty(env: dict[str, str], node: str, columns: int) -> tuple[int, str, str]:
    import fcntl
    import pty
    import struct
    import termios

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 30, columns, 0, 0))
    tty_env = env | {"COLUMNS": str(columns), "NO_COLOR": "1", "TERM": "xterm-256color"}
    proc, job = _leave_waiting_for_a_job(env, node, tty_env, stdin=slave, stdout=subprocess.PIPE,
                                         stderr=slave)
    os.close(slave)
    chunks: list[bytes] = []
    try:
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:  # the last writer closed: the command ended
                break
            if not data:
                break
            chunks.append(data)
        proc.wait(timeout=60)
        out = proc.stdout.read().decode() if proc.stdout else ""
    finally:
        os.close(master)
        if proc.stdout:
            proc.stdout.close()
        if proc.poll() is None:
            proc.kill()
        subprocess.run(["scancel", job], env=env, check=False, timeout=15)
    return proc.returncode, out, b"".join(chunks).decode(errors="replace") + f"\njob={job}"


@pytest.mark.parametrize(("node", "columns"), [("gpu-012", 60), ("gpu-001", 200)])
def test_progress_on_a_terminal_is_a_live_table(env: dict[str, str], node: str, columns: int) -> None:
    """On a TTY (a pty): a Rich Live table with the node, its phase and the job; no colour under NO_COLOR."""
    code, out, tty = _run_on_a_pty(env, node, columns)
    job = tty.rsplit("job=", 1)[1]
    assert code == 5, (out, tty)
    sgr = [p for params, final in _CSI.findall(tty) if final == "m" for p in params.split(";") if p]
    assert not [p for p in sgr if p in {"38", "48"} or 30 <= int(p) <= 37 or 90 <= int(p) <= 97], sgr  # NO_COLOR
    assert any(final in "AK" for _p, final in _CSI.findall(tty)), "no Live redraw (cursor up / erase line)"
    screen = _CSI.sub("\n", tty).replace("\r", "\n")  # a redraw moves the cursor: each piece is a line
    assert max(len(x) for x in screen.splitlines()) <= columns, [x for x in screen.splitlines() if len(x) > columns]
    cells = re.sub(r"[\s│┃┏┓┗┛━─┡┩└┘┌┐╇╈┳┻┼┬┴╭╮╰╯|]", "", screen)
    assert "slurmleave" in cells and "waitingon" in cells and node in cells, screen
    assert f"drainofjob{job}(root,wrap)" in cells, screen
    assert not re.search(r"\d\d:\d\d:\d\d ", screen.split("job=")[0]), "plain log lines on a terminal"


def _powered_down_by_slurm(lab: LabSlurm, env: dict[str, str], node: str) -> None:
    """What a power cycle leaves: the node's slurmd gone and the node down in Slurm by root (the lab's
    stand-in for slurmctld's own conclusion), not drained."""
    lab.stop_node(node)
    subprocess.run(["scontrol", "update", f"nodename={node}", "state=down", "reason=lab: powered off"], env=env,
                   check=True, timeout=15, capture_output=True)


def _wave(env: dict[str, str], site16: Inventory, tmp_path: Path, node: str) -> tuple[Any, float]:
    from lifecycle.drivers.errors import DriverError
    from lifecycle.planner import observe
    from lifecycle.planner.apply import ApplySettings, decide

    def no_bmc(_node: str, _spec: object) -> Any:
        raise DriverError(_node, "this test reaches no BMC")  # site16's BMC addresses are not the lab's

    def no_kube() -> Any:
        raise AssertionError("a Slurm pool reads no Kubernetes")
    store = Store(f"sqlite:///{tmp_path / f'wave-{time.monotonic_ns()}.sqlite'}")
    try:
        store.import_inventory(site16)
        t0 = time.monotonic()
        wave = decide(store, site16, [node], observe.Sources(no_bmc, lambda: slurm(env), no_kube, firmware=False),
                      ApplySettings("test"), frozenset(), frozenset())
        return wave, time.monotonic() - t0
    finally:
        store.close()


def test_a_wave_looks_again_at_a_node_down_while_powered_and_holds_the_down_if_it_stays(
        lab: LabSlurm, env: dict[str, str], site16: Inventory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Right after a power cycle Slurm has the node down until its slurmd registers again (ReturnToService=2):
    a `pulumi up` planned in that moment blocked the node as "down in Slurm by root: not racklife's". A wave
    with nothing else to do looks again until the slurmd is back; a down that stays blocks (fail closed)."""
    from lifecycle.planner import apply

    monkeypatch.setattr(apply, "UNREADABLE_PAUSES_S", (0.05,))
    node = "gpu-003"  # refused a join earlier in this module: not in service, idle in Slurm
    try:
        _powered_down_by_slurm(lab, env, node)
        monkeypatch.setattr(apply, "SLURMD_SETTLE_S", 5.0)
        held, took = _wave(env, site16, tmp_path, node)
        assert "foreign-drain: slurm: down in Slurm by root ('lab: powered off')" in held.blocked[node], held
        assert took >= 5.0

        monkeypatch.setattr(apply, "SLURMD_SETTLE_S", 120.0)
        later = threading.Timer(4.0, lambda: lab.start_node(node, wait=False))
        later.start()
        try:
            back, took = _wave(env, site16, tmp_path, node)
        finally:
            later.join()
        assert took >= 4.0 and "foreign-drain" not in back.blocked.get(node, ""), back
        assert slurm(env).node(node).state.base == "idle"
    finally:
        lab.start_node(node)

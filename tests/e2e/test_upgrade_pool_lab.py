"""Issue 19's rolling upgrade of a whole training pool, judged from outside racklife (real Slurm, real jobs).

One 16-node lab, every node in ``training`` (Slurm) and every BMC Redfish (the lab's IPMI BMCs have timed out
on session setup under load in big labs), built with the minimal image, version 1; a copy published as
version 2 (and 3). In order, in one test (the second part uses what the first left):

1. ``racklife upgrade --pool training --image minimal:2 --max-unavailable 25% --canary 1 --policy requeue
   --deadline 0s`` with two long jobs running (exclusive, requeueable, longer than the rollout). While it
   runs a watcher samples Slurm (``sinfo``) and the store: never more than 4 of the 16 out of service in
   either. After the canary the run holds (no ``--auto-continue``): nothing else leaves for a few seconds;
   ``racklife upgrade resume`` continues it, in batches of 4. No job lost: each job was requeued (the
   report names it; ``sacct`` has its REQUEUED runs) and is still queued or running at the end. Every node
   ends on version 2 (the boot record its own phone-home made), accepted since the run began, serving in
   its partition.
2. An abort under ``--policy requeue``: the same pool to version 3 with ``--auto-continue``; while batch 2
   is under way ``racklife upgrade abort``, which ``upgrade status`` shows as requested before the run
   reads it. The run ends ``aborted`` (exit 1); batches 1 and 2 are fully new (version 3, accepted, serving),
   every other node fully old (version 2, serving, its history untouched); the jobs the run requeued are
   listed in its report, and sacct agrees.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.exc import OperationalError

from lifecycle.model.states import State
from lifecycle.store import Store
from lifecycle.workflows import engine
from lifecycle.workflows.upgrade import STATUS
from tests.e2e.conftest import EXE, RunningLab, built_lab, publish_version, wait_for

pytestmark = [pytest.mark.xdist_group("lab-b"), pytest.mark.slow]
NODES = [f"node-{i:02d}" for i in range(1, 17)]
SERVING = {"idle", "allocated", "mixed", "completing"}


@pytest.fixture(scope="module")
def lab16(minimal_image: Path) -> Iterator[RunningLab]:
    with built_lab(16, minimal_image, timeout=1800, boot_time=0.5,
                   extra=("--ipmi-every", "0", "--inference", "0")) as running:
        yield running


def slurm(lab: RunningLab, *args: str) -> str:
    return subprocess.run(list(args), env=lab.env, capture_output=True, text=True, timeout=30, check=True).stdout


def sinfo(lab: RunningLab) -> dict[str, str]:
    """node -> its Slurm state, without the flags (``idle*``, ``drained~``)."""
    rows = [line.split() for line in slurm(lab, "sinfo", "-h", "-N", "-p", "training", "-o", "%N %T").splitlines()]
    return {r[0]: r[1].rstrip("*~#!%$@^-+").lower() for r in rows if len(r) == 2}


def states(store: Store) -> dict[str, str]:
    return {r.name: r.state.value for r in store.nodes(pool="training")}


def booted(lab: RunningLab) -> dict[str, tuple[str, str]]:
    res = lab.racklife("refresh", "--nodes", ",".join(NODES), "--json", timeout=300)
    assert res.returncode in (0, 1) and "Traceback" not in res.stderr, res.stdout + res.stderr
    return {n["node"]: (n["boot"]["image"], n["boot"]["version"]) for n in json.loads(res.stdout)["nodes"]}


def status(lab: RunningLab, run: str) -> dict[str, Any]:
    res = lab.racklife("upgrade", "status", run, "--json")
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stdout + res.stderr
    doc: dict[str, Any] = json.loads(res.stdout)
    return doc


class Runs:
    """The lab's runs read in this process, for polling: a `racklife` process per poll costs a CPU-second each,
    which the rollout needs on a 2-core machine (the assertions still read `racklife upgrade status`)."""

    def __init__(self, lab: RunningLab) -> None:
        self.inspector = engine.Inspector(f"sqlite:///{Path(lab.env['RACKLIFE_HOME']) / 'racklife.sqlite'}")

    def report(self, run: str) -> dict[str, Any]:
        published = self.inspector.event(run, STATUS)
        return published if isinstance(published, dict) else {}

    def pending_upgrades(self) -> list[str]:
        return [r.id for r in self.inspector.list_runs(status="PENDING") if r.name.endswith("upgrade")]

    def close(self) -> None:
        self.inspector.close()


def the_run(runs: Runs, proc: subprocess.Popen[str]) -> str:
    wait_for(lambda: bool(runs.pending_upgrades()) or proc.poll() is not None, 120, "the upgrade run to start")
    assert proc.poll() is None, proc.communicate()
    [run] = runs.pending_upgrades()
    return run


def sacct(lab: RunningLab, job: str) -> list[tuple[str, str]]:
    """(State, NodeList) of every run of the job slurmdbd recorded."""
    out = slurm(lab, "sacct", "-n", "-P", "-D", "-X", "-j", job, "-o", "State,NodeList")
    return [(r.split("|")[0].strip(), r.split("|")[1].strip()) for r in out.splitlines() if r.strip()]


def accepted_since(store: Store, node: str, since: datetime) -> bool:
    rec = store.valid_acceptance(node)
    if rec is None or not rec.passed:
        return False
    return (rec.created_at if rec.created_at.tzinfo else rec.created_at.replace(tzinfo=UTC)) >= since


class Watcher:
    """Samples Slurm and the store every half second: how many of the pool are out of service."""

    def __init__(self, lab: RunningLab, store: Store) -> None:
        self.lab, self.store = lab, store
        self.slurm: list[int] = []
        self.stored: list[int] = []
        self.errors: list[str] = []
        self.busy = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                seen = sinfo(self.lab)
                self.slurm.append(sum(seen.get(n) not in SERVING for n in NODES))
                self.stored.append(sum(s != State.IN_SERVICE.value for s in states(self.store).values()))
            except OperationalError:
                self.busy += 1  # the store locked by a writer at that instant: the next sample reads it
            except (subprocess.SubprocessError, OSError) as exc:
                self.errors.append(str(exc))
            self._stop.wait(0.5)

    def __enter__(self) -> Watcher:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)


def _sbatch_long(lab: RunningLab) -> str:
    return slurm(lab, "sbatch", "--parsable", "--chdir=/tmp", "--output=/dev/null", "-p", "training", "-N1",
                 "--exclusive", "--requeue", "--wrap", "sleep 3600").strip()


def _queued(lab: RunningLab, job: str) -> str:
    return slurm(lab, "squeue", "-h", "-j", job, "-o", "%T").strip()


def _whole_pool_to_v2(lab: RunningLab, store: Store, runs: Runs, images: Path) -> list[str]:
    before = booted(lab)
    assert all(before[n] == ("minimal", "1") for n in NODES), before
    jobs = [_sbatch_long(lab) for _ in range(2)]
    wait_for(lambda: all(_queued(lab, j) == "RUNNING" for j in jobs), 60, "the two long jobs to run")
    since = datetime.now(UTC)
    proc = subprocess.Popen([EXE, "upgrade", "--pool", "training", "--image", "minimal:2", "--max-unavailable", "25%",
                             "--canary", "1", "--policy", "requeue", "--deadline", "0s", "--images", str(images),
                             "--boot-timeout", "60", "--json"], env=lab.env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        with Watcher(lab, store) as watched:
            run = the_run(runs, proc)
            wait_for(lambda: runs.report(run).get("phase") == "held", 600, "the canary hold")
            time.sleep(3)  # held means held: the canary is back and nothing else leaves
            held = status(lab, run)
            assert held["status"] == "PENDING" and held["report"]["phase"] == "held", held
            assert held["report"]["batches"] == [["node-01"]], held
            assert [(n["node"], n["ok"]) for n in held["report"]["nodes"]] == [("node-01", True)], held
            assert set(states(store).values()) == {"in_service"}, states(store)
            assert all(s in SERVING for s in sinfo(lab).values()), sinfo(lab)
            resumed = lab.racklife("upgrade", "resume", run)
            assert resumed.returncode == 0 and "sent" in resumed.stderr, resumed.stdout + resumed.stderr
            out, err = proc.communicate(timeout=1500)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=30)
    assert "Traceback" not in err, err
    report = json.loads(out)
    assert proc.returncode == 0 and report["phase"] == "done", out + err
    assert report["batches"] == [NODES[:1], NODES[1:5], NODES[5:9], NODES[9:13], NODES[13:]], report["batches"]
    assert sorted(report["upgraded"]) == NODES and report["failed"] == [], report
    # Never more than 4 of the 16 down, as Slurm and the store said while it ran (not racklife's plan).
    assert not watched.errors, watched.errors
    assert len(watched.slurm) > 20 and len(watched.stored) > 20, (watched.slurm, watched.stored)
    assert max(watched.slurm) <= 4 and max(watched.stored) <= 4, (watched.slurm, watched.stored)
    assert max(watched.slurm) >= 2 and max(watched.stored) >= 4, (watched.slurm, watched.stored)
    # Every node on the new image, accepted since the run began, serving.
    after = booted(lab)
    assert all(after[n] == ("minimal", "2") for n in NODES), after
    assert all(accepted_since(store, n, since) for n in NODES), [store.valid_acceptance(n) for n in NODES]
    assert set(states(store).values()) == {"in_service"}, states(store)
    assert all(s in SERVING for s in sinfo(lab).values()), sinfo(lab)
    # No job lost: each was requeued when its node left (the report says so, slurmdbd too) and lives on.
    touched = " ".join(report["touched"])
    for job in jobs:
        assert f"Slurm job {job} " in touched and "requeued" in touched, report["touched"]
        assert "REQUEUED" in [s for s, _ in sacct(lab, job)], sacct(lab, job)
        assert _queued(lab, job) in ("RUNNING", "PENDING"), (job, _queued(lab, job))
    return jobs


def _abort_under_requeue(lab: RunningLab, store: Store, runs: Runs, images: Path, jobs: list[str]) -> None:
    wait_for(lambda: all(_queued(lab, j) == "RUNNING" for j in jobs), 120, "the long jobs to run again")
    on = {j: slurm(lab, "squeue", "-h", "-j", j, "-o", "%N").strip() for j in jobs}
    seen_before = {n: len(store.history(n)) for n in NODES}
    since = datetime.now(UTC)
    proc = subprocess.Popen([EXE, "upgrade", "--pool", "training", "--image", "minimal:3", "--max-unavailable", "4",
                             "--canary", "1", "--auto-continue", "--policy", "requeue", "--deadline", "0s",
                             "--images", str(images), "--boot-timeout", "60", "--json"], env=lab.env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        run = the_run(runs, proc)
        wait_for(lambda: len(runs.report(run).get("batches", [])) == 2, 600, "batch 2 to start")
        aborted = lab.racklife("upgrade", "abort", run)
        assert aborted.returncode == 0 and "sent" in aborted.stderr, aborted.stdout + aborted.stderr
        shown = status(lab, run)
        if shown["status"] == "PENDING" and len(shown["report"]["nodes"]) < 5:  # batch 2 still under way
            assert shown["requested"]["command"] == "abort", shown
        out, err = proc.communicate(timeout=900)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=30)
    assert "Traceback" not in err, err
    report = json.loads(out)
    assert proc.returncode == 1 and report["phase"] == "aborted", out + err
    assert report["batches"] == [NODES[:1], NODES[1:5]] and report["pending"] == NODES[5:], report
    new, old = NODES[:5], NODES[5:]
    after = booted(lab)
    slurm_now = sinfo(lab)
    for n in NODES:
        rec = store.get(n)
        if rec.state is State.QUARANTINED:  # allowed, with its reason
            assert store.history(n)[-1].reason, n
            continue
        assert rec.state is State.IN_SERVICE and slurm_now[n] in SERVING, (n, rec.state, slurm_now[n])
        if n in new:
            assert after[n] == ("minimal", "3") and accepted_since(store, n, since), (n, after[n])
        else:
            assert after[n] == ("minimal", "2") and len(store.history(n)) == seen_before[n], (n, after[n])
    assert all(store.get(n).state is State.IN_SERVICE for n in old)
    # The jobs this run requeued are in its report, and slurmdbd has the requeue.
    requeued = {j for j, node in on.items() if node in new}
    assert requeued, f"no long job ran on batch 1 or 2 ({on}): the abort requeued nothing to check"
    touched = " ".join(report["touched"])
    for job in requeued:
        assert f"Slurm job {job} " in touched, report["touched"]
        assert [s for s, _ in sacct(lab, job)].count("REQUEUED") >= 2, sacct(lab, job)
    for job in jobs:
        assert _queued(lab, job) in ("RUNNING", "PENDING"), (job, _queued(lab, job))


def test_a_16_node_pool_upgrade_holds_its_canary_keeps_4_down_at_most_and_loses_no_job(
        lab16: RunningLab, minimal_image: Path, tmp_path: Path) -> None:
    images = publish_version(minimal_image, tmp_path / "images", "2")
    store = Store(f"sqlite:///{Path(lab16.env['RACKLIFE_HOME']) / 'racklife.sqlite'}")
    runs = Runs(lab16)
    jobs: list[str] = []
    try:
        started = time.monotonic()
        jobs = _whole_pool_to_v2(lab16, store, runs, images)
        print(f"the whole pool to version 2: {time.monotonic() - started:.0f} s")  # shown with -s
        started = time.monotonic()
        _abort_under_requeue(lab16, store, runs, publish_version(minimal_image, tmp_path / "images-3", "3"), jobs)
        print(f"the abort under requeue: {time.monotonic() - started:.0f} s")
    finally:
        for job in jobs:
            subprocess.run(["scancel", job], env=lab16.env, timeout=60, check=False)
        runs.close()
        store.close()

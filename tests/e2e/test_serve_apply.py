"""`racklife build` with a `racklife serve` running: every run is handed to the service, which also runs the boot server.

The build (an import, then apply: provision, accept, join Slurm and
Kubernetes) is the unchanged command; it sees the service's heartbeat, starts
no engine and no boot server of its own, and hands each wave's runs to the
service. The nodes end in service, every run was executed by the service's
executor, and a second apply says "no changes". Then a Slurm upgrade handed to
the service, the service SIGKILLed mid-canary, another service adopting the
run (the canary finished, the run held) and `racklife upgrade abort`: every
node fully old or fully new, in service, the run aborted. Then, on PostgreSQL with two
services: the whole apply is one durable run, an interrupted command leaves it
going on in the service, and a SIGKILLed service's apply is finished by the
other.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from lifecycle.model.states import State
from lifecycle.store import Store, connect, operators
from lifecycle.workflows import engine
from lifecycle.workflows.controller import live_services
from tests.e2e import slurm_reads as reads
from tests.e2e.conftest import EXE, RunningLab
from tests.postgres import throwaway_postgres
from tests.serving import stop_services, wait_live

pytestmark = [pytest.mark.xdist_group("lab-b"), pytest.mark.slow]


@pytest.fixture(scope="module")
def lab2() -> Iterator[RunningLab]:
    lab = RunningLab(2)
    try:
        yield lab
    finally:
        lab.down()


def test_build_is_handed_to_the_service_and_converges(lab2: RunningLab, minimal_image: Path, tmp_path: Path) -> None:
    env = lab2.env
    url = f"sqlite:///{Path(env['RACKLIFE_HOME']) / 'racklife.sqlite'}"
    log = tmp_path / "serve.log"
    with log.open("wb") as out:
        serve = subprocess.Popen([EXE, "serve", "--refresh-interval", "0", "--boot-listen", env["RACKLIFE_BOOT_LISTEN"],
                                  "--boot-url", env["RACKLIFE_BOOT_URL"], "--images", str(minimal_image)],
                                 env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        service = wait_live(serve, url, log)[0].id

        build = lab2.racklife("build", str(lab2.inventory), "--images", str(minimal_image), "--boot-timeout", "60",
                              timeout=1200)
        assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:] + log.read_text()[-3000:]
        assert "handing runs to racklife serve" in build.stderr, build.stderr
        store = Store(url)
        try:
            assert {r.name: r.state.value for r in store.nodes()} == {"node-01": "in_service",
                                                                      "node-02": "in_service"}
        finally:
            store.close()
        insp = engine.Inspector(url)
        try:
            runs = insp.list_runs(limit=1000)
        finally:
            insp.close()
        names = {r.name for r in runs}
        assert {"apply_fleet", "provision_many", "provision_node", "accept_nodes", "join_node"} <= names, names
        assert all(r.executor == service for r in runs), {(r.name, r.executor) for r in runs}

        again = lab2.racklife("apply", str(lab2.inventory), "--yes", timeout=600)
        assert again.returncode == 0 and "no changes" in again.stderr, again.stdout + again.stderr
        serve = _abort_of_a_slurm_upgrade_another_service_adopted(lab2, serve, minimal_image, tmp_path)
        serve.send_signal(signal.SIGTERM)
        assert serve.wait(60) == 0, (tmp_path / "serve-b.log").read_text()[-3000:]
    finally:
        if serve.poll() is None:
            serve.kill()
            serve.wait()


def _abort_of_a_slurm_upgrade_another_service_adopted(lab: RunningLab, serve_a: subprocess.Popen[bytes],
                                                      minimal_image: Path, tmp_path: Path) -> subprocess.Popen[bytes]:
    """A Slurm upgrade handed to the service (A), which is SIGKILLed while the canary's slurmd restarts;
    another `racklife serve` (B), started after, adopts the run and the canary's own, finishes the canary
    and holds; then `racklife upgrade abort RUN`. The canary's batch finishes (its slurmd restarted once, the node new and in service), the other
    node is untouched (old, in service), and `upgrade status` says aborted. Returns B, still serving."""
    env = lab.env
    url = f"sqlite:///{Path(env['RACKLIFE_HOME']) / 'racklife.sqlite'}"
    version = reads.slurm(lab, "slurmctld", "-V").split()[-1]
    nodes = reads.training(lab)
    assert nodes == ["node-01", "node-02"], nodes
    canary = nodes[0]
    started = {n: reads.slurmd_start(lab, n) for n in nodes}
    logs = reads.Logs(lab)
    mark = Path(env["RACKLIFE_HOME"]) / "slurm-hooks" / f"slurmd-{canary}.hook"

    def executor(run: str) -> str:
        listed = json.loads(lab.racklife("workflows", "list", "--json").stdout)
        return str(next(r["executor"] for r in listed if r["id"] == run))

    def status(run: str) -> dict[str, Any]:
        doc: dict[str, Any] = json.loads(lab.racklife("upgrade", "status", run, "--json").stdout)
        return doc

    res = lab.racklife("upgrade", "--pool", "training", "--slurm", version, "--policy", "requeue", "--deadline", "5s",
                       "--max-unavailable", "1", "--canary", "1", "--no-wait", "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    [run] = json.loads(res.stdout)["runs"]
    by_a = executor(run)
    _until(lambda: mark.exists() or f"restart slurmd {canary}" in logs.restarts() or serve_a.poll() is not None,
           300, "the canary's slurmd restart", tmp_path)
    serve_a.send_signal(signal.SIGKILL)  # the service only: the hook it started goes on
    serve_a.wait(30)

    with (tmp_path / "serve-b.log").open("wb") as out:
        serve_b = subprocess.Popen([EXE, "serve", "--refresh-interval", "0", "--boot-listen",
                                    env["RACKLIFE_BOOT_LISTEN"], "--boot-url", env["RACKLIFE_BOOT_URL"],
                                    "--images", str(minimal_image)], env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        _until(lambda: executor(run) != by_a or serve_b.poll() is not None, 120, "serve B to adopt the run", tmp_path)
        assert serve_b.poll() is None
        # The canary's batch finishes in B, and the run holds for a verdict.
        _until(lambda: (status(run).get("report") or {}).get("phase") == "held", 300, "the hold after the canary",
               tmp_path)
        aborted = lab.racklife("upgrade", "abort", run, "--images", str(minimal_image))
        assert aborted.returncode == 0, aborted.stdout + aborted.stderr
        assert "the process running it carries on" in aborted.stderr, aborted.stderr
        _until(lambda: status(run)["status"] != "PENDING", 600, "the run to end", tmp_path)
    except BaseException:
        serve_b.kill()
        serve_b.wait()
        raise
    doc = status(run)
    report = doc["report"]
    assert doc["status"] == "SUCCESS" and report["phase"] == "aborted", doc
    assert report["batches"] == [[canary]] and report["upgraded"] == [canary] and report["pending"] == nodes[1:], \
        report
    text = lab.racklife("upgrade", "status", run).stdout
    assert f"{run}: slurm {version}: aborted" in text, text
    # Fully new: the canary's slurmd restarted exactly once (the kill came during its restart), in service.
    assert [r for r in logs.restarts() if r.startswith("restart slurmd ")] == [f"restart slurmd {canary}"]
    assert logs.started(f"slurmd-{canary}.log", "slurmd") == 1, logs.new(f"slurmd-{canary}.log")[-2000:]
    assert reads.slurmd_start(lab, canary) != started[canary]
    # Fully old: the other untouched.
    for n in nodes[1:]:
        assert reads.slurmd_start(lab, n) == started[n] and logs.started(f"slurmd-{n}.log", "slurmd") == 0, n
    store = Store(url)
    try:
        assert {n: store.get(n).state.value for n in nodes} == dict.fromkeys(nodes, "in_service")
        assert not [t for n in nodes[1:] for t in store.history(n) if (t.run_id or "").startswith(run)]
        assert [t.event for t in store.history(canary) if (t.run_id or "").startswith(run)], store.history(canary)
    finally:
        store.close()
    return serve_b


def _until(cond: Callable[[], bool], timeout: float, what: str, tmp_path: Path) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}\n" + "\n".join(
            f"--- {p.name}\n{p.read_text()[-3000:]}" for p in sorted(tmp_path.glob("*.log")))
        time.sleep(0.2)


def test_an_interrupted_apply_goes_on_in_the_service_and_a_killed_service_s_apply_is_finished_by_its_peer(
        minimal_image: Path, tmp_path: Path, free_port: Callable[[], int]) -> None:
    """Two `racklife serve` on one PostgreSQL; `racklife apply` hands the whole apply to them as one
    durable run (apply_fleet), is interrupted with Ctrl-C (the apply goes on), then the service running
    the apply is SIGKILLed mid-provisioning: the other takes the apply over and converges the lab."""
    lab = RunningLab(2, boot_time=4.0)
    procs: list[subprocess.Popen[bytes]] = []
    (tmp_path / "pg").mkdir()
    try:
        with throwaway_postgres(tmp_path / "pg", free_port(), "racklife_apply") as pg:
            env = lab.env | {"RACKLIFE_DB": pg}
            store = Store(pg)

            def start(name: str, *args: str, sig: bool = False) -> subprocess.Popen[bytes]:
                with (tmp_path / f"{name}.log").open("wb") as log:
                    p = subprocess.Popen([EXE, *args], env=env, stdout=log, stderr=subprocess.STDOUT,
                                         preexec_fn=(lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
                                         if sig else None)
                procs.append(p)
                return p

            logs = [tmp_path / f"{n}.log" for n in ("boot", "serve-a", "serve-b", "build")]

            def wait(what: str, cond: Callable[[], bool], timeout: float) -> None:
                deadline = time.monotonic() + timeout
                while not cond():
                    assert time.monotonic() < deadline, f"timed out waiting for {what}\n" + "\n".join(
                        f"--- {p.name}\n{p.read_text()[-3000:]}" for p in logs if p.exists())
                    time.sleep(0.3)

            try:
                start("boot", "boot", "serve", "--images", str(minimal_image))
                serves = {n: start(n, "serve", "--refresh-interval", "0", "--takeover-interval", "1")
                          for n in ("serve-a", "serve-b")}
                wait("two live services", lambda: len(live_services(store)) == 2, 120)
                by_pid = {ex.pid: ex.id for ex in live_services(store)}

                imported = subprocess.run([EXE, "inventory", "import", str(lab.inventory)], env=env,
                                          capture_output=True, text=True, timeout=120)
                assert imported.returncode == 0, imported.stderr
                build = start("build", "apply", str(lab.inventory), "--yes", "--images", str(minimal_image),
                              "--boot-timeout", "60", sig=True)
                wait("the apply handed over", lambda: any(r.name == "apply_fleet" for r in _runs(pg)), 120)
                wait("a node provisioning", lambda: bool(store.nodes(state=State.PROVISIONING)), 120)
                build.send_signal(signal.SIGINT)
                code = build.wait(60)
                said = (tmp_path / "build.log").read_text()
                assert code == 130, said
                [apply_run] = [r for r in _runs(pg) if r.name == "apply_fleet"]
                assert f"apply {apply_run.workflow_uuid} continues in the service" in said, said
                assert "Traceback" not in said, said

                victim = next(n for n, p in serves.items() if by_pid.get(p.pid) == apply_run.executor_id)
                serves[victim].send_signal(signal.SIGKILL)
                serves[victim].wait(30)
                assert store.nodes(state=State.PROVISIONING), "the kill came too late to test anything"

                def finished() -> bool:
                    return all(r.status not in ("PENDING", "ENQUEUED") for r in _runs(pg))

                wait("the survivor to finish the apply", finished, 900)
                runs = _runs(pg)
                [done] = [r for r in runs if r.name == "apply_fleet"]
                assert done.status == "SUCCESS" and done.executor_id != apply_run.executor_id, runs
                assert {"provision_many", "accept_nodes", "join_node"} <= {r.name for r in runs}, runs
                assert all(r.status == "SUCCESS" for r in runs), runs
                assert {r.name: r.state.value for r in store.nodes()} == {"node-01": "in_service",
                                                                          "node-02": "in_service"}
                assert {t.operator for n in ("node-01", "node-02") for t in store.history(n)
                        if t.run_id} == {operators.current()}  # the build's operator, across the takeover
                again = subprocess.run([EXE, "apply", str(lab.inventory), "--yes"], env=env, capture_output=True,
                                       text=True, timeout=600)
                assert again.returncode == 0 and "no changes" in again.stderr, again.stdout + again.stderr
            finally:
                stop_services(procs)
                store.close()
    finally:
        lab.down()


def _runs(url: str) -> list[sa.Row[tuple[str, str, str, str | None]]]:
    eng = sa.create_engine(connect.sqlalchemy_url(url))
    try:
        with eng.connect() as c:
            return list(c.execute(sa.text("select workflow_uuid, name, status, executor_id from dbos.workflow_status")))
    finally:
        eng.dispose()

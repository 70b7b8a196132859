"""Elastic capacity on the lab's real Slurm and the Kubernetes stand-in: lend, reclaim, and a PDB that says no.

slurmctld calls racklife's SuspendProgram/ResumeProgram (configured in the
lab's slurm.conf); those start the durable lend/reclaim workflows, whose
role-switch hook is the lab's (stop or boot the node's slurmd, register its
Node). Everything asserted here is read back from Slurm (scontrol), the
Kubernetes API and the store.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

from lifecycle.drivers.kube.api import KubeApiDriver
from lifecycle.drivers.slurm.driver import SlurmDriver
from lifecycle.drivers.slurm.runner import CommandRunner
from lifecycle.lab.kube import KubeStandIn
from lifecycle.lab.slurm import LabSlurm, LabSlurmConfig
from lifecycle.model.inventory import Inventory
from lifecycle.model.states import Actor, State
from lifecycle.service import cycles
from lifecycle.store import AcceptanceRecord, Store, db, leases

pytestmark = pytest.mark.xdist_group("slurm-elastic")

LENT_A, LENT_B = "gpu-013", "gpu-014"  # the lendable "flex" pool of site-16
CRASHED = "gpu-012"  # moved into the flex pool for the crash test

HANG_ONCE = """import os, sys, time
from pathlib import Path
marker = Path(sys.argv[1])
cmd, role, node = sys.argv[2:-2], sys.argv[-2], sys.argv[-1]
if role == "kubernetes" and marker.exists():
    marker.unlink()  # hang once, as a worker killed half-way through its switch
    time.sleep(600)
os.execv(cmd[0], [*cmd, role, node])
"""


@dataclass
class Elastic:
    lab: LabSlurm
    kube: KubeStandIn
    kubeconfig: Path
    db: str
    work: Path

    def slurm(self) -> SlurmDriver:
        return SlurmDriver(CommandRunner(env=self.lab.env()))

    def kube_driver(self) -> KubeApiDriver:
        return KubeApiDriver.from_kubeconfig(self.kubeconfig)

    def state(self, node: str) -> State:
        store = Store(self.db)
        try:
            return store.get(node).state
        finally:
            store.close()

    def events(self, node: str) -> list[tuple[str, str | None]]:
        store = Store(self.db)
        try:
            return [(t.event, t.run_id) for t in store.history(node)]
        finally:
            store.close()

    def trip(self, node: str, kind: str) -> tuple[str, dict[str, float]]:
        """The node cycle's history row of the node's last lend or reclaim: (verdict, seconds per phase)."""
        store = Store(self.db)
        try:
            rows = [c for c in store.changes(node) if c.kind == kind]
        finally:
            store.close()
        assert rows, f"no {kind} row in {node}'s history"
        parsed = cycles.parse(rows[-1].reason)
        assert parsed is not None, rows[-1].reason
        return parsed

    def scontrol(self, *args: str) -> str:
        return subprocess.run(["scontrol", *args], env=self.lab.env(), capture_output=True, text=True,
                              check=True, timeout=15).stdout

    def sbatch(self, node: str) -> str:
        return subprocess.run(
            ["sbatch", "--parsable", "--chdir=/tmp", "--output=/dev/null", "-p", "flex", "-w", node,
             "--wrap", "true"],
            env=self.lab.env(), capture_output=True, text=True, check=True, timeout=15,
        ).stdout.strip()

    def log(self) -> str:
        path = self.lab.root / "log" / "elastic.log"
        return path.read_text() if path.exists() else ""


def wait_for(cond: Callable[[], bool], timeout: float, what: str, elastic: Elastic) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}; elastic log:\n{elastic.log()}"
        time.sleep(0.5)


def in_service(store: Store, node: str) -> None:
    """The node went through the build: accepted (with a record) and joined its Slurm pool."""
    for event in ("inspect", "inspect_done", "provision", "provision_done", "burn_in", "accept"):
        store.transition(node, event, Actor.WORKFLOW, f"test setup: {event}")
    now = datetime.now(UTC) + timedelta(seconds=1)  # made after the build
    store.add_acceptance_record(AcceptanceRecord(f"acc-{node}", node, True, "quick", "h100-sxm-8", now,
                                                 now + timedelta(days=30), "policy:test", None, {}, None, None))
    store.transition(node, "join", Actor.WORKFLOW, "test setup: join", acceptance_record=f"acc-{node}")
    store.transition(node, "join_done", Actor.WORKFLOW, "test setup: in service")


@pytest.fixture(scope="module")
def elastic(site16: Inventory, tmp_path_factory: pytest.TempPathFactory, slurm_daemons: None) -> Iterator[Elastic]:
    work = tmp_path_factory.mktemp("elastic")
    data = site16.model_dump(mode="json")
    for n in data["nodes"]:
        if n["name"] == CRASHED:
            n["pool"] = "flex"
    inventory = Inventory.model_validate(data)
    db = f"sqlite:///{work / 'rl.sqlite'}"
    store = Store(db)
    store.import_inventory(inventory)
    for node in (LENT_A, LENT_B, CRASHED):
        in_service(store, node)
    store.close()
    kube = KubeStandIn().start()
    kubeconfig = kube.write_kubeconfig(work / "kubeconfig")
    root = Path(tempfile.mkdtemp(prefix="rle-", dir="/tmp"))
    conf = root / "etc" / "slurm.conf"
    hook = work / "hang_once.py"
    hook.write_text(HANG_ONCE)
    role_cmd = [sys.executable, str(hook), str(work / f"hang-{CRASHED}"), sys.executable, "-m",
                "lifecycle.lab.slurm_power", "role-switch", "--conf", str(conf), "--kubeconfig", str(kubeconfig)]
    program = [sys.executable, "-m", "lifecycle.workflows.elastic_worker"]
    env = {
        "RACKLIFE_DB": db, "RACKLIFE_KUBECONFIG": str(kubeconfig),
        "RACKLIFE_NODE_ROLE_CMD": shlex.join(role_cmd), "RACKLIFE_RECLAIM_DEADLINE_S": "3",
        "RACKLIFE_ELASTIC_LOG": str(root / "log" / "elastic.log"),
        "RACKLIFE_ELASTIC_LOCK_DIR": str(root / "locks"),
        # slurmctld runs the programs: they must import the code under test (a worktree's), not the installed one.
        **({"PYTHONPATH": os.environ["PYTHONPATH"]} if os.environ.get("PYTHONPATH") else {}),
    }
    lab = LabSlurm(LabSlurmConfig(
        inventory=inventory, root=root, start_nodes=[LENT_A, LENT_B, CRASHED], suspend_time_s=3600, resume_timeout_s=120,
        power_programs=((*program, "resume-program"), (*program, "suspend-program")),
        power_env=tuple(sorted(env.items())),
    ))
    assert lab.conf == conf
    lab.start()
    try:
        yield Elastic(lab, kube, kubeconfig, db, work)
    finally:
        subprocess.run(["scancel", "--user=root"], env=lab.env(), check=False, timeout=15)
        lab.stop()
        if os.environ.get("RACKLIFE_KEEP_LAB"):
            sys.stderr.write(f"lab kept in {root}\n")
        else:
            lab.remove()
        kube.stop()


def lend(elastic: Elastic, node: str) -> str:
    """Slurm suspends the idle node (what SuspendTime does, now); returns the lend run's id."""
    elastic.scontrol("update", f"nodename={node}", "state=power_down")
    wait_for(lambda: elastic.state(node) == State.LENT, 90, f"{node} to be lent", elastic)
    (lend_ev, lend_run), (done_ev, run) = elastic.events(node)[-2:]
    assert (lend_ev, done_ev) == ("lend", "lend_done") and run is not None and lend_run == run
    return run


def test_lend_then_a_job_reclaims_the_node_and_runs(elastic: Elastic) -> None:
    node = LENT_A
    lend_run = lend(elastic, node)
    # Kubernetes: the node serves the inference pool, schedulable.
    kube = elastic.kube_driver()
    try:
        k = kube.node(node)
        assert k.ready and not k.unschedulable and k.pool == "inference"
    finally:
        kube.close()
    # Slurm: powered down (lent), and racklife's lend drain is lifted so a job can call it back.
    s = elastic.slurm().node(node)
    assert s.state.powered_down and not s.state.drain, s.state
    assert f'"workflow_id": "{lend_run}"' in elastic.log() and lend_run.startswith(f"lend-{node}-")
    # The lend ran the node cycle every serving node's change runs (the role swap's): its phases, in its row.
    verdict, phases = elastic.trip(node, "lend")
    assert verdict == "done" and list(phases) == ["drain_wait", "switch", "join"], phases

    job = elastic.sbatch(node)
    wait_for(lambda: elastic.slurm().job(job).state == "COMPLETED", 150, f"job {job} on the reclaimed node",
             elastic)
    shown = elastic.scontrol("show", "job", "-o", job)
    assert f"NodeList={node}" in shown and "ExitCode=0:0" in shown
    assert elastic.state(node) == State.IN_SERVICE
    events = elastic.events(node)
    assert [e for e, _ in events][-4:] == ["lend", "lend_done", "reclaim", "reclaim_done"]
    reclaim_run = events[-1][1]
    assert reclaim_run and reclaim_run.startswith(f"reclaim-{node}-") and events[-2][1] == reclaim_run
    s = elastic.slurm().node(node)
    assert not s.state.powered_down and not s.state.drain and s.state.base in ("idle", "completing"), s.state
    verdict, phases = elastic.trip(node, "reclaim")
    assert verdict == "done" and list(phases) == ["drain_wait", "switch", "join"], phases
    # Kubernetes keeps the Node, cordoned by the reclaim run, its kubelet stopped.
    kube = elastic.kube_driver()
    try:
        k = kube.node(node)
        assert k.unschedulable and not k.ready
        assert k.owner.kind == "racklife" and k.owner.run_id == reclaim_run
    finally:
        kube.close()


def _set_floor(elastic: Elastic, pool: str, min_nodes: int) -> None:
    """The pool's ``min_nodes`` in the store (what importing an inventory with that floor writes)."""
    store = Store(elastic.db)
    try:
        spec = store.pool(pool).model_copy(update={"min_nodes": min_nodes}).model_dump_json()
        with store.engine.begin() as conn:
            conn.execute(sa.update(db.pools).where(db.pools.c.name == pool).values(spec=spec))
    finally:
        store.close()


def test_a_lend_refused_by_the_pool_floor_leaves_the_node_in_slurm(elastic: Elastic) -> None:
    """The flex pool's floor is every node in service: Slurm suspends one, racklife refuses with the numbers."""
    node = LENT_A
    assert elastic.state(node) == State.IN_SERVICE
    store = Store(elastic.db)
    try:
        serving = [r.name for r in store.nodes() if r.pool == "flex" and r.state is State.IN_SERVICE]
    finally:
        store.close()
    before = elastic.events(node)
    _set_floor(elastic, "flex", len(serving))
    try:
        elastic.scontrol("update", f"nodename={node}", "state=power_down")
        line = f'"node": "{node}", "ok": false, "state": "in_service", "reason": "refused, nothing changed: pool floor'
        wait_for(lambda: line in elastic.log(), 90, f"the lend of {node} to be refused", elastic)
    finally:
        _set_floor(elastic, "flex", 0)
    assert (f"pool flex: {len(serving)} in service, this request takes 1 out, {len(serving) - 1} would remain; "
            f"min_nodes is {len(serving)}") in elastic.log()
    # Nothing was touched: no lend event, no racklife drain in Slurm, the lease given back.
    assert elastic.state(node) == State.IN_SERVICE and elastic.events(node) == before
    s = elastic.slurm().node(node)
    assert not s.state.drain and s.owner.kind != "racklife", (s.state, s.reason)
    store = Store(elastic.db)
    try:
        assert node not in leases.holders(store)
    finally:
        store.close()
    # Slurm thinks it powered the node down; a job calls it back and runs on it (the reclaim only boots slurmd).
    job = elastic.sbatch(node)
    wait_for(lambda: elastic.slurm().job(job).state == "COMPLETED", 150, f"job {job} on the refused node",
             elastic)
    assert elastic.state(node) == State.IN_SERVICE and elastic.events(node) == before


def test_reclaim_blocked_by_a_budget_reports_and_keeps_the_pod(elastic: Elastic) -> None:
    node = LENT_B
    lend(elastic, node)
    elastic.kube.create_pod("llm-0", node, labels={"app": "llm"}, owner_kind="ReplicaSet")
    elastic.kube.create_pdb("llm", {"app": "llm"}, min_available=1)
    job = elastic.sbatch(node)
    wait_for(lambda: "reclaim_fail" in [e for e, _ in elastic.events(node)], 90, "the reclaim to give up",
             elastic)
    assert elastic.state(node) == State.LENT
    # Slurm: told at once, with racklife's reason naming the budget; the job waits, it is not lost.
    s = elastic.slurm().node(node)
    assert s.state.base == "down" and s.owner.kind == "racklife", (s.state, s.reason)
    assert "reclaim blocked" in s.reason and "disruption budget" in s.reason
    wait_for(lambda: elastic.slurm().job(job).state == "PENDING", 30, f"job {job} to be requeued", elastic)
    # Kubernetes: the pod is still there and the node serves again (the reclaim lifted its own cordon).
    pod = elastic.kube.request("GET", "/api/v1/namespaces/default/pods/llm-0")
    assert pod["spec"]["nodeName"] == node and "deletionTimestamp" not in pod["metadata"]
    kube = elastic.kube_driver()
    try:
        assert not kube.node(node).unschedulable
    finally:
        kube.close()
    verdict, phases = elastic.trip(node, "reclaim")  # the cycle's leave failed: nothing switched, rolled back
    assert verdict == "failed" and "drain_wait" in phases and "switch" not in phases, phases
    subprocess.run(["scancel", job], env=elastic.lab.env(), check=False, timeout=15)


def test_reclaim_without_a_valid_acceptance_record_fails_closed(elastic: Elastic) -> None:
    """A reclaimed node can be lent again (racklife lifts its own old cordon); without evidence it stays out."""
    node = LENT_A
    if elastic.state(node) != State.IN_SERVICE:  # run alone: bring it through one round trip first
        test_lend_then_a_job_reclaims_the_node_and_runs(elastic)
    lend(elastic, node)
    kube = elastic.kube_driver()
    try:
        assert not kube.node(node).unschedulable  # the previous reclaim's cordon, lifted by the lend
    finally:
        kube.close()
    store = Store(elastic.db)
    try:
        now = datetime.now(UTC)
        store.add_acceptance_record(AcceptanceRecord(f"acc-{node}-failed", node, False, "quick", "h100-sxm-8",
                                                     now, now + timedelta(days=30), "policy:test", None, {}, None,
                                                     None))
    finally:
        store.close()
    elastic.kube.create_pod("chat-0", node, labels={"app": "chat"}, owner_kind="ReplicaSet")
    job = elastic.sbatch(node)

    def refused() -> bool:
        s = elastic.slurm().node(node)
        return s.state.base == "down" and "acceptance record" in s.reason
    wait_for(refused, 90, "racklife to refuse the reclaim", elastic)
    s = elastic.slurm().node(node)
    assert s.owner.kind == "racklife" and "fail closed" in s.reason
    assert elastic.state(node) == State.LENT
    assert [e for e, _ in elastic.events(node)][-1] == "lend_done"  # no reclaim was even started
    pod = elastic.kube.request("GET", "/api/v1/namespaces/default/pods/chat-0")
    assert "deletionTimestamp" not in pod["metadata"]  # nothing was evicted for a node that may not run jobs
    wait_for(lambda: elastic.slurm().job(job).state == "PENDING", 30, f"job {job} to be requeued", elastic)
    subprocess.run(["scancel", job], env=elastic.lab.env(), check=False, timeout=15)


def workers(action: str, node: str) -> list[int]:
    """Host pids of the elastic workers for ``node`` (they run inside the lab's PID namespace)."""
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                argv = (proc / "cmdline").read_bytes().rstrip(b"\0").split(b"\0")
            except OSError:
                continue
            if b"lifecycle.workflows.elastic_worker" in argv and argv[-3:-1] == [action.encode(), node.encode()]:
                found.append(int(proc.name))
    return found


def test_a_worker_killed_mid_lend_is_finished_by_the_next_one(elastic: Elastic) -> None:
    node = CRASHED
    marker = elastic.work / f"hang-{node}"
    marker.write_text("hang once")
    elastic.scontrol("update", f"nodename={node}", "state=power_down")
    wait_for(lambda: not marker.exists(), 60, "the lend to reach the role switch", elastic)
    [pid] = workers("lend", node)
    os.killpg(os.getpgid(pid), signal.SIGKILL)  # the worker, its hook and the hook's sleep
    assert elastic.state(node) == State.LENDING
    first = elastic.events(node)[-1][1]
    assert first is not None
    # Slurm's node is drained by the cut-off run; the next program call for the node recovers the run.
    assert elastic.slurm().node(node).owner.run_id == first
    program = elastic.lab.run_inside(
        [sys.executable, "-m", "lifecycle.workflows.elastic_worker", "suspend-program", node],
        env=elastic.lab.env() | dict(elastic.lab.config.power_env),
    )
    assert program.returncode == 0, program.stderr
    second = json.loads(program.stdout)["started"][0]["workflow_id"]
    wait_for(lambda: elastic.state(node) == State.LENT, 120, f"{node} to be lent by the recovered run", elastic)
    assert [(e, r) for e, r in elastic.events(node)][-2:] == [("lend", first), ("lend_done", first)]
    wait_for(lambda: f'"workflow_id": "{second}", "node"' in elastic.log(), 60, "the second worker's report",
             elastic)
    report = next(json.loads(line) for line in elastic.log().splitlines()
                  if f'"workflow_id": "{second}", "node"' in line)
    assert report["ok"] and report["reason"] == "already lent"
    store = Store(elastic.db)
    try:
        assert [c.kind for c in store.changes(node)].count("lend") == 1  # one cycle, finished once
    finally:
        store.close()
    s = elastic.slurm().node(node)
    assert s.state.powered_down and not s.state.drain


def test_a_reclaim_never_drains_a_node_someone_else_cordoned(elastic: Elastic) -> None:
    """kubectl cordon by an admin on a lent node: the reclaim fails closed and evicts nothing."""
    node = LENT_B
    if elastic.state(node) != State.LENT:
        lend(elastic, node)
    elastic.kube.create_pod("web-0", node, labels={"app": "web"}, owner_kind="ReplicaSet")
    elastic.kube.request("PATCH", f"/api/v1/nodes/{node}", {"spec": {"unschedulable": True}},
                         content_type="application/merge-patch+json")
    failed = [e for e, _ in elastic.events(node)].count("reclaim_fail")
    program = elastic.lab.run_inside(
        [sys.executable, "-m", "lifecycle.workflows.elastic_worker", "resume-program", node],
        env=elastic.lab.env() | dict(elastic.lab.config.power_env),
    )
    assert program.returncode == 0, program.stderr
    wait_for(lambda: [e for e, _ in elastic.events(node)].count("reclaim_fail") > failed, 90,
             "the reclaim to refuse", elastic)
    assert elastic.state(node) == State.LENT
    pod = elastic.kube.request("GET", "/api/v1/namespaces/default/pods/web-0")
    assert pod["spec"]["nodeName"] == node and "deletionTimestamp" not in pod["metadata"], pod["metadata"]
    kube = elastic.kube_driver()
    try:
        k = kube.node(node)
        assert k.unschedulable and k.owner.kind == "other", k.owner  # the admin's cordon stays
    finally:
        kube.close()

"""`racklife role-swap` on a built 4-node lab: real Slurm, the Kubernetes stand-in, the real kubectl.

node-01..03 start in the training pool (Slurm), node-04 in inference
(Kubernetes). The tests run in order on one lab: a dry run changes nothing; a
swap that would break the training pool's floor is refused with the numbers;
node-03 moves to inference while a job runs on it (``wait``: the job
finishes first) and ends Ready in Kubernetes with the pool's labels and no
taint of racklife's; back to training, a PodDisruptionBudget blocks the
drain (the report names the pod, the node is rolled back and serves
Kubernetes again) until the budget is relaxed, and Slurm then shows it idle
in the training partition; node-02 moves under ``requeue`` (its job is
requeued and completes on another node) with the controller SIGKILLed in the
drain wait, and the next `racklife role-swap` finishes that run exactly once;
a fault injected into node-03 while it serves fails the re-test: quarantined,
not joined, the reason recorded; after `apply` moved node-01/02 back to
training, node-02 moves to inference again with the controller SIGKILLed in
the re-test (after its pool moved), and the next `racklife role-swap`
finishes that run exactly once too. The lab's role-switch hook (exported by
`racklife lab env`) stops or boots the node's slurmd and registers its Node.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from lifecycle.lab.kube.run import KubeAdmin
from lifecycle.store import Store
from tests.e2e.conftest import EXE, RunningLab

pytestmark = [pytest.mark.xdist_group("lab"), pytest.mark.slow]


@pytest.fixture(scope="module")
def lab(minimal_image: Path) -> Iterator[RunningLab]:
    running = RunningLab(4)
    try:
        res = running.racklife("build", str(running.inventory), "--images", str(minimal_image), "--boot-timeout",
                               "60", timeout=1500)
        assert res.returncode == 0, res.stdout + res.stderr
        yield running
    finally:
        running.down()


def wait_for(done: Callable[[], bool], seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not done():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)


def swap(lab: RunningLab, *args: str) -> tuple[int, Any]:
    res = lab.racklife("role-swap", *args, "--json", timeout=900)
    assert "Traceback" not in res.stderr, res.stderr
    return res.returncode, json.loads(res.stdout)


def node(lab: RunningLab, name: str) -> dict[str, Any]:
    return next(n for n in json.loads(lab.racklife("nodes", "list", "--json").stdout) if n["name"] == name)


def history(lab: RunningLab, name: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = json.loads(lab.racklife("node", "history", name, "--json").stdout)
    return out


def kubectl(lab: RunningLab, tmp: Path, *args: str) -> Any:
    binary = shutil.which("kubectl")
    if binary is None:
        pytest.fail("kubectl is not on PATH: this test needs the real client")
    done = subprocess.run([binary, "--kubeconfig", lab.env["KUBECONFIG"], "--cache-dir", str(tmp / "kcache"),
                           "--request-timeout=20s", *args, "-o", "json"],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout)


def sbatch(lab: RunningLab, *args: str) -> str:
    return subprocess.run(["sbatch", "--parsable", "--chdir=/tmp", "--output=/dev/null", "-p", "training", *args],
                          env=lab.env, capture_output=True, text=True, check=True, timeout=15).stdout.strip()


def job_state(lab: RunningLab, job: str) -> tuple[str, str]:
    out = subprocess.run(["squeue", "-h", "-j", job, "-o", "%T %N"], env=lab.env, capture_output=True, text=True,
                         timeout=15, check=False).stdout.split()
    return (out[0], out[1] if len(out) > 1 else "") if out else ("GONE", "")


def sinfo(lab: RunningLab, name: str) -> tuple[str, str]:
    out = subprocess.run(["sinfo", "-h", "-N", "-n", name, "-o", "%T %P"], env=lab.env, capture_output=True,
                         text=True, timeout=15, check=True).stdout.split()
    return out[0], out[1].rstrip("*")


def admin(lab: RunningLab) -> KubeAdmin:
    return KubeAdmin.from_kubeconfig(Path(lab.env["KUBECONFIG"]))


def _a_dry_run_prints_the_plan_and_changes_nothing(lab: RunningLab) -> None:
    job = sbatch(lab, "-w", "node-03", "--wrap", "sleep 20")
    wait_for(lambda: job_state(lab, job)[0] == "RUNNING", 30, "the job to run")
    before = len(history(lab, "node-03"))
    code, out = swap(lab, "node-03", "--to", "inference", "--dry-run")
    assert code == 0, out
    [plan] = out["nodes"]
    assert plan["ok"] and plan["source"] == "training", plan
    assert {c["name"] for c in plan["checks"]} >= {"in service in the other pool", "pool floor",
                                                   "no foreign drain or cordon"}
    assert any(job in t for t in plan["would_touch"]), plan["would_touch"]
    assert any("re-test" in line for line in plan["plan"])
    assert len(history(lab, "node-03")) == before and node(lab, "node-03")["state"] == "in_service"
    assert sinfo(lab, "node-03")[0] in ("mixed", "allocated")  # not drained
    wait_for(lambda: job_state(lab, job)[0] == "GONE", 90, "the job to end")


def _a_swap_that_breaks_the_floor_is_refused_with_the_numbers(lab: RunningLab, tmp_path: Path) -> None:
    doc = yaml.safe_load(lab.inventory.read_text())
    doc["pools"]["training"]["min_nodes"] = 3
    floored = tmp_path / "inventory.yaml"
    floored.write_text(yaml.safe_dump(doc))
    imported = lab.racklife("inventory", "import", str(floored))
    assert imported.returncode == 0, imported.stdout + imported.stderr
    try:
        before = len(history(lab, "node-03"))
        code, out = swap(lab, "node-03", "--to", "inference")
        assert code == 5, out
        assert "pool training: 3 in service, this request takes 1 out, 2 would remain; min_nodes is 3" \
            in out[0]["reason"], out
        assert node(lab, "node-03")["state"] == "in_service" and len(history(lab, "node-03")) == before
        assert "drain" not in sinfo(lab, "node-03")[0]
    finally:
        assert lab.racklife("inventory", "import", str(lab.inventory)).returncode == 0


def _training_to_inference_waits_for_the_running_job(lab: RunningLab, tmp_path: Path) -> None:
    job = sbatch(lab, "-w", "node-03", "--wrap", "sleep 20")
    wait_for(lambda: job_state(lab, job)[0] == "RUNNING", 30, "the job to run")
    code, out = swap(lab, "node-03", "--to", "inference", "--policy", "wait", "--deadline", "2m")
    assert code == 0, out
    [o] = out
    assert o["ok"] and o["state"] == "in_service" and o["pool"] == "inference", o
    touched = {j["job_id"]: j for j in o["leave"]["report"]["jobs"]}
    assert job in touched, o["leave"]
    assert job_state(lab, job)[0] == "GONE"  # it ran to its end on node-03
    k = kubectl(lab, tmp_path, "get", "node", "node-03")
    assert {c["type"]: c["status"] for c in k["status"]["conditions"]}["Ready"] == "True"
    assert k["metadata"]["labels"]["racklife.io/pool"] == "inference"
    assert not k["spec"].get("unschedulable")
    assert all(t["key"] != "racklife.io/maintenance" for t in k["spec"].get("taints", []))
    assert k["status"]["allocatable"]["nvidia.com/gpu"] == "8"
    rows = [h for h in history(lab, "node-03") if h["event"] == "role-swap"]
    assert rows and rows[-1]["from"] == "training" and rows[-1]["to"] == "inference", rows
    assert "drain wait" in rows[-1]["reason"] and "retest" in rows[-1]["reason"] and "join" in rows[-1]["reason"]


def _inference_to_training_waits_for_a_budget_then_completes(lab: RunningLab) -> None:
    kube = admin(lab)
    kube.create_pod("llm-0", "node-03", labels={"app": "llm"}, owner_kind="ReplicaSet")
    kube.create_pdb("llm", {"app": "llm"}, min_available=1)
    code, out = swap(lab, "node-03", "--to", "training", "--deadline", "5s")
    assert code == 1, out
    [o] = out
    assert not o["ok"] and "llm-0" in o["reason"] and "PodDisruptionBudget default/llm" in o["reason"], o
    assert o["state"] == "in_service" and o["pool"] == "inference", o  # rolled back: serving Kubernetes again
    assert not kube.request("GET", "/api/v1/nodes/node-03")["spec"].get("unschedulable")
    kube.request("DELETE", "/apis/policy/v1/namespaces/default/poddisruptionbudgets/llm")
    code, out = swap(lab, "node-03", "--to", "training", "--deadline", "60s")
    assert code == 0, out
    assert out[0]["state"] == "in_service" and out[0]["pool"] == "training", out
    assert "default/llm-0" in out[0]["leave"]["report"]["evicted"]
    wait_for(lambda: sinfo(lab, "node-03") == ("idle", "training"), 60, "node-03 idle in the training partition")


def store_state(lab: RunningLab, name: str) -> str:
    store = Store(f"sqlite:///{Path(lab.env['RACKLIFE_HOME']) / 'racklife.sqlite'}")
    try:
        return store.get(name).state.value
    finally:
        store.close()


def _the_controller_killed_in_the_drain_wait_is_finished_exactly_once(lab: RunningLab) -> None:
    job = sbatch(lab, "-w", "node-02", "--wrap", "sleep 25")
    wait_for(lambda: job_state(lab, job)[0] == "RUNNING", 30, "the job to run")
    with subprocess.Popen([EXE, "role-swap", "node-02", "--to", "inference", "--policy", "wait", "--json"],
                          env=lab.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          start_new_session=True) as first:
        wait_for(lambda: store_state(lab, "node-02") == "draining", 60, "the swap to drain node-02")
        time.sleep(1)
        os.killpg(first.pid, signal.SIGKILL)
        first.wait(30)
    assert job_state(lab, job)[0] == "RUNNING"  # killed in the drain wait
    run = next(h["run_id"] for h in reversed(history(lab, "node-02")) if h["event"] == "drain")
    code, out = swap(lab, "node-02", "--to", "inference")  # finishes the cut-off run, with its settings
    assert code == 0, out
    assert out[0]["ok"] and out[0]["pool"] == "inference", out
    events = [h["event"] for h in history(lab, "node-02") if h["run_id"] == run]
    assert events.count("drain") == 1 and events.count("join_done") == 1, events
    assert len([h for h in history(lab, "node-02") if h["event"] == "role-swap"]) == 1
    assert [h["event"] for h in history(lab, "node-02")].count("pool") == 1


def _training_to_inference_requeues_the_job_which_completes_elsewhere(lab: RunningLab) -> None:
    blocker = sbatch(lab, "-w", "node-03", "--exclusive", "--wrap", "sleep 15")
    job = sbatch(lab, "--exclusive", "--requeue", "--wrap", "sleep 20")
    wait_for(lambda: job_state(lab, job) == ("RUNNING", "node-01"), 30, "the job to run on node-01")
    code, out = swap(lab, "node-01", "--to", "inference", "--policy", "requeue", "--deadline", "0s")
    assert code == 0, out
    assert out[0]["ok"] and out[0]["pool"] == "inference", out
    touched = {j["job_id"]: j for j in out[0]["leave"]["report"]["jobs"]}
    assert job in touched and touched[job]["action"] == "requeued", touched
    wait_for(lambda: job_state(lab, job) == ("RUNNING", "node-03"), 60, "the requeued job to run on node-03")
    wait_for(lambda: job_state(lab, job)[0] == "GONE", 60, "the requeued job to complete")
    subprocess.run(["scancel", blocker], env=lab.env, check=False, timeout=15)


def _a_retest_failure_quarantines_and_does_not_join(lab: RunningLab) -> None:
    res = lab.racklife("lab", "fault", "node-03", "xid79", "--dir", str(lab.dir))
    assert res.returncode == 0, res.stderr
    code, out = swap(lab, "node-03", "--to", "inference")
    assert code == 1, out
    [o] = out
    assert o["state"] == "quarantined" and "re-test" in o["reason"], o
    assert not o["join"], o
    reasons = [h["reason"] for h in history(lab, "node-03") if h["event"] == "quarantine"]
    assert reasons and "79" in reasons[-1], reasons
    held = admin(lab).request("GET", "/api/v1/nodes/node-03")  # cordoned by racklife: it takes no pods
    assert held["spec"].get("unschedulable") and held["metadata"]["annotations"].get("racklife.io/cordoned-by")
    assert "drain" in sinfo(lab, "node-03")[0]  # and takes no jobs


def _apply_of_a_changed_pool_is_a_role_swap(lab: RunningLab) -> None:
    """The lab's own inventory still says node-01 and node-02 are training nodes: apply swaps them back.

    The earlier tests of this module move them to inference by hand, but xdist does not promise that they ran
    first (in one CI run this test ran before them): a node still in training is moved here first.
    """
    for n in ("node-01", "node-02"):
        if node(lab, n)["pool"] == "training":
            code, out = swap(lab, n, "--to", "inference", "--policy", "requeue", "--deadline", "0s")
            assert code == 0, out
    res = lab.racklife("apply", str(lab.inventory), "--yes", "--json", "--max-unavailable", "3", timeout=900)
    assert "Traceback" not in res.stderr, res.stderr
    report = json.loads(res.stdout)
    moved = {(d["node"], d["action"], d["ok"]) for d in report["done"]}
    assert {("node-01", "move-pool", True), ("node-02", "move-pool", True)} <= moved, report
    for n in ("node-01", "node-02"):
        assert node(lab, n)["pool"] == "training" and node(lab, n)["state"] == "in_service"
        wait_for(lambda n=n: sinfo(lab, n) == ("idle", "training"), 60, f"{n} idle in the training partition")
    if node(lab, "node-03")["state"] == "quarantined":  # the re-test test ran: a blocker apply never acts through
        assert res.returncode == 1 and not report["converged"], report
    else:
        assert res.returncode == 0 and report["converged"], report


def _the_controller_killed_in_the_retest_is_finished_exactly_once(lab: RunningLab) -> None:
    """Cut off after the pool moved (node burning_in): the recovered run replays what it saw, not the store.

    The Slurm leave read the node's pool from the store: on replay it was already the target, the leave took
    its "not a Slurm pool" branch and DBOS failed the run ("transition was recorded when release_leases was
    expected"), leaving the node burning_in for an operator.
    """
    assert node(lab, "node-02")["pool"] == "training" and node(lab, "node-02")["state"] == "in_service"
    with subprocess.Popen([EXE, "role-swap", "node-02", "--to", "inference", "--json"],
                          env=lab.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          start_new_session=True) as first:
        wait_for(lambda: store_state(lab, "node-02") == "burning_in", 120, "the swap's re-test of node-02")
        os.killpg(first.pid, signal.SIGKILL)
        first.wait(30)
    assert node(lab, "node-02")["pool"] == "inference"  # cut off after the move, in the re-test
    run = next(h["run_id"] for h in reversed(history(lab, "node-02")) if h["event"] == "drain")
    code, out = swap(lab, "node-02", "--to", "inference")  # finishes the cut-off run
    assert code == 0, out
    assert out[0]["ok"] and out[0]["pool"] == "inference" and out[0]["state"] == "in_service", out
    events = [h["event"] for h in history(lab, "node-02") if h["run_id"] == run]
    assert events.count("drain") == 1 and events.count("join_done") == 1, events


SCENARIOS = [(_a_dry_run_prints_the_plan_and_changes_nothing, False), (_a_swap_that_breaks_the_floor_is_refused_with_the_numbers, True), (_training_to_inference_waits_for_the_running_job, True), (_inference_to_training_waits_for_a_budget_then_completes, False), (_the_controller_killed_in_the_drain_wait_is_finished_exactly_once, False), (_training_to_inference_requeues_the_job_which_completes_elsewhere, False), (_a_retest_failure_quarantines_and_does_not_join, False), (_apply_of_a_changed_pool_is_a_role_swap, False), (_the_controller_killed_in_the_retest_is_finished_exactly_once, False)]


def test_role_swap_scenarios_in_order(lab: RunningLab, tmp_path_factory: pytest.TempPathFactory) -> None:
    """The scenarios share one lab and each starts where the one before left the nodes.

    They are one test, run in this order: as separate tests xdist did not keep their file order in CI.
    """
    for scenario, wants_tmp in SCENARIOS:
        if wants_tmp:
            scenario(lab, tmp_path_factory.mktemp(scenario.__name__.strip("_")))
        else:
            scenario(lab)  # type: ignore[call-arg]

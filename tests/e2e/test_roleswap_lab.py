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
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from functools import partial
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
import yaml

from lifecycle.lab.kube.run import KubeAdmin
from lifecycle.store import Store, leases
from tests.e2e.conftest import EXE, RunningLab, built_lab, wait_for

pytestmark = [pytest.mark.xdist_group("lab"), pytest.mark.slow]
IMAGES: list[Path] = []  # the built images the lab was built from (a --reimage boots them again)


@pytest.fixture(scope="module")
def lab(minimal_image: Path) -> Iterator[RunningLab]:
    IMAGES[:] = [minimal_image]
    with built_lab(4, minimal_image) as running:
        yield running


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
    subprocess.run(["scancel", job], env=lab.env, check=True, timeout=15)  # it has served: not waited out
    wait_for(lambda: job_state(lab, job)[0] == "GONE", 60, "the job to end")


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
    # Not --json: the progress on stderr (plain lines, no terminal) names the job the drain waits on.
    res = lab.racklife("role-swap", "node-03", "--to", "inference", "--policy", "wait", "--deadline", "2m",
                       timeout=900, env_extra={"COLUMNS": "200"})
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stdout + res.stderr
    assert re.search(rf"^\d\d:\d\d:\d\d node-03 draining \([^)]*\): waiting on drain of job {job} \(root, wrap\) "
                     r"\(deadline 120 s\) for ", res.stderr, re.MULTILINE), res.stderr
    o = node(lab, "node-03")
    assert o["state"] == "in_service" and o["pool"] == "inference", o
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


# The lab's role-switch hook, wrapped: the first switch to Kubernetes returns at once and leaves the Node to
# register only once GO exists, so the join waits for Ready (the node ``joining``) as long as the test needs.
LATE_KUBELET = """import os, sys, time
from pathlib import Path
once, go = Path(sys.argv[1]), Path(sys.argv[2])
cmd, role, node = sys.argv[3:-2], sys.argv[-2], sys.argv[-1]
if role == "kubernetes" and once.exists():
    once.unlink()
    if os.fork() == 0:  # the kubelet comes up later, in its own session (a killed controller does not stop it)
        os.setsid()
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        while not go.exists():
            time.sleep(0.2)
        os.execv(cmd[0], [*cmd, role, node])
    sys.exit(0)
os.execv(cmd[0], [*cmd, role, node])
"""


class NodeWatch:
    """``kubectl get nodes -w`` for the whole scenario: what Kubernetes saw happen to one Node, event by event."""

    def __init__(self, lab: RunningLab, tmp: Path, name: str) -> None:
        binary = shutil.which("kubectl")
        if binary is None:
            pytest.fail("kubectl is not on PATH: this test needs the real client")
        self.name = name
        self.out = tmp / "watch.json"
        self._file = self.out.open("w")
        self.proc = subprocess.Popen([binary, "--kubeconfig", lab.env["KUBECONFIG"], "--cache-dir", str(tmp / "kc"),
                                      "get", "nodes", "-w", "--output-watch-events", "-o", "json"],
                                     stdout=self._file, stderr=subprocess.STDOUT)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)
        self._file.close()

    def objects(self) -> list[dict[str, Any]]:
        text, decoder, at = self.out.read_text(), json.JSONDecoder(), 0
        out: list[dict[str, Any]] = []
        while True:
            while at < len(text) and text[at].isspace():
                at += 1
            if at >= len(text):
                return out
            event, at = decoder.raw_decode(text, at)
            if event.get("object", {}).get("metadata", {}).get("name") == self.name:
                out.append(event["object"])

    def joins(self, pool: str) -> int:
        """How many times the Node took ``pool``'s label (from no label or another pool's)."""
        seen, count = None, 0
        for o in self.objects():
            label = o["metadata"].get("labels", {}).get("racklife.io/pool")
            count += label == pool and seen != pool
            seen = label
        return count


def drains(lab: RunningLab, name: str) -> list[str]:
    """The racklife drains slurmctld applied to the node, with their reasons, read from its own log.

    A drain is logged as the reason set, then the state set to DRAINING or DRAINED. The lab's power-off
    of a drained node (a reimage) sets it DOWN keeping the drain's reason, as slurmctld does when a node
    stops answering: that is no drain.
    """
    log = [line.split("] ", 1)[-1] for line in
           (lab.dir / "slurm" / "log" / "slurmctld.log").read_text().splitlines()]
    reason, state = f"update_node: node {name} reason set to: ", f"update_node: node {name} state set to "
    return [line.removeprefix(reason) for line, after in pairwise(log)
            if line.startswith(reason + "racklife:") and after.startswith(state + "DRAIN")]


def holder(lab: RunningLab, name: str) -> str | None:
    store = Store(f"sqlite:///{Path(lab.env['RACKLIFE_HOME']) / 'racklife.sqlite'}")
    try:
        lease = leases.holders(store, [name]).get(name)
        return lease.run_id if lease else None
    finally:
        store.close()


def _reached_or_ended(reached: Callable[[], bool], ctl: subprocess.Popen[bytes]) -> bool:
    return reached() or ctl.poll() is not None


def _the_controller_killed_in_every_phase_is_finished_exactly_once(lab: RunningLab, tmp: Path) -> None:
    """One swap of node-02 to inference with --reimage, its controller SIGKILLed in each phase in turn.

    Each kill point is read from the world, not guessed: the run holding the node's lease (the pre-checks
    and the start of the leave), ``draining`` while a job runs under ``wait`` (the drain wait),
    ``reprovisioning`` (the reimage), ``burning_in`` (the re-test, after the pool moved: a recovered run
    must replay what it saw, not read the store), ``joining`` while the Node has not registered (the join).
    Each time the next `racklife role-swap` finishes the cut-off run with the settings it started with; at
    the end slurmctld applied one drain, Kubernetes saw the Node take the pool once, the lab switched its
    role once, and the node is in service in inference with one role-swap row.
    """
    once, go = tmp / "late-kubelet-once", tmp / "late-kubelet-go"
    hook = tmp / "late_kubelet.py"
    hook.write_text(LATE_KUBELET)
    once.write_text("once")
    env = lab.env | {"RACKLIFE_NODE_ROLE_CMD": shlex.join([sys.executable, str(hook), str(once), str(go),
                                                           *shlex.split(lab.env["RACKLIFE_NODE_ROLE_CMD"])])}
    args = [EXE, "role-swap", "node-02", "--to", "inference", "--policy", "wait", "--reimage", "--image", "minimal",
            "--images", str(IMAGES[0]), "--boot-timeout", "60", "--json"]
    power_log = lab.dir / "slurm" / "log" / "power.log"
    switches_before = power_log.read_text().count("role node-02: kubernetes") if power_log.exists() else 0
    drains_before = len(drains(lab, "node-02"))
    watch = NodeWatch(lab, tmp, "node-02")
    job = sbatch(lab, "-w", "node-02", "--wrap", "sleep 30")
    wait_for(lambda: job_state(lab, job)[0] == "RUNNING", 30, "the job to run")
    kill_points: list[tuple[str, Callable[[], bool]]] = [
        ("pre-check", lambda: holder(lab, "node-02") is not None),
        ("drain wait", lambda: store_state(lab, "node-02") == "draining"),
        ("reimage", lambda: store_state(lab, "node-02") == "reprovisioning"),
        ("re-test", lambda: store_state(lab, "node-02") == "burning_in"),
        ("join", lambda: store_state(lab, "node-02") == "joining"),
    ]
    killed: list[tuple[str, str]] = []
    try:
        for phase, reached in kill_points:
            log = tmp / f"controller-{len(killed)}.log"
            with log.open("wb") as err, subprocess.Popen(args, env=env, stdout=err, stderr=err,
                                                         start_new_session=True) as ctl:
                wait_for(partial(_reached_or_ended, reached, ctl), 300, f"the swap to reach its {phase}")
                assert ctl.poll() is None, f"the swap ended before its {phase}: {log.read_text()}"
                if phase == "drain wait":
                    time.sleep(1)
                os.killpg(ctl.pid, signal.SIGKILL)
                ctl.wait(30)
            killed.append((phase, store_state(lab, "node-02")))
            if phase == "drain wait":
                assert job_state(lab, job)[0] == "RUNNING", killed  # cut off while it waited for the job
        go.touch()  # the Node registers now; the join the last controller was waiting in can finish
        code, out = swap(lab, *args[2:-1])
    finally:
        go.touch()
        watch.stop()
    assert code == 0, (killed, out)
    [o] = out
    assert o["ok"] and o["pool"] == "inference" and o["state"] == "in_service", (killed, o)
    assert list(o["phases"]) == ["drain_wait", "move", "reimage", "switch", "retest", "join"], o["phases"]
    assert [p for p, _ in killed] == [p for p, _ in kill_points]
    assert killed[2][1] == "reprovisioning" and killed[3][1] == "burning_in" and killed[4][1] == "joining", killed
    # Counted from the world: one drain (slurmctld), one role switch (the lab's hook), one join (Kubernetes).
    new_drains = drains(lab, "node-02")[drains_before:]
    assert len(new_drains) == 1 and "role swap to inference" in new_drains[0], new_drains
    assert power_log.read_text().count("role node-02: kubernetes") == switches_before + 1
    assert watch.joins("inference") == 1, watch.objects()
    run = new_drains[0].split(":")[1]
    events = [h["event"] for h in history(lab, "node-02") if h["run_id"] == run]
    assert events.count("drain") == 1 and events.count("join_done") == 1, events
    assert len([h for h in history(lab, "node-02") if h["event"] == "role-swap"]) == 1
    assert [h["event"] for h in history(lab, "node-02")].count("pool") == 1
    k = admin(lab).request("GET", "/api/v1/nodes/node-02")
    assert not k["spec"].get("unschedulable") and k["metadata"]["labels"]["racklife.io/pool"] == "inference"
    assert job_state(lab, job)[0] == "GONE"  # the job ran to its end


def _training_to_inference_requeues_the_job_which_completes_elsewhere(lab: RunningLab) -> None:
    blocker = sbatch(lab, "-w", "node-03", "--exclusive", "--wrap", "sleep 15")
    job = sbatch(lab, "--exclusive", "--requeue", "--wrap", "sleep 20")
    wait_for(lambda: job_state(lab, job) == ("RUNNING", "node-01"), 30, "the job to run on node-01")
    code, out = swap(lab, "node-01", "--to", "inference", "--policy", "requeue", "--deadline", "0s")
    assert code == 0, out
    assert out[0]["ok"] and out[0]["pool"] == "inference", out
    touched = {j["job_id"]: j for j in out[0]["leave"]["report"]["jobs"]}
    assert job in touched and touched[job]["action"] == "requeued", touched
    subprocess.run(["scancel", blocker], env=lab.env, check=False, timeout=15)  # node-03 free now, not in 15 s
    wait_for(lambda: job_state(lab, job) == ("RUNNING", "node-03"), 60, "the requeued job to run on node-03")
    wait_for(lambda: job_state(lab, job)[0] == "GONE", 60, "the requeued job to complete")


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


SCENARIOS = [(_a_dry_run_prints_the_plan_and_changes_nothing, False), (_a_swap_that_breaks_the_floor_is_refused_with_the_numbers, True), (_training_to_inference_waits_for_the_running_job, True), (_inference_to_training_waits_for_a_budget_then_completes, False), (_the_controller_killed_in_every_phase_is_finished_exactly_once, True), (_training_to_inference_requeues_the_job_which_completes_elsewhere, False), (_a_retest_failure_quarantines_and_does_not_join, False), (_apply_of_a_changed_pool_is_a_role_swap, False)]


def test_role_swap_scenarios_in_order(lab: RunningLab, tmp_path_factory: pytest.TempPathFactory) -> None:
    """The scenarios share one lab and each starts where the one before left the nodes.

    They are one test, run in this order: as separate tests xdist did not keep their file order in CI.
    """
    for scenario, wants_tmp in SCENARIOS:
        if wants_tmp:
            scenario(lab, tmp_path_factory.mktemp(scenario.__name__.strip("_")))
        else:
            scenario(lab)  # type: ignore[call-arg]

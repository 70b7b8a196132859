"""The driver against a real Slurm 22.05 cluster started by the lab (munge, slurmctld, 14 slurmd, slurmrestd)."""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from lifecycle.cli import app
from lifecycle.drivers.errors import OperationFailed
from lifecycle.drivers.slurm.driver import NotOurs, SlurmDriver
from lifecycle.drivers.slurm.leave import leave
from lifecycle.drivers.slurm.render import lendable_nodes, render, slurm_nodes
from lifecycle.drivers.slurm.runner import CommandRunner, RestClient
from lifecycle.lab.ports import ephemeral_range
from lifecycle.lab.slurm import LabSlurm, LabSlurmConfig, running
from lifecycle.model.inventory import load_inventory

pytestmark = [pytest.mark.root, pytest.mark.slow]


def wait_for(cond: Callable[[], bool], timeout: float, what: str,
             seen: Callable[[], object] | None = None) -> None:
    """Wait for ``cond``; on timeout say what ``seen`` shows then (the state that never changed)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.2)
    last = f"; last seen: {seen()}" if seen is not None else ""
    raise AssertionError(f"timed out after {timeout}s waiting for {what}{last}")


@pytest.fixture
def driver(lab: LabSlurm) -> Iterator[SlurmDriver]:
    drv = SlurmDriver(CommandRunner(env=lab.env(), timeout_s=15))
    yield drv
    # Leave the shared cluster as found: our drains lifted, jobs gone.
    subprocess.run(["scancel", "--user=root"], env=lab.env(), check=False, timeout=15)
    for node in drv.nodes():
        if node.owner.kind == "racklife" and node.state.drain:
            drv.resume_if_ours([node.name])


def sbatch(lab: LabSlurm, *args: str) -> str:
    res = subprocess.run(
        ["sbatch", "--parsable", "--chdir=/tmp", "--output=/dev/null", *args],
        env=lab.env(), capture_output=True, text=True, timeout=15, check=True,
    )
    return res.stdout.strip().split(";")[0]


def test_cluster_up_with_partitions_gres_and_features(driver: SlurmDriver) -> None:
    parts = driver.partitions()
    assert parts["train"] == tuple(f"gpu-{i:03d}" for i in range(1, 13))
    assert parts["flex"] == ("gpu-013", "gpu-014")
    nodes = {n.name: n for n in driver.nodes()}
    assert "gpu-015" not in nodes  # a Kubernetes node
    node = nodes["gpu-009"]
    assert node.gres == "gpu:h100:8"
    assert node.cpus == 224
    assert "leaf-b" in node.features and "nvl-2" in node.features
    assert nodes["gpu-013"].state.powered_down  # lendable nodes start lent


def _listening(ports: set[int]) -> dict[int, str]:
    """Port -> local address of the IPv4 TCP sockets listening on those ports (from /proc/net/tcp)."""
    found: dict[int, str] = {}
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, state = fields[1], fields[3]
        addr, port = local.split(":")
        if state == "0A" and int(port, 16) in ports:  # 0A: LISTEN
            found[int(port, 16)] = ".".join(str(b) for b in reversed(bytes.fromhex(addr)))
    return found


def test_daemons_listen_on_loopback_only(lab: LabSlurm) -> None:
    lent = {n.name for n in lendable_nodes(lab.config.inventory)}  # powered off: nothing listens
    running = {p for name, p in lab.ports.items() if name not in lent}
    assert _listening(running) == dict.fromkeys(running, "127.0.0.1")


def test_gres_enforced(lab: LabSlurm) -> None:
    ok = subprocess.run(
        ["srun", "--immediate=10", "-p", "train", "-N1", "--gres=gpu:h100:2",
         "printenv", "CUDA_VISIBLE_DEVICES"],
        env=lab.env(), capture_output=True, text=True, timeout=30, check=False, cwd="/tmp",
    )
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.strip() == "0,1"
    too_many = subprocess.run(
        ["srun", "--immediate=5", "-p", "train", "-N1", "--gres=gpu:9", "true"],
        env=lab.env(), capture_output=True, text=True, timeout=30, check=False, cwd="/tmp",
    )
    assert too_many.returncode != 0


def test_tree_topology_loaded(lab: LabSlurm) -> None:
    out = subprocess.run(["scontrol", "show", "topology"], env=lab.env(), capture_output=True,
                         text=True, timeout=10, check=True).stdout
    assert "SwitchName=leaf-a Level=0 LinkSpeed=1 Nodes=gpu-[001-008]" in out
    assert "SwitchName=spine-1 Level=1 LinkSpeed=1 Nodes=gpu-[001-014] Switches=leaf-a,leaf-b" in out


def test_rest_reads_agree_with_scontrol(lab: LabSlurm, driver: SlurmDriver) -> None:
    assert lab.rest_url
    rest = SlurmDriver(driver.run, RestClient(lab.rest_url, lab.token()))
    by_cli = {n.name: (n.state, n.partitions, n.gres) for n in driver.nodes()}
    by_rest = {n.name: (n.state, n.partitions, n.gres) for n in rest.nodes()}
    assert by_rest == by_cli
    bad = SlurmDriver(driver.run, RestClient(lab.rest_url, "not-a-token"))
    with pytest.raises(Exception) as info:
        bad.nodes()
    assert type(info.value).__name__ in ("AuthFailed", "OperationFailed")
    assert "not-a-token" not in str(info.value)


def test_admin_drain_is_never_resumed(lab: LabSlurm, driver: SlurmDriver) -> None:
    subprocess.run(["scontrol", "update", "nodename=gpu-005", "state=drain", "reason=admin: bad DIMM"],
                   env=lab.env(), check=True, timeout=10)
    try:
        with pytest.raises(NotOurs) as info:
            driver.resume_if_ours(["gpu-004", "gpu-005"])
        assert "admin: bad DIMM" in str(info.value)
        assert "not by racklife" in str(info.value)
        # racklife's own drain does not overwrite the admin's reason either.
        owners = driver.drain(["gpu-005", "gpu-006"], "run-1", "upgrade")
        assert owners["gpu-005"].kind == "other"
        assert owners["gpu-006"].run_id == "run-1"
        assert driver.node("gpu-005").reason == "admin: bad DIMM"
        assert driver.down(["gpu-005"], "run-1", "gone")["gpu-005"].kind == "other"
        assert driver.node("gpu-005").reason == "admin: bad DIMM"
        with pytest.raises(NotOurs):
            driver.resume_if_ours(["gpu-005"])
        assert driver.node("gpu-005").state.drain
        # Ours resume; a specific run id is checked when given.
        with pytest.raises(NotOurs):
            driver.resume_if_ours(["gpu-006"], run_id="run-2")
        [res] = driver.resume_if_ours(["gpu-006"], run_id="run-1")
        assert res.action == "resumed"
        assert not driver.node("gpu-006").state.drain
        [again] = driver.resume_if_ours(["gpu-006"])
        assert again.action == "already"
    finally:
        subprocess.run(["scontrol", "update", "nodename=gpu-005", "state=resume"],
                       env=lab.env(), check=True, timeout=10)


def test_leave_wait_lets_the_job_finish(lab: LabSlurm, driver: SlurmDriver) -> None:
    job = sbatch(lab, "-p", "train", "-N2", "--exclusive", "-w", "gpu-[001-002]", "--wrap", "sleep 3")
    wait_for(lambda: driver.job(job).state == "RUNNING", 30, f"job {job} to run")
    report = leave(driver, ["gpu-001"], run_id="lv-wait", reason="leave test", policy="wait",
                   deadline_s=60, poll_s=0.2)
    assert report.complete, report.to_dict()
    assert [(j.job_id, j.action) for j in report.jobs] == [(job, "finished")]
    assert report.jobs[0].nodes == ("gpu-001", "gpu-002")
    node = driver.node("gpu-001")
    assert node.state.drained
    assert node.owner.run_id == "lv-wait"
    assert driver.job(job).state == "COMPLETED"


def test_leave_requeue_restarts_the_job_elsewhere(lab: LabSlurm, driver: SlurmDriver) -> None:
    job = sbatch(lab, "-p", "train", "-N2", "--exclusive", "--wrap", "sleep 300")
    wait_for(lambda: driver.job(job).state == "RUNNING", 30, f"job {job} to run")
    first_nodes = driver.job(job).nodes
    leaving = first_nodes[0]
    report = leave(driver, [leaving], run_id="lv-rq", reason="leave test", policy="requeue",
                   deadline_s=0, poll_s=0.2, settle_s=30)
    assert report.complete, report.to_dict()
    assert [(j.job_id, j.action) for j in report.jobs] == [(job, "requeued")]
    assert driver.node(leaving).state.drained

    def restarted() -> bool:
        j = driver.job(job)
        return j.state == "RUNNING" and j.restarts == 1
    wait_for(restarted, 30, f"job {job} to restart")
    assert leaving not in driver.job(job).nodes
    driver.cancel(job)


def test_leave_wait_deadline_reports_the_running_job(lab: LabSlurm, driver: SlurmDriver) -> None:
    job = sbatch(lab, "-p", "train", "-N1", "--exclusive", "-w", "gpu-010", "--wrap", "sleep 300")
    wait_for(lambda: driver.job(job).state == "RUNNING", 30, f"job {job} to run")
    report = leave(driver, ["gpu-010"], run_id="lv-dl", reason="deadline", policy="wait",
                   deadline_s=0.5, poll_s=0.2)
    assert not report.complete
    assert [(j.job_id, j.action) for j in report.jobs] == [(job, "still_running")]
    assert driver.job(job).state == "RUNNING"  # never killed silently
    assert driver.node("gpu-010").state.draining


def test_power_save_round_trip(lab: LabSlurm, driver: SlurmDriver) -> None:
    assert driver.node("gpu-014").state.powered_down
    # The lent node's slurmd binds its port only when resumed: the port must be one the kernel
    # never hands to an outgoing connection meanwhile (that was a stuck POWERING_UP under CI load).
    assert lab.ports["gpu-014"] < ephemeral_range()[0]
    job = sbatch(lab, "-p", "flex", "-N1", "-w", "gpu-014", "--wrap", "true")

    def seen() -> str:
        slurmd = lab.log("slurmd-gpu-014")
        tail = slurmd.read_text().splitlines()[-3:] if slurmd.exists() else []
        return f"{driver.node('gpu-014').state}; slurmd log: {tail}"
    # Slurm 22.05 notices the booted node's job is configured in its 30 s periodic pass.
    wait_for(lambda: driver.job(job).state == "COMPLETED", 90, f"job {job} on a resumed node", seen)
    assert "resume gpu-014: exit 0" in (lab.root / "log" / "power.log").read_text()
    node = driver.node("gpu-014")
    assert not node.state.powered_down
    assert node.state.base == "idle"
    # Lend it away again and take it back through the driver.
    driver.power_down(["gpu-014"], force=True)
    wait_for(lambda: driver.node("gpu-014").state.powered_down, 30, "gpu-014 to power down")
    driver.power_up(["gpu-014"])

    def back() -> bool:
        state = driver.node("gpu-014").state
        return state.base == "idle" and state.responding and not (
            state.powered_down or "POWERING_UP" in state.flags
        )
    # The resumed slurmd registers within seconds; the margin is for a loaded CI machine.
    wait_for(back, 60, "gpu-014 to come back idle", seen)


def test_cli_status_reports_drain_owners(lab: LabSlurm, driver: SlurmDriver,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    driver.drain(["gpu-012"], "st-1", "status test")
    monkeypatch.setenv("SLURM_CONF", str(lab.conf))
    result = CliRunner().invoke(app, ["slurm", "status", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    row = next(r for r in data["nodes"] if r["node"] == "gpu-012")
    assert row["owner"] == "racklife" and row["owner_run"] == "st-1"
    assert row["reason"] == "racklife:st-1: status test"
    assert next(r for r in data["nodes"] if r["node"] == "gpu-011")["owner"] is None


def test_lab_stops_and_starts_one_node(lab: LabSlurm, driver: SlurmDriver) -> None:
    pid_file = lab.root / "run" / "slurmd-gpu-011.pid"
    pid = int(pid_file.read_text())
    lab.stop_node("gpu-011")
    assert not pid_file.exists()
    lab.start_node("gpu-011")
    assert int(pid_file.read_text()) != pid
    state = driver.node("gpu-011").state
    assert state.base == "idle" and state.responding


def test_partition_membership_and_reservations(lab: LabSlurm, driver: SlurmDriver) -> None:
    assert driver.add_to_partition("flex", ["gpu-012"]) is True
    assert driver.add_to_partition("flex", ["gpu-012"]) is False  # already there
    assert "gpu-012" in driver.partitions()["flex"]
    assert "flex" in driver.node("gpu-012").partitions
    assert driver.remove_from_partition("flex", ["gpu-012"]) is True
    assert driver.partitions()["flex"] == ("gpu-013", "gpu-014")
    with pytest.raises(OperationFailed):
        driver.add_to_partition("nope", ["gpu-012"])

    driver.create_reservation("maint-rl", ["gpu-007"], 10)
    driver.create_reservation("maint-rl", ["gpu-007"], 10)  # idempotent
    [resv] = [r for r in driver.reservations() if r.name == "maint-rl"]
    assert resv.nodes == ("gpu-007",)
    assert "MAINT" in resv.flags
    fenced = subprocess.run(
        ["srun", "--immediate=3", "-p", "train", "-w", "gpu-007", "true"],
        env=lab.env(), capture_output=True, text=True, timeout=30, check=False, cwd="/tmp",
    )
    assert fenced.returncode != 0
    inside = subprocess.run(
        ["srun", "--immediate=10", "--reservation=maint-rl", "-p", "train", "-w", "gpu-007", "true"],
        env=lab.env(), capture_output=True, text=True, timeout=30, check=False, cwd="/tmp",
    )
    assert inside.returncode == 0, inside.stderr
    driver.delete_reservation("maint-rl")
    assert all(r.name != "maint-rl" for r in driver.reservations())


def test_rest_and_cli_agree_on_jobs_on_a_node(lab: LabSlurm, driver: SlurmDriver,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    assert lab.rest_url
    job = sbatch(lab, "-p", "train", "-N1", "-w", "gpu-008", "--wrap", "sleep 60")
    wait_for(lambda: driver.job(job).state == "RUNNING", 30, f"job {job} to run")
    rest = SlurmDriver(driver.run, RestClient(lab.rest_url, lab.token()))
    by_cli = [(j.job_id, j.state, j.nodes) for j in driver.jobs_on(["gpu-008"])]
    by_rest = [(j.job_id, j.state, j.nodes) for j in rest.jobs_on(["gpu-008"])]
    assert by_cli == by_rest == [(job, "RUNNING", ("gpu-008",))]
    monkeypatch.setenv("SLURM_CONF", str(lab.conf))
    monkeypatch.setenv("RACKLIFE_SLURM_JWT", lab.token())
    result = CliRunner().invoke(app, ["slurm", "status", "--json", "--rest-url", lab.rest_url])
    assert result.exit_code == 0, result.output
    row = next(r for r in json.loads(result.output)["nodes"] if r["node"] == "gpu-008")
    assert row["jobs"] == [job]
    assert lab.token() not in result.output


def test_example_inventory_loads_in_slurmctld(inventory_path: Path) -> None:
    """The site example (or this suite's 16-node copy) as slurmctld sees it: every switch, every node."""
    inv = load_inventory(inventory_path)
    root = Path(tempfile.mkdtemp(prefix="rls-", dir="/tmp"))
    expected = render(inv).files["topology.conf"]
    try:
        with running(LabSlurmConfig(inventory=inv, root=root, start_nodes=[])) as lab:
            topo = subprocess.run(["scontrol", "show", "topology"], env=lab.env(), capture_output=True,
                                  text=True, timeout=10, check=True).stdout
            nodes = SlurmDriver(CommandRunner(env=lab.env())).nodes()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    for line in expected.splitlines()[1:]:
        assert line.split()[0] + " " in topo
    assert sorted(n.name for n in nodes) == sorted(n.name for n in slurm_nodes(inv))
    assert all(n.gres.startswith("gpu:") for n in nodes)

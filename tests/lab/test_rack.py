"""`racklife lab`: a whole rack up, reachable, power-cycled through its BMCs, and gone after `down`.

Needs root, Debian's openssh-server/openssh-client/iproute2 and the Slurm
daemons (slurmctld slurmd munge); slow (a lab takes several seconds to boot).
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from burnin.parsers import infiniband
from lifecycle.cli import app
from lifecycle.cli._common import BAD_INPUT, REFUSED
from lifecycle.drivers.bmc.base import PowerAction
from lifecycle.drivers.bmc.factory import driver_for
from lifecycle.lab import netns, rack
from lifecycle.lab.kube import GPU_RESOURCE, KubeAdmin
from lifecycle.model.inventory import Inventory, parse_inventory

pytestmark = [pytest.mark.root, pytest.mark.slow]
runner = CliRunner()


def lab(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, ["lab", *args])
    return result.exit_code, result.output


def wait_for(what: str, check: Callable[[], bool], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


@pytest.fixture
def lab_dir(need_root: None) -> Iterator[Path]:
    for daemon in ("slurmctld", "slurmd", "munged"):
        assert shutil.which(daemon), f"'{daemon}' is missing: apt-get install slurmctld slurmd munge"
    # Short: the Slurm cluster's Unix sockets live below it (108-byte limit).
    path = Path(tempfile.mkdtemp(prefix="rl", dir="/tmp"))
    prefix = f"rtl{os.getpid() % 10000}-"
    yield path / "lab"
    rack.cleanup(path / "lab", prefix)
    shutil.rmtree(path, ignore_errors=True)


def prefix_of(lab_dir: Path) -> str:
    return f"rtl{os.getpid() % 10000}-"


class Lab:
    def __init__(self, lab_dir: Path) -> None:
        state = rack.read_state(lab_dir)
        assert state is not None
        self.state = state
        self.env = {**os.environ, "SLURM_CONF": state["slurm_conf"]}
        self.inventory: Inventory = parse_inventory(Path(state["inventory"]).read_text())

    def ssh(self, node: str, *command: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["ssh", "-F", self.state["ssh_config"], node, "--", *command],
                              capture_output=True, text=True, timeout=60, check=False)

    def sinfo(self) -> dict[str, tuple[str, str]]:
        out = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %T %G"], capture_output=True, text=True,
                             env=self.env, timeout=10, check=True).stdout
        return {f[0]: (f[1], f[2]) for f in (line.split() for line in out.splitlines())}


def kube_nodes(kube: KubeAdmin) -> dict[str, str]:
    """Node name -> its Ready condition's status, as the Kubernetes stand-in lists them."""
    items = kube.request("GET", "/api/v1/nodes")["items"]
    return {n["metadata"]["name"]: next(c["status"] for c in n["status"]["conditions"] if c["type"] == "Ready")
            for n in items}


def refused(running: Lab, node: str) -> bool:
    return running.ssh(node, "true").returncode == 255


def answers(running: Lab, node: str) -> bool:
    return running.ssh(node, "hostname").stdout.strip() == node


def leftovers(lab_dir: Path, prefix: str) -> list[str]:
    found = netns.running(prefix)
    found += [m for m in Path("/proc/self/mountinfo").read_text().splitlines() if f"/{prefix}" in m]
    pgrep = subprocess.run(["pgrep", "-af", str(lab_dir)], capture_output=True, text=True, check=False)
    found += [line for line in pgrep.stdout.splitlines() if "pgrep" not in line]
    return found


def test_lab_up_status_power_and_down(lab_dir: Path, tmp_path: Path) -> None:
    prefix = prefix_of(lab_dir)
    faults = tmp_path / "faults.yaml"
    faults.write_text("node-02: ib-down\n")
    code, out = lab("up", "--nodes", "4", "--dir", str(lab_dir), "--prefix", prefix, "--faults", str(faults),
                    "--boot-time", "0.5", "--json")
    assert code == 0, out
    assert json.loads(out)["phase"] == "ready"
    code, out = lab("up", "--nodes", "4", "--dir", str(lab_dir), "--prefix", prefix)
    assert code == REFUSED and "already running" in out

    code, out = lab("status", "--dir", str(lab_dir), "--json")
    status = json.loads(out)
    assert code == 0 and status["running"]
    assert [(n["name"], n["power"], n["state"]) for n in status["nodes"]] == [
        (f"node-0{i}", "On", "up") for i in range(1, 5)]
    assert {n["name"]: n["fault"] for n in status["nodes"]}["node-02"] == "ib-down (gpu 0)"
    assert Path(status["ssh_config"]).is_file() and Path(status["slurm_conf"]).is_file()
    code, env = lab("env", "--dir", str(lab_dir))
    assert f"export SLURM_CONF={status['slurm_conf']}" in env
    assert f"export KUBECONFIG={status['kubeconfig']}" in env

    code, out = lab("inventory", "--dir", str(lab_dir))
    inv = parse_inventory(out)
    assert [n.pool for n in inv.nodes] == ["training", "training", "training", "inference"]
    assert {n.bmc.driver for n in inv.nodes} == {"redfish", "ipmi"}

    running = Lab(lab_dir)
    assert running.sinfo() == {f"node-0{i}": ("idle", "gpu:h100:8") for i in range(1, 4)}
    for node in inv.nodes:
        res = running.ssh(node.name, "hostname")
        assert res.stdout.strip() == node.name, res.stderr
    ib = infiniband.parse(running.ssh("node-02", "ibstat").stdout)
    assert [ca.ports[0].state for ca in ib.cas][:2] == ["Down", "Active"]
    code, _ = lab("fault", "node-01", "xid79", "--dir", str(lab_dir))
    assert code == 0 and running.ssh("node-01", "nvidia-smi").returncode == 15

    # The inference node booted into the Kubernetes stand-in as a Ready Node with its GPUs.
    kube = KubeAdmin.from_kubeconfig(Path(status["kubeconfig"]))
    assert kube_nodes(kube) == {"node-04": "True"}
    node04 = kube.request("GET", "/api/v1/nodes/node-04")
    assert node04["metadata"]["labels"]["racklife.io/pool"] == "inference"
    assert node04["status"]["capacity"][GPU_RESOURCE] == "8"

    # Power off through the BMC (Redfish for node-02, IPMI for node-04): sshd and slurmd stop.
    for name in ("node-02", "node-04"):
        bmc = driver_for(inv.node(name).bmc)
        try:
            bmc.power(PowerAction.OFF)
            wait_for(f"{name} off", functools.partial(refused, running, name))
            if name == "node-02":
                wait_for("Slurm to mark node-02 down", lambda: running.sinfo()["node-02"][0].startswith("down"))
            else:
                wait_for("node-04 NotReady", lambda: kube_nodes(kube) == {"node-04": "False"})
            bmc.power(PowerAction.ON)
            wait_for(f"{name} back", functools.partial(answers, running, name))
            if name == "node-02":
                wait_for("node-02 idle", lambda: running.sinfo()["node-02"][0] == "idle")
            else:
                wait_for("node-04 Ready", lambda: kube_nodes(kube) == {"node-04": "True"})
        finally:
            bmc.close()

    code, out = lab("down", "--dir", str(lab_dir), "--yes")
    assert code == 0, out
    assert leftovers(lab_dir, prefix) == []
    assert not rack.supervisor_alive(rack.read_state(lab_dir))


def test_down_and_up_clean_up_after_a_crashed_lab(lab_dir: Path) -> None:
    prefix = prefix_of(lab_dir)
    code, out = lab("up", "--nodes", "2", "--dir", str(lab_dir), "--prefix", prefix, "--boot-time", "0")
    assert code == 0, out
    state = rack.read_state(lab_dir)
    assert state is not None
    os.kill(int(state["pid"]), signal.SIGKILL)  # the supervisor dies; its daemons do not
    wait_for("the supervisor to die", lambda: not rack.supervisor_alive(state))
    assert netns.running(prefix)
    code, out = lab("up", "--nodes", "2", "--dir", str(lab_dir), "--prefix", prefix, "--boot-time", "0")
    assert code == 0, out  # up cleaned what the crash left, then started afresh
    state = rack.read_state(lab_dir)
    assert state is not None
    os.kill(int(state["pid"]), signal.SIGKILL)
    wait_for("the supervisor to die", lambda: not rack.supervisor_alive(state))
    code, out = lab("down", "--dir", str(lab_dir), "--yes")
    assert code == 0, out
    assert leftovers(lab_dir, prefix) == []


def test_up_refuses_a_bad_faults_file_before_starting_anything(need_root: None, tmp_path: Path) -> None:
    faults = tmp_path / "faults.yaml"
    faults.write_text("node-01: xid79\nnode-09: ecc\nnode-02: {profile: ecc, gpu: 8}\n")
    code, out = lab("up", "--nodes", "4", "--dir", str(tmp_path / "lab"), "--faults", str(faults))
    assert code == BAD_INPUT
    assert "faults.yaml:2: node-09: no such node" in out and "gpu 8 does not exist" in out
    assert not (tmp_path / "lab").exists()
    code, out = lab("status", "--dir", str(tmp_path / "lab"))
    assert code == REFUSED and "no lab" in out

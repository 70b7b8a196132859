"""Simulated nodes: network boot, real SSH with keys only, power off/on, clean teardown."""

from __future__ import annotations

import json
import os
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from burnin.parsers import infiniband, nvidia_smi
from lifecycle.lab import netns
from lifecycle.lab.faults import Fault
from lifecycle.lab.netns import LabNet
from lifecycle.lab.node import BootReport, LabSsh, NodeSpec, SimNode

pytestmark = pytest.mark.root
SUBNET = "10.79.0.0/16"


@dataclass
class BootServer:
    """A stand-in boot server in the hub namespace: iPXE scripts per MAC, and a phone-home endpoint."""

    url: str
    scripts: list[str] = field(default_factory=list)
    homes: list[dict[str, object]] = field(default_factory=list)


@pytest.fixture
def boot_server(lab_prefix: str) -> Iterator[tuple[LabNet, BootServer]]:
    net = LabNet(lab_prefix, SUBNET)
    net.create()
    record = BootServer(f"http://{net.controller}:8081")

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.startswith("/broken/"):
                self.send_error(500)
                return
            if not self.path.startswith("/boot/"):
                self.send_error(404)
                return
            record.scripts.append(self.path)
            body = f"#!ipxe\nkernel {record.url}/vmlinuz\nboot\n".encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self) -> None:
            length = int(self.headers["Content-Length"])
            record.homes.append(json.loads(self.rfile.read(length)))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = netns.run_in(net.hub, lambda: ThreadingHTTPServer((net.controller, 8081), Handler))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield net, record
    server.shutdown()
    server.server_close()


def make_nodes(net: LabNet, lab_dir: Path, specs: list[NodeSpec], hooks: list[str]) -> list[SimNode]:
    ssh = LabSsh(lab_dir, net.hub)
    ssh.prepare()
    nets = net.add_nodes([s.name for s in specs])
    nodes = [SimNode(s, n, lab_dir, ssh, on_boot=[lambda name: hooks.append(f"boot {name}")],
                     on_shutdown=[lambda name: hooks.append(f"shutdown {name}")]) for s, n in zip(specs, nets, strict=True)]
    for node in nodes:
        node.prepare()
    ssh.write_config(nodes)
    return nodes


def ssh(node: SimNode, *command: str, extra: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    argv = node.ssh.argv(node.name, *command)
    return subprocess.run([argv[0], *extra, *argv[1:]], capture_output=True, text=True, timeout=60, check=False)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"


def test_boot_ssh_power_cycle_and_teardown(boot_server: tuple[LabNet, BootServer], tmp_path: Path) -> None:
    net, server = boot_server
    hooks: list[str] = []
    specs = [NodeSpec("node-a", "h100-sxm-8", boot_time_s=0, boot_url=server.url + "/boot/{mac}.ipxe",
                      phone_home=server.url + "/phone-home"),
             NodeSpec("node-b", "a100-sxm-8", boot_time_s=0)]
    a, b = make_nodes(net, tmp_path, specs, hooks)
    assert a.power_state == b.power_state == "Off"
    for node in (a, b):
        node.power_on()
    assert a.wait_up(30) and b.wait_up(30), (a.boot_error, b.boot_error)
    assert a.power_state == "On" and a.state == "up"

    # Network boot: the iPXE script was fetched for this MAC, and the node phoned home.
    assert server.scripts == [f"/boot/{a.net.mac}.ipxe"]
    assert (a.dir / "boot.ipxe").read_text().startswith("#!ipxe")
    assert [(h["name"], h["mac"], h["address"]) for h in server.homes] == [("node-a", a.net.mac, a.net.address)]
    assert sorted(hooks) == ["boot node-a", "boot node-b"]

    # Real SSH with the lab's config: the node's own hostname, its fake tools on PATH.
    res = ssh(a, "hostname")
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "node-a"
    # A command's bash is not a top-level shell (SHLVL 2), so it does not read the host's ~/.bashrc, which
    # is not the node's: a pyenv init there waited 60 s on a stale lock in every command of every node.
    res = ssh(a, "echo $SHLVL")
    assert res.stdout.strip() == "2", res.stdout + res.stderr
    # Its own boot id (the kernel's, which the lab's nodes share, is not theirs): a reboot moves it.
    first_boot = ssh(a, "cat", "/proc/sys/kernel/random/boot_id").stdout.strip()
    assert len(first_boot) == 36 and first_boot != Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    assert ssh(b, "cat", "/proc/sys/kernel/random/boot_id").stdout.strip() not in ("", first_boot)
    res = ssh(b, "nvidia-smi", "-q", "-x")
    assert res.returncode == 0, res.stderr
    assert {g.name for g in nvidia_smi.parse(res.stdout).gpus} == {"NVIDIA A100-SXM4-80GB"}

    # Key auth only: a client that will not offer a key is refused.
    res = ssh(a, "true", extra=("-o", "PubkeyAuthentication=no",
                                "-o", "PreferredAuthentications=password,keyboard-interactive"))
    assert res.returncode == 255 and "Permission denied (publickey)" in res.stderr

    # A fault injected into the running node shows over SSH.
    a.inject(Fault("ib-down", 1))
    res = ssh(a, "ibstat")
    states = {ca.name: ca.ports[0].state for ca in infiniband.parse(res.stdout).cas}
    assert states["mlx5_1"] == "Down" and states["mlx5_0"] == "Active"

    # Power off: sshd dies, SSH is refused, the shutdown hook ran.
    pid = a.sshd_pid
    assert pid is not None and alive(pid)
    a.power_off()
    assert a.power_state == "Off" and a.sshd_pid is None
    assert not alive(pid)
    assert netns.pids_in(a.net.netns) == []
    assert hooks[-1] == "shutdown node-a"
    res = ssh(a, "true")
    assert res.returncode == 255 and "cannot connect" in res.stderr
    assert ssh(b, "true").returncode == 0  # the neighbour is unaffected

    # Power on: it boots again (fetching its script again) and SSH answers.
    a.power_on()
    assert a.wait_up(30), a.boot_error
    assert len(server.scripts) == 2 and hooks[-1] == "boot node-a"
    assert ssh(a, "hostname").stdout.strip() == "node-a"
    assert ssh(a, "cat", "/proc/sys/kernel/random/boot_id").stdout.strip() not in ("", first_boot)

    # Teardown leaves no process, namespace or mount behind.
    pids = [n.sshd_pid for n in (a, b)]
    for node in (a, b):
        node.close()
    net.teardown()
    assert not any(alive(p) for p in pids if p is not None)
    assert netns.running(net.prefix) == []
    assert not [m for m in Path("/proc/self/mountinfo").read_text().splitlines() if f"/{net.prefix}" in m]
    lab_sshd = subprocess.run(["pgrep", "-f", str(tmp_path)], capture_output=True, text=True, check=False)
    assert lab_sshd.stdout.strip() == ""


def test_power_off_during_boot_cancels_it(boot_server: tuple[LabNet, BootServer], tmp_path: Path) -> None:
    net, _server = boot_server
    hooks: list[str] = []
    (node,) = make_nodes(net, tmp_path, [NodeSpec("node-a", "h100-sxm-8", boot_time_s=3600)], hooks)
    node.power_on()
    assert node.state == "booting" and node.power_state == "On"
    node.power_on()  # already on: nothing happens
    node.power_off()
    assert node.state == "off" and node.sshd_pid is None
    assert hooks == ["shutdown node-a"]
    assert not node.wait_up(0)


def test_no_pending_network_boot_boots_from_disk(
    boot_server: tuple[LabNet, BootServer], tmp_path: Path
) -> None:
    """404 for this MAC (nothing to install): like real firmware, fall through to the local disk."""
    net, server = boot_server
    reports: list[BootReport] = []
    hooks: list[str] = []
    specs = [NodeSpec("node-a", "h100-sxm-8", boot_time_s=0, boot_url=server.url + "/missing/{mac}",
                      phone_home=reports.append)]
    (node,) = make_nodes(net, tmp_path, specs, hooks)
    node.power_on()
    assert node.wait_up(30)
    assert node.state == "up" and node.sshd_pid is not None
    assert reports == [] and hooks == ["boot node-a"]
    node.power_off()
    assert node.state == "off" and node.sshd_pid is None


def test_failed_network_boot_leaves_the_node_on_without_ssh(
    boot_server: tuple[LabNet, BootServer], tmp_path: Path
) -> None:
    """The boot server answers with an error: the boot fails; the node stays on, without sshd."""
    net, server = boot_server
    reports: list[BootReport] = []
    hooks: list[str] = []
    specs = [NodeSpec("node-a", "h100-sxm-8", boot_time_s=0, boot_url=server.url + "/broken/{mac}",
                      phone_home=reports.append)]
    (node,) = make_nodes(net, tmp_path, specs, hooks)
    node.power_on()
    assert not node.wait_up(0.5)
    assert node.state == "boot_failed" and node.power_state == "On"
    assert node.boot_error is not None and "500" in node.boot_error
    assert node.sshd_pid is None and reports == [] and hooks == []
    node.power_off()


def test_phone_home_callable_gets_the_boot_report(boot_server: tuple[LabNet, BootServer], tmp_path: Path) -> None:
    net, server = boot_server
    reports: list[BootReport] = []
    specs = [NodeSpec("node-a", "b200-8", boot_time_s=0, boot_url=server.url + "/boot/{name}",
                      phone_home=reports.append)]
    (node,) = make_nodes(net, tmp_path, specs, [])
    node.power_on()
    assert node.wait_up(30), node.boot_error
    assert [(r.name, r.address) for r in reports] == [("node-a", node.net.address)]
    assert reports[0].ipxe_script is not None and reports[0].ipxe_script.startswith("#!ipxe")
    node.close()

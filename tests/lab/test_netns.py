"""The lab network: per-node namespaces on a private bridge, nothing on the host, no way out."""

from __future__ import annotations

import errno
import functools
import socket
import subprocess
import time
from pathlib import Path

import pytest

from lifecycle.lab import netns
from lifecycle.lab.netns import LabNet, LabRunningError, running, teardown

pytestmark = pytest.mark.root
SUBNET = "10.78.0.0/16"


def ip(*args: str) -> str:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=True).stdout


def link_names() -> set[str]:
    return {line.split(":")[1].strip().split("@")[0] for line in ip("-o", "link").splitlines()}


def mounts_with(prefix: str) -> list[str]:
    return [line for line in Path("/proc/self/mountinfo").read_text().splitlines() if f"/{prefix}" in line]


def test_nodes_get_addresses_in_their_own_namespaces(lab_prefix: str) -> None:
    host_links = link_names()
    net = LabNet(lab_prefix, SUBNET)
    net.create()
    nodes = net.add_nodes(["node-a", "node-b", "node-c"])
    assert [n.address for n in nodes] == ["10.78.1.1", "10.78.1.2", "10.78.1.3"]
    assert len({n.mac for n in nodes}) == 3
    for n in nodes:
        addrs = ip("-n", n.netns, "-o", "-4", "addr", "show", "dev", "eth0")
        assert f"inet {n.address}/16" in addrs
        assert n.mac in ip("-n", n.netns, "link", "show", "eth0")
        routes = ip("-n", n.netns, "route", "show")
        assert "default" not in routes and routes.strip()
        assert ip("netns", "exec", n.netns, "cat", "/proc/sys/net/ipv4/ip_forward").strip() == "0"
    assert ip("netns", "exec", net.hub, "cat", "/proc/sys/net/ipv4/ip_forward").strip() == "0"
    assert "default" not in ip("-n", net.hub, "route", "show")
    # The host namespace is untouched: no new link, no address in the lab range.
    assert link_names() == host_links
    assert "10.78." not in ip("-o", "addr")
    assert running(lab_prefix) == sorted([net.hub, *(n.netns for n in nodes)])


def test_nodes_reach_each_other_and_the_controller_but_nothing_else(lab_prefix: str) -> None:
    net = LabNet(lab_prefix, SUBNET)
    net.create()
    a, b = net.add_nodes(["node-a", "node-b"])

    def listen(addr: str) -> socket.socket:
        s = socket.socket()
        s.bind((addr, 0))
        s.listen()
        return s

    server = netns.run_in(a.netns, lambda: listen(a.address))
    controller = netns.run_in(net.hub, lambda: listen(net.controller))
    try:
        for target in (server, controller):
            where: tuple[str, int] = target.getsockname()
            peer = netns.run_in(b.netns, functools.partial(socket.create_connection, where, 2))
            conn, origin = target.accept()
            assert origin[0] == b.address
            conn.close()
            peer.close()

        def outside() -> int:
            try:
                socket.create_connection(("192.0.2.1", 80), 2).close()  # TEST-NET-1: never routed
            except OSError as exc:
                return exc.errno or 0
            return 0

        assert netns.run_in(b.netns, outside) == errno.ENETUNREACH
        assert netns.run_in(net.hub, outside) == errno.ENETUNREACH
    finally:
        server.close()
        controller.close()


def test_refuses_to_start_over_a_running_lab(lab_prefix: str) -> None:
    first = LabNet(lab_prefix, SUBNET)
    first.create()
    with pytest.raises(LabRunningError, match="already running"):
        LabNet(lab_prefix, SUBNET).create()
    assert running(lab_prefix) == [first.hub]


def test_teardown_by_prefix_after_a_crash(lab_prefix: str) -> None:
    net = LabNet(lab_prefix, SUBNET)
    net.create()
    (n,) = net.add_nodes(["node-a"])
    # A process left running in the node's namespace by a lab that died.
    orphan = subprocess.Popen(netns.exec_argv(n.netns, ["sleep", "300"]), start_new_session=True)
    deadline = time.monotonic() + 10  # `ip netns exec` enters the namespace after Popen returns
    while netns.pids_in(n.netns) != [orphan.pid] and time.monotonic() < deadline:
        time.sleep(0.01)
    assert netns.pids_in(n.netns) == [orphan.pid]
    del net
    removed = teardown(lab_prefix)
    assert sorted(removed) == sorted([f"{lab_prefix}hub", n.netns])
    assert orphan.wait(timeout=10) != 0
    assert running(lab_prefix) == []
    assert mounts_with(lab_prefix) == []
    assert teardown(lab_prefix) == []  # a second teardown finds nothing and succeeds


def test_rejects_bad_prefix_and_public_subnet() -> None:
    with pytest.raises(ValueError, match="prefix"):
        LabNet("Bad prefix", SUBNET)
    with pytest.raises(ValueError, match="private"):
        LabNet("rt-", "8.8.0.0/16")

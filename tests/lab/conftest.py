"""Fixtures for the simulated-node tests: node directories for the fake tools, and lab networks.

Tests that build namespaces and start sshd need root and Debian's
openssh-server/openssh-client/iproute2; they fail (not skip) without them.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from lifecycle.lab.faults import HEALTHY, Fault
from lifecycle.lab.netns import NodeNet, teardown
from lifecycle.lab.node import LabSsh, NodeSpec, SimNode

MakeNode = Callable[..., SimNode]


@pytest.fixture
def make_node(tmp_path: Path) -> MakeNode:
    """A prepared node directory (facts, fault, tools) without a namespace; no root needed."""
    ssh = LabSsh(tmp_path, "unused-hub")
    ssh.prepare()
    count = 0

    def make(sku: str = "h100-sxm-8", fault: Fault = HEALTHY, name: str = "") -> SimNode:
        nonlocal count
        count += 1
        name = name or f"gpu-{count:02d}"
        net = NodeNet(name, f"unused-{name}", f"10.77.1.{count}", 16, f"02:72:6c:00:00:{count:02x}", "v0")
        node = SimNode(NodeSpec(name, sku, boot_time_s=0), net, tmp_path, ssh, fault=fault)
        node.prepare()
        return node

    return make


@pytest.fixture(scope="session")
def need_root() -> None:
    assert os.geteuid() == 0, "these lab tests need root (network namespaces, sshd)"
    for tool in ("ip", "sshd", "ssh", "ssh-keygen", "unshare"):
        assert shutil.which(tool) or Path("/usr/sbin", tool).exists(), (
            f"'{tool}' is missing: apt-get install openssh-server openssh-client iproute2 util-linux"
        )


@pytest.fixture
def lab_prefix(need_root: None) -> Iterator[str]:
    """A prefix of this test's own; whatever the test leaves is removed afterwards."""
    prefix = f"rt{os.getpid() % 100000}-"
    teardown(prefix)
    yield prefix
    teardown(prefix)

"""`racklife provision --all` in the lab: real BMC protocols, real HTTP boot, real tokens.

Eight nodes: one whose BMC never answers (a black-hole listener: a real timeout)
and one whose serial in the inventory does not match its BMC. The other six
network-boot through the boot server, phone home with their single-use
tokens, and end `provisioned`; the two end `inspect_failed` with the reason.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.e2e.conftest import RunningLab, run

pytestmark = [pytest.mark.xdist_group("lab"), pytest.mark.slow]


@pytest.fixture
def black_hole() -> Iterator[int]:
    """A TCP listener that accepts and never answers, like a hung BMC."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        srv.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(srv.accept()[0])
            except OSError:
                continue

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    yield int(srv.getsockname()[1])
    stop.set()
    t.join(2)
    for c in held:
        c.close()
    srv.close()


def test_provision_all(lab8: RunningLab, minimal_image: Path, black_hole: int, tmp_path: Path) -> None:
    doc = yaml.safe_load(lab8.inventory.read_text())
    nodes = {n["name"]: n for n in doc["nodes"]}
    redfish = [n for n in nodes.values() if n["bmc"]["driver"] == "redfish"]
    hung, mismatched = redfish[0]["name"], redfish[1]["name"]
    nodes[hung]["bmc"]["address"] = f"http://127.0.0.1:{black_hole}"
    nodes[mismatched]["serial"] = "WRONG-SERIAL-1"
    inv = tmp_path / "inventory.yaml"
    inv.write_text(yaml.safe_dump(doc, sort_keys=False))

    assert lab8.racklife("inventory", "import", str(inv)).returncode == 0
    res = lab8.racklife("provision", "--all", "--max-in-flight", "4", "--boot-timeout", "60",
                        "--images", str(minimal_image), "--json", timeout=900)
    assert res.returncode == 1, res.stderr  # two nodes failed
    outcomes = {o["node"]: o for o in json.loads(res.stdout)}
    assert len(outcomes) == 8
    ok = sorted(n for n, o in outcomes.items() if o["ok"])
    assert ok == sorted(set(nodes) - {hung, mismatched})
    assert all(outcomes[n]["state"] == "provisioned" for n in ok)
    assert outcomes[hung]["state"] == "inspect_failed"
    assert "unreachable" in outcomes[hung]["reason"].lower()
    assert outcomes[mismatched]["state"] == "inspect_failed"
    assert "serial mismatch: inventory WRONG-SERIAL-1" in outcomes[mismatched]["reason"]

    listed = {n["name"]: n["state"] for n in json.loads(lab8.racklife("nodes", "list", "--json").stdout)}
    assert listed == {n: outcomes[n]["state"] for n in nodes}
    hist = json.loads(lab8.racklife("node", "history", ok[0], "--json").stdout)
    assert [h["event"] for h in hist] == ["enroll", "inspect", "inspect_done", "provision", "provision_done"]
    assert "phoned home with minimal 1" in hist[-1]["reason"]
    # Re-running is idempotent: provisioned nodes boot again into the same image and stay provisioned.
    again = lab8.racklife("provision", ok[0], "--boot-timeout", "60", "--images", str(minimal_image), "--json")
    assert again.returncode == 0, again.stdout + again.stderr
    assert json.loads(again.stdout)[0]["state"] == "provisioned"


@pytest.fixture(scope="module")
def lab_pxe() -> Iterator[RunningLab]:
    lab = RunningLab(3, faults={"node-02": "pxe-flaky", "node-03": "pxe-off"})
    try:
        yield lab
    finally:
        lab.down()


def test_boot_timeout_retries_once_then_fails(lab_pxe: RunningLab, minimal_image: Path) -> None:
    """No phone-home within the boot timeout: one more boot with a new token, then provision_failed.

    node-02's first network boot falls through to its disk (pxe-flaky): the retry provisions it.
    node-03 never boots from the network (pxe-off): two boots, then provision_failed with the reason.
    """
    assert lab_pxe.racklife("inventory", "import", str(lab_pxe.inventory)).returncode == 0
    res = lab_pxe.racklife("provision", "--all", "--boot-timeout", "10", "--images", str(minimal_image),
                           "--json", timeout=600)
    assert res.returncode == 1, res.stdout + res.stderr
    outcomes = {o["node"]: o for o in json.loads(res.stdout)}
    assert outcomes["node-01"]["state"] == "provisioned"
    assert outcomes["node-01"]["steps"] == ["inspect", "boot attempt 1"]
    assert outcomes["node-02"]["state"] == "provisioned"
    assert outcomes["node-02"]["steps"] == ["inspect", "boot attempt 1", "boot attempt 2"]
    assert outcomes["node-03"]["state"] == "provision_failed"
    assert outcomes["node-03"]["steps"] == ["inspect", "boot attempt 1", "boot attempt 2"]
    assert outcomes["node-03"]["reason"] == "no phone-home after 2 boot(s) of 10 s each"

    # The lab's own count of power-ons: lab up, then one per boot attempt and no more.
    status = json.loads(lab_pxe.racklife("lab", "status", "--dir", str(lab_pxe.dir), "--json").stdout)
    boots = {n["name"]: n["boots"] for n in status["nodes"]}
    assert boots == {"node-01": 2, "node-02": 3, "node-03": 3}
    hist = json.loads(lab_pxe.racklife("node", "history", "node-03", "--json").stdout)
    assert [h["event"] for h in hist][-2:] == ["provision", "provision_fail"]
    assert "no phone-home" in hist[-1]["reason"]


class FlakyBmc:
    """A TCP relay in front of a lab BMC: the first ``hang`` connections are accepted and never
    answered (the client's read timeout fires, as with a BMC busy rebooting); later ones are
    relayed to the real BMC."""

    def __init__(self, upstream: tuple[str, int], hang: int) -> None:
        self.upstream, self.hang = upstream, hang
        self.accepted = 0
        self.srv = socket.socket()
        self.srv.bind(("127.0.0.1", 0))
        self.srv.listen(16)
        self.srv.settimeout(0.2)
        self.port = int(self.srv.getsockname()[1])
        self.held: list[socket.socket] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.stop.is_set():
            try:
                conn = self.srv.accept()[0]
            except OSError:
                continue
            self.accepted += 1
            if self.accepted <= self.hang:
                self.held.append(conn)
                continue
            up = socket.create_connection(self.upstream, timeout=10)
            for a, b in ((conn, up), (up, conn)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                dst.sendall(data)
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_RDWR)  # the other pump sees the end and closes dst
        src.close()

    def close(self) -> None:
        self.stop.set()
        self.thread.join(2)
        for c in self.held:
            c.close()
        self.srv.close()


@pytest.fixture(scope="module")
def lab2() -> Iterator[RunningLab]:
    lab = RunningLab(2)
    try:
        yield lab
    finally:
        lab.down()


def test_a_bmc_that_times_out_twice_then_answers_is_provisioned(lab2: RunningLab, minimal_image: Path,
                                                                tmp_path: Path) -> None:
    """Inspection is idempotent: after two timeouts the step layer tries again and the node boots."""
    doc = yaml.safe_load(lab2.inventory.read_text())
    node = next(n for n in doc["nodes"] if n["bmc"]["driver"] == "redfish")
    address = node["bmc"]["address"].split("://", 1)[-1]
    host, _, port = address.rpartition(":")
    flaky = FlakyBmc((host, int(port)), hang=2)
    try:
        node["bmc"]["address"] = f"http://127.0.0.1:{flaky.port}"
        inv = tmp_path / "inventory.yaml"
        inv.write_text(yaml.safe_dump(doc, sort_keys=False))
        assert lab2.racklife("inventory", "import", str(inv)).returncode == 0
        env = lab2.env | {"RACKLIFE_RETRY_ATTEMPTS": "3", "RACKLIFE_RETRY_BACKOFF_S": "0.2"}
        res = run(env, "provision", node["name"], "--boot-timeout", "60", "--images", str(minimal_image),
                  "--json", timeout=600)
        assert res.returncode == 0, res.stdout + res.stderr
        [out] = json.loads(res.stdout)
        assert out["state"] == "provisioned" and out["steps"] == ["inspect", "boot attempt 1"]
        assert flaky.accepted > 2 and len(flaky.held) == 2  # both timeouts really happened
        hist = json.loads(lab2.racklife("node", "history", node["name"], "--json").stdout)
        assert [h["event"] for h in hist] == ["enroll", "inspect", "inspect_done", "provision",
                                              "provision_done"]
    finally:
        flaky.close()

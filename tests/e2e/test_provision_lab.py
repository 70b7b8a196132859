"""`racklife provision --all` in the lab: real BMC protocols, real HTTP boot, real tokens.

Eight nodes: one whose BMC never answers (a black-hole listener: a real timeout)
and one whose serial in the inventory does not match its BMC. The other six
network-boot through the boot server, phone home with their single-use
tokens, and end `provisioned`; the two end `inspect_failed` with the reason.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.e2e.conftest import RunningLab

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

"""`racklife bmc firmware …` and `racklife bmc bios …` on a running 4-node lab.

The lab's BMCs are the Redfish emulator serving a mix of vendor trees and, for node-04, the
IPMI emulator. On node-01 (iDRAC tree) an update is pulled by SimpleUpdate from the image
server racklife starts on loopback; on node-03 (OpenBMC tree) it is pushed multipart; both
must change the version the BMC reports. node-02 (iLO tree) takes a BIOS attribute with a
reboot through its BMC and reads it back. With a BMC fault injected by `racklife lab fault`
(a task that fails, an update that does not take) node-01's update exits 5 and its version
stays. node-04's IPMI BMC is refused before it is asked.
One test, in that order, on one lab.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from lifecycle.lab.redfish_emulator.update_service import make_image
from tests.e2e.conftest import RunningLab

pytestmark = [pytest.mark.xdist_group("lab-b"), pytest.mark.slow]


@pytest.fixture(scope="module")
def lab() -> Iterator[RunningLab]:
    running = RunningLab(4)
    try:
        # `racklife bmc NODE…` finds each node's BMC in the store (not in $RACKLIFE_INVENTORY)
        imported = running.racklife("inventory", "import", str(running.inventory))
        assert imported.returncode == 0, imported.stdout + imported.stderr
        yield running
    finally:
        running.down()


def _version(lab: RunningLab, node: str, component: str) -> str:
    res = lab.racklife("bmc", "firmware", "list", node, "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    listed = json.loads(res.stdout)["firmware"]
    return str(next(c["version"] for c in listed
                    if component in (c["name"], (c["id"] or "").rsplit("/", 1)[-1])))


def test_firmware_and_bios_on_a_running_lab(lab: RunningLab, tmp_path: Path) -> None:
    for node, component, method in (("node-01", "BMC", "pull"), ("node-03", "5d0869c4", "push")):
        before = _version(lab, node, component)
        image = make_image(tmp_path / f"{node}.tar", "BMC", "3.1.4")
        res = lab.racklife("bmc", "firmware", "update", node, "--file", str(image),
                           "--component", component, "--expect-version", "3.1.4", "--yes", "--json")
        assert res.returncode == 0, res.stdout + res.stderr
        done = json.loads(res.stdout)
        assert (done["before"], done["after"], done["method"]) == (before, "3.1.4", method)
        assert _version(lab, node, component) == "3.1.4"

    res = lab.racklife("bmc", "bios", "set", "node-02", "Sriov=Disabled", "--reboot", "--timeout",
                       "120", "--yes", "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    assert json.loads(res.stdout)["applied"] is True
    live = lab.racklife("bmc", "bios", "list", "node-02", "--json")
    assert json.loads(live.stdout)["attributes"]["Sriov"] == "Disabled"

    # Faults of the BMC, injected through the lab: a task that fails, an update that does not take.
    image = make_image(tmp_path / "again.tar", "BMC", "3.1.5")
    for profile, said in (("bmc-tasks-fail", "ended Exception"),
                          ("firmware-unapplied", "the update did not take")):
        faulted = lab.racklife("lab", "fault", "node-01", profile, "--dir", str(lab.dir))
        assert faulted.returncode == 0, faulted.stdout + faulted.stderr
        res = lab.racklife("bmc", "firmware", "update", "node-01", "--file", str(image),
                           "--component", "BMC", "--yes")
        assert res.returncode == 5, res.stdout + res.stderr
        assert said in " ".join(res.stderr.split())
        assert _version(lab, "node-01", "BMC") == "3.1.4"
    assert lab.racklife("lab", "fault", "node-01", "bmc-healthy", "--dir",
                        str(lab.dir)).returncode == 0

    refused = lab.racklife("bmc", "firmware", "update", "node-04", "--file",
                           str(tmp_path / "node-01.tar"), "--component", "BMC", "--yes")
    assert refused.returncode == 5, refused.stdout + refused.stderr
    assert "the ipmi driver offers boot, inventory, power" in " ".join(refused.stderr.split())

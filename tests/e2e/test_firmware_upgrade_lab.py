"""A rolling firmware upgrade on a built 4-node lab (real Slurm, the emulated BMCs' UpdateService).

In order, in one test: `racklife upgrade --nodes node-01,node-04 --firmware F --component BMC`
updates node-01 (iDRAC tree, SimpleUpdate from the image server on loopback) — drained, the
Task followed, the version read back, re-tested, in service again — and leaves node-04 (IPMI)
out with the reason; node-03 (OpenBMC tree, multipart push) likewise. Then node-02's BMC
(iLO tree) is told to fail its tasks: its upgrade fails, the node is quarantined (a firmware
update is not taken back) and its version is unchanged.
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
def built(minimal_image: Path) -> Iterator[RunningLab]:
    lab = RunningLab(4)
    try:
        res = lab.racklife("build", str(lab.inventory), "--images", str(minimal_image), "--boot-timeout", "60",
                           timeout=1800)
        assert res.returncode == 0, res.stdout + res.stderr
        yield lab
    finally:
        lab.down()


def _states(lab: RunningLab) -> dict[str, str]:
    return {n["name"]: n["state"] for n in json.loads(lab.racklife("nodes", "list", "--json").stdout)}


def _version(lab: RunningLab, node: str, component: str) -> str:
    res = lab.racklife("bmc", "firmware", "list", node, "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    return str(next(c["version"] for c in json.loads(res.stdout)["firmware"]
                    if component in (c["name"], (c["id"] or "").rsplit("/", 1)[-1])))


def _upgrade(lab: RunningLab, nodes: str, image: Path, component: str) -> tuple[int, str]:
    res = lab.racklife("upgrade", "--nodes", nodes, "--firmware", str(image), "--component", component,
                       "--firmware-version", "4.0.0", "--canary", "0", "--policy", "requeue", timeout=1200)
    assert "Traceback" not in res.stderr, res.stderr
    return res.returncode, res.stdout + res.stderr


def test_rolling_firmware_upgrade_on_two_vendor_trees(built: RunningLab, tmp_path: Path) -> None:
    image = make_image(tmp_path / "fw.tar", "BMC", "4.0.0")
    dry = built.racklife("upgrade", "--nodes", "node-01,node-04", "--firmware", str(image), "--component", "BMC",
                         "--firmware-version", "4.0.0", "--canary", "0", "--dry-run", "--json")
    assert dry.returncode == 0, dry.stdout + dry.stderr
    plan = json.loads(dry.stdout)
    assert plan["batches"] == [["node-01"]] and "the ipmi driver" in plan["skipped"]["node-04"]

    for node, component in (("node-01", "BMC"), ("node-03", "5d0869c4")):
        assert _version(built, node, component) != "4.0.0"
        code, text = _upgrade(built, f"{node},node-04" if node == "node-01" else node, image, component)
        assert code == 0, text
        assert _version(built, node, component) == "4.0.0"
        assert _states(built)[node] == "in_service"

    fault = built.racklife("lab", "fault", "node-02", "bmc-tasks-fail", "--dir", str(built.dir))
    assert fault.returncode == 0, fault.stdout + fault.stderr
    before = _version(built, "node-02", "iLO 5")
    code, text = _upgrade(built, "node-02", image, "iLO 5")
    assert code == 1, text
    assert _states(built)["node-02"] == "quarantined"
    assert _version(built, "node-02", "iLO 5") == before

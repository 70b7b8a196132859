"""`racklife bmc firmware …` and `racklife bmc bios …`: the real CLI against the emulator.

Exit codes: 0 done, 2 bad input, 5 refused or not taken (a failed task, a version that did not
change, a BMC without the interface). The password never appears in what is printed.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
import yaml
from typer.testing import CliRunner, Result

from lifecycle.cli import app
from lifecycle.lab.redfish_emulator import RedfishEmulator
from lifecycle.lab.redfish_emulator.update_service import make_image
from lifecycle.model.inventory import load_inventory
from lifecycle.store import Store
from lifecycle.store import db as dbm
from tests.bmc.conftest import PASSWORD, USER, bmc_config

ENV = "RACKLIFE_TEST_FW_BMC"
TREES = {"r01-n01": "dmtf-public-rackmount1", "r01-n02": "openbmc-stock"}
IPMI_NODE = "r01-n08"


@pytest.fixture
def lab(redfish_dir: Path, repo_dir: Path, tmp_path: Path) -> Iterator[tuple[RedfishEmulator,
                                                                            Path]]:
    """Two nodes of the example inventory whose BMCs are emulated (pull and push trees)."""
    configs = [bmc_config(tree, redfish_dir / tree, task_polls=2) for tree in TREES.values()]
    with RedfishEmulator(configs) as emu:
        data = yaml.safe_load((repo_dir / "examples" / "site-h100-2rack.yaml").read_text())
        for node in data["nodes"]:
            if node["name"] in TREES:
                node["bmc"] = {"driver": "redfish", "address": emu.urls[TREES[node["name"]]],
                               "credentials": f"env:{ENV}", "verify_tls": False}
        inventory = tmp_path / "inventory.yaml"
        inventory.write_text(yaml.safe_dump(data), encoding="utf-8")
        yield emu, inventory


def run(inventory: Path, *args: str, yes: bool = True) -> Result:
    """`racklife bmc ARGS`; with ``yes``, a change command gets --yes (no terminal to ask on)."""
    changes = args[:2] in (("firmware", "update"), ("bios", "set"))
    extra = ["--yes"] if yes and changes else []
    result = CliRunner().invoke(app, ["bmc", *args, *extra, "--inventory", str(inventory)],
                                env={ENV: f"{USER}:{PASSWORD}",
                                     "RACKLIFE_DB": f"sqlite:///{inventory.parent}/none.sqlite"})
    for text in (result.stdout, result.stderr):
        assert PASSWORD not in text
    return result


def version(inventory: Path, node: str, component: str) -> str:
    listed = run(inventory, "firmware", "list", node, "--json")
    assert listed.exit_code == 0, listed.stderr
    found = [c for c in json.loads(listed.stdout)["firmware"]
             if component in (c["name"], (c["id"] or "").rsplit("/", 1)[-1])]
    return str(found[0]["version"])


@pytest.mark.parametrize(("node", "component", "method"), [
    ("r01-n01", "BMC", "pull"), ("r01-n02", "5d0869c4", "push")])
def test_firmware_update_changes_the_version(lab: tuple[RedfishEmulator, Path], tmp_path: Path,
                                             node: str, component: str, method: str) -> None:
    _, inventory = lab
    image = make_image(tmp_path / "fw.tar", "BMC", "7.7.7")
    result = run(inventory, "firmware", "update", node, "--file", str(image), "--component",
                 component, "--expect-version", "7.7.7", "--json")
    assert result.exit_code == 0, result.stderr
    out = json.loads(result.stdout)
    assert (out["after"], out["method"], out["task_state"]) == ("7.7.7", method, "Completed")
    assert out["before"] != "7.7.7"
    assert version(inventory, node, component) == "7.7.7"


def test_a_failed_task_and_an_unchanged_version_exit_5(lab: tuple[RedfishEmulator, Path],
                                                       tmp_path: Path) -> None:
    emu, inventory = lab
    image = make_image(tmp_path / "fw.tar", "BMC", "7.7.8")
    emu.set_fault(TREES["r01-n01"], fail_tasks=True)
    failed = run(inventory, "firmware", "update", "r01-n01", "--file", str(image),
                 "--component", "BMC")
    assert failed.exit_code == 5 and "ended Exception" in failed.stderr
    emu.set_fault(TREES["r01-n01"], fail_tasks=False, update_keeps_version=True)
    kept = run(inventory, "firmware", "update", "r01-n01", "--file", str(image),
               "--component", "BMC")
    assert kept.exit_code == 5 and "the update did not take" in " ".join(kept.stderr.split())


def test_bad_input_is_exit_2_and_ipmi_is_refused_before_anything_is_sent(
        lab: tuple[RedfishEmulator, Path], tmp_path: Path) -> None:
    _, inventory = lab
    missing = run(inventory, "firmware", "update", "r01-n01", "--file", str(tmp_path / "nope"),
                  "--component", "BMC")
    assert missing.exit_code == 2 and "no such file" in missing.stderr
    image = make_image(tmp_path / "fw.tar", "BMC", "1")
    wide = run(inventory, "firmware", "update", "r01-n01", "--file", str(image), "--component",
               "BMC", "--serve-address", "0.0.0.0")
    assert wide.exit_code == 2 and "not loopback or on the lab network" in wide.stderr
    assert run(inventory, "bios", "set", "r01-n01", "NoEquals").exit_code == 2
    unknown = run(inventory, "bios", "set", "r01-n01", "NoSuchKnob=1")
    assert unknown.exit_code == 2 and "unknown BIOS attribute" in unknown.stderr
    # The IPMI node's BMC (10.x, not reachable from here) is never contacted: refused first.
    for args in (("firmware", "list", IPMI_NODE), ("bios", "set", IPMI_NODE, "A=1")):
        refused = run(inventory, *args)
        assert refused.exit_code == 5, refused.stderr
        assert "the ipmi driver offers boot, inventory, power" in " ".join(refused.stderr.split())


def test_bios_set_stages_then_reboot_applies_and_reads_back(
        lab: tuple[RedfishEmulator, Path]) -> None:
    _, inventory = lab
    staged = run(inventory, "bios", "set", "r01-n02", "ProcVirtualization=Disabled")
    assert staged.exit_code == 0, staged.stderr
    assert "apply at the next reset" in staged.stdout
    pending = json.loads(run(inventory, "bios", "list", "r01-n02", "--pending", "--json").stdout)
    assert pending["pending"] == {"ProcVirtualization": "Disabled"}
    applied = run(inventory, "bios", "set", "r01-n02", "ProcVirtualization=Disabled",
                  "--reboot", "--timeout", "30", "--json")
    assert applied.exit_code == 0, applied.stderr
    out = json.loads(applied.stdout)
    assert (out["applied"], out["rebooted"], out["apply_time"]) == (True, True, "OnReset")
    live = json.loads(run(inventory, "bios", "list", "r01-n02", "--json").stdout)
    assert live["attributes"]["ProcVirtualization"] == "Disabled"
    again = run(inventory, "bios", "set", "r01-n02", "ProcVirtualization=Disabled", "--reboot")
    assert again.exit_code == 0 and "nothing to do" in again.stdout


def test_a_change_asks_first_and_dry_run_changes_nothing(lab: tuple[RedfishEmulator, Path],
                                                         tmp_path: Path) -> None:
    emu, inventory = lab
    image = make_image(tmp_path / "fw.tar", "BMC", "8.8.8")
    before = version(inventory, "r01-n01", "BMC")
    unasked = run(inventory, "firmware", "update", "r01-n01", "--file", str(image),
                  "--component", "BMC", yes=False)
    assert unasked.exit_code == 5 and "without --yes" in " ".join(unasked.stderr.split())
    dry = run(inventory, "firmware", "update", "r01-n01", "--file", str(image), "--component",
              "BMC", "--dry-run", "--json", yes=False)
    assert dry.exit_code == 0, dry.stderr
    assert json.loads(dry.stdout)["action"] == "update firmware component Contoso BMC Firmware"
    bios = run(inventory, "bios", "set", "r01-n02", "ProcVirtualization=Disabled", "--reboot",
               "--dry-run", "--json", yes=False)
    assert bios.exit_code == 0, bios.stderr
    assert json.loads(bios.stdout)["effects"] == [
        "ProcVirtualization: Enabled → Disabled",
        "the node is reset to apply them (where they apply on reset)"]
    assert version(inventory, "r01-n01", "BMC") == before
    assert not emu.call(lambda: emu.states[TREES["r01-n01"]].tasks)
    pending = json.loads(run(inventory, "bios", "list", "r01-n02", "--pending", "--json").stdout)
    assert pending["pending"] == {}


def test_a_node_a_scheduler_uses_is_refused_unless_forced(lab: tuple[RedfishEmulator, Path],
                                                          tmp_path: Path) -> None:
    _, inventory = lab
    store = Store(f"sqlite:///{inventory.parent}/none.sqlite")  # the database run() names
    try:
        store.import_inventory(load_inventory(inventory))
        with store.engine.begin() as conn:
            conn.execute(sa.update(dbm.nodes).where(dbm.nodes.c.name == "r01-n01")
                         .values(state="in_service"))
    finally:
        store.close()
    image = make_image(tmp_path / "fw.tar", "BMC", "6.6.6")
    refused = run(inventory, "firmware", "update", "r01-n01", "--file", str(image),
                  "--component", "BMC")
    assert refused.exit_code == 5 and "a scheduler is using it" in " ".join(refused.stderr.split())
    assert run(inventory, "bios", "set", "r01-n01", "UsbControl=UsbDisabled",
               "--reboot").exit_code == 5
    # --force is no longer "straight to the BMC" under running jobs: it is the upgrade's change through the node
    # cycle (leave, change, read back, re-test, rejoin; tests/e2e/test_firmware_upgrade_lab.py runs that cycle),
    # planned here by its dry run; nothing reaches the BMC.
    before = version(inventory, "r01-n01", "BMC")
    forced = run(inventory, "firmware", "update", "r01-n01", "--file", str(image), "--component", "BMC",
                 "--expect-version", "6.6.6", "--force", "--dry-run", "--json")
    assert forced.exit_code == 0, forced.stderr
    plan = json.loads(forced.stdout)
    assert plan["action"] == "update the firmware of nodes in service, through the node cycle"
    assert plan["targets"] == ["r01-n01"] and "firmware BMC 6.6.6, read back; re-test; rejoin" in plan["effects"][0]
    bios = run(inventory, "bios", "set", "r01-n01", "UsbControl=UsbDisabled", "--reboot", "--force", "--dry-run",
               "--json")
    assert bios.exit_code == 0 and "bios UsbControl=UsbDisabled" in json.loads(bios.stdout)["effects"][0]
    pushed = run(inventory, "firmware", "update", "r01-n01", "--file", str(image), "--component", "BMC",
                 "--method", "push", "--force")
    assert pushed.exit_code == 2 and "racklife upgrade --firmware" in pushed.stderr
    assert version(inventory, "r01-n01", "BMC") == before != "6.6.6"

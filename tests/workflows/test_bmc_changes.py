"""The firmware and BIOS change kinds: refused on a BMC without the interface, BIOS applied
by a reboot and read back (against the emulator over HTTP), and typed from KEY=VALUE."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from lifecycle.drivers.bmc.base import BiosApplyTime, Credentials
from lifecycle.drivers.bmc.fake import FakeBmc, ManualClock
from lifecycle.drivers.bmc.redfish import RedfishDriver
from lifecycle.drivers.errors import NotSupported, OperationFailed
from lifecycle.lab.redfish_emulator import BmcConfig, RedfishEmulator
from lifecycle.lab.redfish_emulator.update_service import make_image
from lifecycle.model.inventory import load_inventory
from lifecycle.store import Store
from lifecycle.workflows import bmc_changes
from lifecycle.workflows.bmc_changes import BiosSettings, apply_bios, coerce_bios

IPMI_NODE, REDFISH_NODE = "r01-n08", "r01-n01"  # examples/site-h100-2rack.yaml
USER, PASSWORD = "racklife", "emulator-S3cret!"


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def store(tmp_path: Path, repo_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Store]:
    url = f"sqlite:///{tmp_path / 'rl.sqlite'}"
    monkeypatch.setenv("RACKLIFE_DB", url)
    s = Store(url)
    s.import_inventory(load_inventory(repo_dir / "examples" / "site-h100-2rack.yaml"))
    yield s
    s.close()


def test_an_ipmi_node_cannot_take_either_change_and_a_step_refuses_it_clearly(
        store: Store) -> None:
    ipmi, redfish = store.get(IPMI_NODE).node(), store.get(REDFISH_NODE).node()
    assert ipmi.bmc.driver == "ipmi" and redfish.bmc.driver == "redfish"
    assert bmc_changes.check(redfish, "firmware") is None
    assert bmc_changes.check(redfish, "bios") is None
    assert bmc_changes.check(ipmi, "bios") == (
        "a BIOS change needs a BMC with the bios interface; the ipmi driver offers boot, "
        "inventory, power (use Redfish for this node)")
    # The steps refuse before building a driver: nothing is sent (the address is not ours).
    with pytest.raises(NotSupported, match="a firmware update needs a BMC with the firmware "
                       "interface; the ipmi driver"):
        bmc_changes.update_firmware(IPMI_NODE, "/does/not/matter.bin", "BMC")
    with pytest.raises(NotSupported, match=r"a BIOS change needs .* the ipmi driver"):
        bmc_changes.set_bios(IPMI_NODE, {"SriovGlobalEnable": "Enabled"})


def test_bios_on_reset_reboots_once_and_reads_back_then_is_done() -> None:
    clock = ManualClock()
    bmc = FakeBmc(clock=clock, sleep=clock.sleep, powered=True)
    result = apply_bios(bmc, {"SriovGlobalEnable": "Disabled"},
                        BiosSettings(poll_s=1.0), clock=_Adapter(clock))
    assert (result.applied, result.rebooted, result.apply_time) == (True, True, "OnReset")
    assert bmc.bios["SriovGlobalEnable"] == "Disabled" and bmc.requests == ["bios:set",
                                                                           "power:reset"]
    again = apply_bios(bmc, {"SriovGlobalEnable": "Disabled"}, BiosSettings(),
                       clock=_Adapter(clock))
    assert (again.changed, again.rebooted) == ({}, False) and len(bmc.requests) == 2


def test_bios_without_reboot_only_stages() -> None:
    bmc = FakeBmc(powered=True)
    result = apply_bios(bmc, {"BootMode": "Legacy"}, BiosSettings(reboot=False))
    assert (result.applied, result.rebooted, result.pending) == (False, False,
                                                                 {"BootMode": "Legacy"})
    assert bmc.bios["BootMode"] == "Uefi" and "power:reset" not in bmc.requests


class _Adapter:
    """ManualClock (callable, sleep) as the monotonic/sleep clock apply_bios takes."""

    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock

    def monotonic(self) -> float:
        return self.clock()

    def sleep(self, seconds: float) -> None:
        self.clock.advance(seconds)


@pytest.fixture
def emu(fixtures_dir: Path) -> Iterator[RedfishEmulator]:
    tree = fixtures_dir / "redfish" / "dell-idrac-bmclib"
    with RedfishEmulator([BmcConfig("dell", tree, USER, PASSWORD)]) as emulator:
        yield emulator


def driver(emu: RedfishEmulator) -> RedfishDriver:
    return RedfishDriver(emu.urls["dell"], Credentials(USER, PASSWORD), timeout=5.0)


def test_bios_through_the_emulator_is_read_back_after_the_reboot(emu: RedfishEmulator) -> None:
    drv = driver(emu)
    try:
        wanted = coerce_bios(drv.bios_attributes(), {"SriovGlobalEnable": "Enabled"}, drv.target)
        result = apply_bios(drv, wanted, BiosSettings(poll_s=0.0), clock=Clock())
        assert (result.applied, result.rebooted, result.apply_time) == (True, True, "OnReset")
        assert driver(emu).bios_attributes()["SriovGlobalEnable"] == "Enabled"
        with pytest.raises(NotSupported, match="Immediate"):  # the iDRAC lists no Immediate
            apply_bios(drv, {"SriovGlobalEnable": "Disabled"},
                       BiosSettings(apply_time=BiosApplyTime.IMMEDIATE), clock=Clock())
    finally:
        drv.close()


def test_bios_that_does_not_read_back_after_the_reboot_is_a_failure(
        emu: RedfishEmulator) -> None:
    emu.set_fault("dell", bios_settings_fail=True)
    drv = driver(emu)
    try:
        with pytest.raises(OperationFailed, match=r"does not read back SriovGlobalEnable=Enabled"
                           r" 30s after applying .*pending: SriovGlobalEnable=Enabled"):
            apply_bios(drv, {"SriovGlobalEnable": "Enabled"},
                       BiosSettings(timeout_s=30.0, poll_s=10.0), clock=Clock())
    finally:
        drv.close()


def test_undoing_bios_that_never_applied_clears_what_stays_staged(emu: RedfishEmulator) -> None:
    """A change undone by setting the old (still live) values must not leave the new ones pending: before,
    nothing was sent, and the BMC's next reboot applied the value the run had undone."""
    emu.set_fault("dell", bios_settings_fail=True)
    drv = driver(emu)
    try:
        with pytest.raises(OperationFailed, match="does not read back"):
            apply_bios(drv, {"SriovGlobalEnable": "Enabled"}, BiosSettings(timeout_s=10.0, poll_s=10.0),
                       clock=Clock())
        assert drv.bios_pending_attributes() == {"SriovGlobalEnable": "Enabled"}
        undone = apply_bios(drv, {"SriovGlobalEnable": "Disabled"}, BiosSettings(poll_s=0.0), clock=Clock())
        assert (undone.applied, undone.rebooted) == (True, False)
        assert drv.bios_pending_attributes() == {}
        emu.set_fault("dell", bios_settings_fail=False)
        again = apply_bios(drv, {"SriovGlobalEnable": "Disabled"}, BiosSettings(poll_s=0.0), clock=Clock())
        assert (again.changed, again.rebooted) == ({}, False)  # nothing staged, nothing sent
        assert driver(emu).bios_attributes()["SriovGlobalEnable"] == "Disabled"
    finally:
        drv.close()


def test_key_value_strings_are_typed_like_the_attribute() -> None:
    current: dict[str, object] = {"Cores": 0, "Turbo": "Enabled", "Secure": False}
    assert coerce_bios(current, {"Cores": "8", "Turbo": "Disabled", "Secure": "true"}, "t") == \
        {"Cores": 8, "Turbo": "Disabled", "Secure": True}
    with pytest.raises(OperationFailed, match="Cores is an integer, not 'eight'"):
        coerce_bios(current, {"Cores": "eight"}, "t")
    with pytest.raises(OperationFailed, match=r"unknown BIOS attribute.*Nope"):
        coerce_bios(current, {"Nope": "1"}, "t")


@pytest.fixture
def emulated(fixtures_dir: Path, repo_dir: Path, tmp_path: Path,
             monkeypatch: pytest.MonkeyPatch) -> Iterator[RedfishEmulator]:
    """The example inventory in a store, r01-n01's BMC an emulated OpenBMC (push only)."""
    tree = fixtures_dir / "redfish" / "openbmc-stock"
    with RedfishEmulator([BmcConfig("obmc", tree, USER, PASSWORD, task_polls=2)]) as emulator:
        data = yaml.safe_load((repo_dir / "examples" / "site-h100-2rack.yaml").read_text())
        for node in data["nodes"]:
            if node["name"] == REDFISH_NODE:
                node["bmc"] = {"driver": "redfish", "address": emulator.urls["obmc"],
                               "credentials": "env:RACKLIFE_TEST_STEP_BMC", "verify_tls": False}
        inventory = tmp_path / "inventory.yaml"
        inventory.write_text(yaml.safe_dump(data), encoding="utf-8")
        url = f"sqlite:///{tmp_path / 'steps.sqlite'}"
        monkeypatch.setenv("RACKLIFE_DB", url)
        monkeypatch.setenv("RACKLIFE_TEST_STEP_BMC", f"{USER}:{PASSWORD}")
        store = Store(url)
        store.import_inventory(load_inventory(inventory))
        store.close()
        yield emulator


def test_the_node_steps_update_firmware_and_set_bios_through_the_store(
        emulated: RedfishEmulator, tmp_path: Path) -> None:
    image = make_image(tmp_path / "fw.tar", "BMC", "2.99.0")
    assert bmc_changes.firmware_version(REDFISH_NODE, "5d0869c4") != "2.99.0"
    settings = bmc_changes.FirmwareSettings(expect_version="2.99.0")
    done = bmc_changes.update_firmware(REDFISH_NODE, str(image), "5d0869c4", settings)
    assert (done["after"], done["method"], done["changed"]) == ("2.99.0", "push", True)
    assert bmc_changes.firmware_version(REDFISH_NODE, "5d0869c4") == "2.99.0"
    again = bmc_changes.update_firmware(REDFISH_NODE, str(image), "5d0869c4", settings)
    assert again["changed"] is False  # already at the expected version: nothing sent
    assert len(emulated.call(lambda: emulated.states["obmc"].tasks)) == 1

    assert bmc_changes.bios_values(REDFISH_NODE, ["ProcVirtualization", "Nope"]) == {
        "ProcVirtualization": "Enabled"}
    result = bmc_changes.set_bios(REDFISH_NODE, {"ProcVirtualization": "Disabled"},
                                  BiosSettings(poll_s=0.2, timeout_s=30.0))
    assert (result["applied"], result["rebooted"]) == (True, True)
    assert bmc_changes.bios_values(REDFISH_NODE, ["ProcVirtualization"]) == {
        "ProcVirtualization": "Disabled"}


def test_the_change_kinds_a_rolling_upgrade_runs(emulated: RedfishEmulator, tmp_path: Path) -> None:
    """The firmware and bios rows of workflows/changes.py: built from a spec, already-there
    checks that read the BMC, and the BIOS change undone to the values read before it."""
    from lifecycle.workflows import changes

    store = Store(os.environ["RACKLIFE_DB"])  # the emulated fixture's

    image = make_image(tmp_path / "fw.tar", "BMC", "2.98.0")
    fw = changes.ChangeSpec(changes.ChangeKind.FIRMWARE, "5d0869c4",
                            (("file", str(image)), ("version", "2.98.0")))
    assert fw.describe() == "firmware 5d0869c4 2.98.0"
    assert not changes.has(store, REDFISH_NODE, fw)
    change = changes.build(fw, changes.ChangeContext())
    assert change.precheck() == ""
    done = change.apply(REDFISH_NODE)
    assert done.ok and done.detail["after"] == "2.98.0", done.reason
    assert changes.has(store, REDFISH_NODE, fw) and change.undo(REDFISH_NODE) is None

    bios = changes.ChangeSpec(changes.ChangeKind.BIOS, "ProcVirtualization=Disabled",
                              (("ProcVirtualization", "Disabled"),))
    assert not changes.has(store, REDFISH_NODE, bios)
    bios_change = changes.build(bios, changes.ChangeContext())
    assert isinstance(bios_change, bmc_changes.BiosChange)
    bios_change.settings = BiosSettings(poll_s=0.2, timeout_s=30.0)
    assert bios_change.apply(REDFISH_NODE).ok
    assert changes.has(store, REDFISH_NODE, bios)
    undone = bios_change.undo(REDFISH_NODE)
    assert undone is not None and undone.ok, undone
    assert bmc_changes.bios_values(REDFISH_NODE, ["ProcVirtualization"]) == {
        "ProcVirtualization": "Enabled"}

    ipmi = store.get(IPMI_NODE).node()
    assert changes.unsupported(ipmi, fw) is not None and changes.unsupported(ipmi, bios) is not None
    assert changes.unsupported(store.get(REDFISH_NODE).node(), fw) is None
    assert changes.unsupported(ipmi, changes.ChangeSpec(changes.ChangeKind.IMAGE, "minimal")) is None
    store.close()

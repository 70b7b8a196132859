"""Firmware updates through UpdateService and BIOS settings through Bios/Settings, over real
HTTP against the emulator, on several vendor trees.

An update must change the version FirmwareInventory reports; a task that fails is an error; a
task that completes with the version unchanged is a failure too (the BMC that staged the image
and never applied it). The image is served by the controller's HTTP server (BootServer) on
loopback for SimpleUpdate, or pushed multipart where the tree offers MultipartHttpPushUri.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from lifecycle.drivers.bmc.base import BiosApplyTime, PowerAction, UpdateMethod
from lifecycle.drivers.bmc.firmware import find_component, update_firmware
from lifecycle.drivers.bmc.redfish import RedfishDriver
from lifecycle.drivers.boot.image_serve import check_host, serve_image
from lifecycle.drivers.errors import NotSupported, OperationFailed
from lifecycle.lab.redfish_emulator import RedfishEmulator
from lifecycle.lab.redfish_emulator.update_service import make_image
from tests.bmc.conftest import VENDOR_TREES, bmc_config

MakeDriver = Callable[..., RedfishDriver]
# The component each tree's FirmwareInventory calls the BMC's own firmware, and how it takes
# an image (from its captured UpdateService: SimpleUpdate, MultipartHttpPushUri).
COMPONENT = {"dell-idrac-bmclib": "BMC", "dmtf-public-rackmount1": "BMC",
             "hpe-ilo5-dl325": "iLO 5", "openbmc-stock": "5d0869c4"}
METHODS = {"dell-idrac-bmclib": (UpdateMethod.PULL, UpdateMethod.PUSH),
           "dmtf-public-rackmount1": (UpdateMethod.PULL,),
           "hpe-ilo5-dl325": (UpdateMethod.PULL,),
           "openbmc-stock": (UpdateMethod.PUSH,)}


@pytest.fixture
def emu(redfish_dir: Path) -> Iterator[RedfishEmulator]:
    """Every tree, tasks that end after 3 polls (the driver's clock is virtual)."""
    with RedfishEmulator([bmc_config(t, redfish_dir / t, task_polls=3)
                          for t in VENDOR_TREES]) as emulator:
        yield emulator


def image(tmp_path: Path, version: str, component: str = "BMC") -> Path:
    return make_image(tmp_path / f"fw-{version}.tar", component, version)


@pytest.mark.parametrize("tree", VENDOR_TREES)
def test_every_tree_reports_its_update_methods(emu: RedfishEmulator, make_driver: MakeDriver,
                                               tree: str) -> None:
    drv = make_driver(emu.urls[tree])
    assert drv.update_methods() == METHODS[tree]
    assert find_component(drv.firmware_inventory(), COMPONENT[tree], drv.target).version


@pytest.mark.parametrize(("tree", "method"), [
    ("dmtf-public-rackmount1", UpdateMethod.PULL),  # SimpleUpdate described by an ActionInfo
    ("hpe-ilo5-dl325", UpdateMethod.PULL),
    ("openbmc-stock", UpdateMethod.PUSH),  # multipart push only
    ("dell-idrac-bmclib", UpdateMethod.PUSH),  # both offered: push asked for
])
def test_update_changes_the_version_the_inventory_reports(
        emu: RedfishEmulator, make_driver: MakeDriver, tmp_path: Path, tree: str,
        method: UpdateMethod) -> None:
    drv = make_driver(emu.urls[tree])
    before = find_component(drv.firmware_inventory(), COMPONENT[tree], drv.target).version
    seen: list[str] = []
    result = update_firmware(drv, COMPONENT[tree], image(tmp_path, "9.9.1"), serve=serve_image,
                             method=method, expect_version="9.9.1",
                             progress=lambda p: seen.append(p.state))
    assert (result.before, result.after, result.method) == (before, "9.9.1", method)
    assert result.task.state == "Completed" and seen[0] == "Running" and seen[-1] == "Completed"
    fresh = make_driver(emu.urls[tree])  # read back by a new session: the BMC's state, not ours
    assert find_component(fresh.firmware_inventory(), COMPONENT[tree], drv.target).version == \
        "9.9.1"


def test_a_failing_task_is_an_error_and_nothing_changes(
        emu: RedfishEmulator, make_driver: MakeDriver, tmp_path: Path) -> None:
    tree = "dmtf-public-rackmount1"
    emu.set_fault(tree, fail_tasks=True)
    drv = make_driver(emu.urls[tree])
    before = find_component(drv.firmware_inventory(), "BMC", drv.target).version
    with pytest.raises(OperationFailed, match="ended Exception"):
        update_firmware(drv, "BMC", image(tmp_path, "9.9.2"), serve=serve_image)
    assert find_component(drv.firmware_inventory(), "BMC", drv.target).version == before


def test_a_completed_task_with_the_version_unchanged_is_a_failure(
        emu: RedfishEmulator, make_driver: MakeDriver, tmp_path: Path) -> None:
    tree = "openbmc-stock"
    emu.set_fault(tree, update_keeps_version=True)
    drv = make_driver(emu.urls[tree])
    with pytest.raises(OperationFailed, match=r"still reads 2.15.0-dev-686-g100c36de90 after task"
                       " .* completed: the update did not take"):
        update_firmware(drv, "5d0869c4", image(tmp_path, "2.16.0"), serve=None)


def test_an_image_the_bmc_cannot_verify_fails_its_task(
        emu: RedfishEmulator, make_driver: MakeDriver, tmp_path: Path) -> None:
    junk = tmp_path / "junk.bin"
    junk.write_bytes(b"not a firmware package" * 100)
    drv = make_driver(emu.urls["hpe-ilo5-dl325"])
    with pytest.raises(OperationFailed, match="Image verification failed: not a firmware package"):
        update_firmware(drv, "iLO 5", junk, serve=serve_image)


def test_a_url_the_bmc_cannot_reach_fails_its_task(emu: RedfishEmulator,
                                                   make_driver: MakeDriver) -> None:
    drv = make_driver(emu.urls["dmtf-public-rackmount1"])
    with pytest.raises(OperationFailed, match="cannot reach"):  # 10.0.0.1 is not the lab's
        drv.firmware_update("http://10.0.0.1/fw.bin", ["/redfish/v1/UpdateService/"
                                                       "FirmwareInventory/BMC"])


def test_an_unknown_component_or_method_is_refused_before_anything_is_sent(
        emu: RedfishEmulator, make_driver: MakeDriver, tmp_path: Path) -> None:
    drv = make_driver(emu.urls["openbmc-stock"])
    with pytest.raises(OperationFailed, match=r"no firmware component 'GPU'.*Software Inventory"):
        update_firmware(drv, "GPU", image(tmp_path, "1"), serve=None)
    with pytest.raises(NotSupported, match="does not take pull updates"):
        update_firmware(drv, "5d0869c4", image(tmp_path, "1"), serve=serve_image,
                        method=UpdateMethod.PULL)
    assert not emu.call(lambda: emu.states["openbmc-stock"].tasks)


def test_the_image_server_binds_only_loopback_or_the_lab() -> None:
    check_host("127.0.0.1")
    check_host("10.77.0.1")
    for host in ("0.0.0.0", "192.168.1.10", "8.8.8.8", "bmc.example"):
        with pytest.raises(ValueError, match=r"loopback|not an IP"):
            check_host(host)


# --- BIOS ---------------------------------------------------------------------------------

# An attribute each tree's Bios has, and a value it does not have yet.
BIOS_CHANGE = {"dell-idrac-bmclib": ("SriovGlobalEnable", "Enabled"),
               "dmtf-public-rackmount1": ("UsbControl", "UsbDisabled"),
               "hpe-ilo5-dl325": ("Sriov", "Disabled"),
               "openbmc-stock": ("ProcVirtualization", "Disabled")}


@pytest.mark.parametrize("tree", VENDOR_TREES)
def test_bios_on_reset_is_staged_then_read_back_after_the_reboot(
        emu: RedfishEmulator, make_driver: MakeDriver, tree: str) -> None:
    drv = make_driver(emu.urls[tree])
    name, value = BIOS_CHANGE[tree]
    assert drv.bios_attributes()[name] != value
    staged = drv.set_bios_attributes({name: value})
    assert staged.changed == {name: value} and staged.apply_time is BiosApplyTime.ON_RESET
    assert drv.bios_pending_attributes()[name] == value
    assert drv.bios_attributes()[name] != value  # not before the reboot
    assert drv.set_bios_attributes({name: value}).changed == {}  # staged already: no PATCH
    drv.power(PowerAction.ON)
    drv.power(PowerAction.RESET)
    assert drv.bios_attributes()[name] == value
    assert name not in drv.bios_pending_attributes()


def test_bios_immediate_applies_without_a_reboot_where_offered(
        emu: RedfishEmulator, make_driver: MakeDriver) -> None:
    drv = make_driver(emu.urls["dmtf-public-rackmount1"])
    staged = drv.set_bios_attributes({"PowerProfile": "Balanced"},
                                     apply_time=BiosApplyTime.IMMEDIATE)
    assert staged.apply_time is BiosApplyTime.IMMEDIATE
    assert drv.bios_attributes()["PowerProfile"] == "Balanced"


@pytest.mark.parametrize("tree", ["dell-idrac-bmclib", "hpe-ilo5-dl325", "openbmc-stock"])
def test_bios_immediate_is_refused_where_the_bmc_does_not_list_it(
        emu: RedfishEmulator, make_driver: MakeDriver, tree: str) -> None:
    drv = make_driver(emu.urls[tree])
    name, value = BIOS_CHANGE[tree]
    with pytest.raises(NotSupported, match="Immediate"):
        drv.set_bios_attributes({name: value}, apply_time=BiosApplyTime.IMMEDIATE)
    assert name not in drv.bios_pending_attributes()


def test_bios_unknown_attribute_is_refused_before_the_patch(
        emu: RedfishEmulator, make_driver: MakeDriver) -> None:
    drv = make_driver(emu.urls["openbmc-stock"])
    with pytest.raises(OperationFailed, match=r"unknown BIOS attribute.*NoSuchKnob"):
        drv.set_bios_attributes({"NoSuchKnob": 1, "BootMode": "Uefi"})
    assert drv.bios_pending_attributes() == {}

"""Every BmcDriver method of RedfishDriver against the emulator, for each captured vendor tree.

What a tree does not offer must come back as NotSupported (never a crash, never a
silent success); the table below says, per tree, what the captured data offers.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest

from lifecycle.drivers.bmc.base import BootDevice, PowerAction, PowerState, TaskProgress
from lifecycle.drivers.bmc.redfish import RedfishDriver
from lifecycle.drivers.boot.image_serve import serve_image
from lifecycle.drivers.errors import NotSupported, OperationFailed
from lifecycle.lab.redfish_emulator import RedfishEmulator
from lifecycle.lab.redfish_emulator.update_service import make_image

MakeDriver = Callable[..., RedfishDriver]
TREES = ("dell-idrac-bmclib", "dmtf-public-rackmount1", "hpe-ilo5-dl325", "openbmc-stock")

# What each captured tree offers (read from its JSON): boot targets, Bios with a settings
# object, a virtual CD, SimpleUpdate, a Chassis with sensors.
OFFERS = {
    "dell-idrac-bmclib": {"http_boot", "bios", "vmedia", "update"},
    "dmtf-public-rackmount1": {"bios", "vmedia", "update", "sensors"},
    "hpe-ilo5-dl325": {"http_boot", "bios", "vmedia", "update", "sensors"},
    "openbmc-stock": {"bios", "sensors"},  # a Bios with synthetic attributes (bios_settings.py)
}
BIOS_CHANGE = {
    "dell-idrac-bmclib": ("SriovGlobalEnable", "Enabled"),
    # The DMTF capture already stages a different AdminPhone in Bios/Settings.
    "dmtf-public-rackmount1": ("AdminPhone", "(555) 010-0199"),
    "hpe-ilo5-dl325": ("Sriov", "Disabled"),
    "openbmc-stock": ("ProcVirtualization", "Disabled"),
}
RESET_TARGETS = {
    "dell-idrac-bmclib": "/redfish/v1/Systems/System.Embedded.1/Actions/ComputerSystem.Reset",
    "dmtf-public-rackmount1": "/redfish/v1/Systems/437XR1138R2/Actions/ComputerSystem.Reset",
    "hpe-ilo5-dl325": "/redfish/v1/Systems/1/Actions/ComputerSystem.Reset",
    "openbmc-stock": "/redfish/v1/Systems/system/Actions/ComputerSystem.Reset",
}


def posts(emu: RedfishEmulator, name: str, path: str) -> int:
    return int(emu.call(lambda: emu.states[name].requests[("POST", path)]))


@pytest.mark.parametrize("tree", TREES)
def test_power_is_idempotent_and_lands(emulator: RedfishEmulator, make_driver: MakeDriver,
                                       tree: str) -> None:
    drv = make_driver(emulator.urls[tree])
    target = RESET_TARGETS[tree]
    drv.power(PowerAction.ON)
    assert drv.power_state() is PowerState.ON
    before = posts(emulator, tree, target)
    drv.power(PowerAction.ON)  # already on: no request at all
    assert posts(emulator, tree, target) == before
    drv.power(PowerAction.OFF)
    assert drv.power_state() is PowerState.OFF
    drv.power(PowerAction.OFF)
    drv.power(PowerAction.GRACEFUL_OFF)
    assert posts(emulator, tree, target) == before + 1
    drv.power(PowerAction.CYCLE)  # off: just on
    assert drv.power_state() is PowerState.ON
    drv.power(PowerAction.RESET)
    drv.power(PowerAction.CYCLE)
    drv.power(PowerAction.GRACEFUL_OFF)
    assert drv.power_state() is PowerState.OFF
    assert posts(emulator, tree, target) == before + 5


def test_cycle_uses_power_cycle_only_where_allowed(emulator: RedfishEmulator,
                                                   make_driver: MakeDriver) -> None:
    for tree, expected in (("dell-idrac-bmclib", "PowerCycle"), ("hpe-ilo5-dl325", "ForceRestart")):
        drv = make_driver(emulator.urls[tree])
        drv.power(PowerAction.ON)
        sent: list[str] = []
        original = drv.transport.request

        def spy(method: str, path: str, body: object = None, headers: object = None,
                _orig: Callable[..., object] = original, _sent: list[str] = sent) -> object:
            if method == "POST" and isinstance(body, dict):
                _sent.append(str(body.get("ResetType")))
            return _orig(method, path, body, headers)

        drv.transport.request = spy  # type: ignore[method-assign,assignment]
        drv.power(PowerAction.CYCLE)
        assert sent == [expected]


@pytest.mark.parametrize("tree", TREES)
def test_boot_once_reverts_after_the_next_boot(emulator: RedfishEmulator,
                                               make_driver: MakeDriver, tree: str) -> None:
    drv = make_driver(emulator.urls[tree])
    drv.power(PowerAction.OFF)
    drv.set_boot(BootDevice.PXE, once=True)
    boot = drv.system()["Boot"]
    assert (boot["BootSourceOverrideTarget"], boot["BootSourceOverrideEnabled"]) == ("Pxe", "Once")
    patches = emulator.call(lambda: sum(n for (m, _), n in emulator.states[tree].requests.items()
                                        if m == "PATCH"))
    drv.set_boot(BootDevice.PXE, once=True)  # already set: no PATCH
    assert emulator.call(lambda: sum(n for (m, _), n in emulator.states[tree].requests.items()
                                     if m == "PATCH")) == patches
    drv.power(PowerAction.ON)
    assert emulator.states[tree].booted_from[-1] == "Pxe"
    boot = drv.system()["Boot"]
    assert (boot["BootSourceOverrideTarget"], boot["BootSourceOverrideEnabled"]) == (
        "None", "Disabled")
    drv.power(PowerAction.RESET)
    assert emulator.states[tree].booted_from[-1] == "Default"


@pytest.mark.parametrize("tree", TREES)
def test_http_boot_only_where_the_tree_allows_it(emulator: RedfishEmulator,
                                                 make_driver: MakeDriver, tree: str) -> None:
    drv = make_driver(emulator.urls[tree])
    if "http_boot" in OFFERS[tree]:
        drv.set_boot(BootDevice.HTTP, once=False)
        assert drv.system()["Boot"]["BootSourceOverrideTarget"] == "UefiHttp"
    else:
        with pytest.raises(NotSupported):
            drv.set_boot(BootDevice.HTTP)


@pytest.mark.parametrize("tree", TREES)
def test_sensors_and_health(emulator: RedfishEmulator, make_driver: MakeDriver,
                            tree: str) -> None:
    drv = make_driver(emulator.urls[tree])
    assert drv.health().overall == "OK"
    if "sensors" not in OFFERS[tree]:
        with pytest.raises(NotSupported):
            drv.sensors()
        return
    readings = drv.sensors()
    expected = {"dmtf-public-rackmount1": ("CPU1 Temp", 41.0, 8),
                "hpe-ilo5-dl325": ("01-Inlet Ambient", 17.0, 44),
                "openbmc-stock": ("Chassis Power Control", None, 1)}[tree]
    assert (readings[0].name, readings[0].value, len(readings)) == expected


@pytest.mark.parametrize("tree", TREES)
def test_event_log_read_filter_and_clear(emulator: RedfishEmulator, make_driver: MakeDriver,
                                         tree: str) -> None:
    drv = make_driver(emulator.urls[tree])
    captured = {"dell-idrac-bmclib": ["OEM software event.", "OEM software event."],
                "dmtf-public-rackmount1": ["Temperature threshold exceeded"] * 2,
                "hpe-ilo5-dl325": [], "openbmc-stock": []}[tree]
    assert [e.message for e in drv.event_log()] == captured
    drv.power(PowerAction.ON)
    drv.power(PowerAction.OFF)
    drv.power(PowerAction.ON)
    recent = drv.event_log(since=datetime(2025, 1, 1, tzinfo=UTC))
    assert [e.message.split()[-1] for e in recent][-2:] == ["off", "on"]
    drv.clear_event_log()
    assert drv.event_log() == []


@pytest.mark.parametrize("tree", TREES)
def test_bios_attributes_stage_until_reboot(emulator: RedfishEmulator, make_driver: MakeDriver,
                                            tree: str) -> None:
    drv = make_driver(emulator.urls[tree])
    if "bios" not in OFFERS[tree]:
        with pytest.raises(NotSupported):
            drv.bios_attributes()
        with pytest.raises(NotSupported):
            drv.set_bios_attributes({"Any": "Thing"})
        return
    name, value = BIOS_CHANGE[tree]
    before = drv.bios_attributes()
    assert before[name] != value
    drv.set_bios_attributes({name: value})
    assert drv.bios_attributes()[name] == before[name]  # pending, as Redfish stages it
    drv.power(PowerAction.ON)
    drv.power(PowerAction.RESET)
    assert drv.bios_attributes()[name] == value
    with pytest.raises(OperationFailed):
        drv.set_bios_attributes({"NoSuchAttribute": 1})


@pytest.mark.parametrize("tree", TREES)
def test_virtual_media(emulator: RedfishEmulator, make_driver: MakeDriver, tree: str) -> None:
    drv = make_driver(emulator.urls[tree])
    url = "http://10.0.0.1/images/rescue.iso"
    if "vmedia" not in OFFERS[tree]:
        with pytest.raises(NotSupported):
            drv.virtual_media_insert(url)
        return
    drv.virtual_media_insert(url)
    drv.virtual_media_insert(url)  # already inserted: nothing to do
    media = drv._cd()
    assert (media["Inserted"], media["Image"]) == (True, url)
    drv.virtual_media_eject()
    drv.virtual_media_eject()
    assert drv._cd()["Inserted"] is False


@pytest.mark.parametrize("tree", TREES)
def test_firmware_update_follows_the_task(emulator: RedfishEmulator, make_driver: MakeDriver,
                                          tree: str, tmp_path: Path) -> None:
    drv = make_driver(emulator.urls[tree])
    if "update" not in OFFERS[tree]:
        with pytest.raises(NotSupported):
            drv.firmware_update("http://127.0.0.1/fw/bios.bin")
        return
    bios = next(f for f in drv.firmware_inventory() if "BIOS" in f.name or "ROM" in f.name)
    assert bios.id is not None
    seen: list[TaskProgress] = []
    with serve_image(make_image(tmp_path / "bios.tar", "BIOS", "9.0.0")) as url:
        final = drv.firmware_update(url, [bios.id], progress=seen.append)
    assert final.state == "Completed" and final.percent == 100
    percents = [p.percent for p in seen]
    # Three polls make the task's time; it then waits (at 99%) until the image is downloaded.
    assert percents[:3] == [0, 33, 66] and percents[-1] == 100
    assert set(percents[3:-1]) <= {99}
    assert f"Installed 9.0.0 on {bios.id}." in final.messages
    assert drv.inventory().system.bios_version == "9.0.0"


def test_firmware_update_refuses_a_protocol_the_bmc_cannot_fetch(
        emulator: RedfishEmulator, make_driver: MakeDriver) -> None:
    drv = make_driver(emulator.urls["hpe-ilo5-dl325"])  # HTTP and HTTPS only
    with pytest.raises(NotSupported):
        drv.firmware_update("tftp://10.0.0.1/fw.bin")


def test_firmware_update_task_failure(emulator: RedfishEmulator,
                                      make_driver: MakeDriver) -> None:
    emulator.set_fault("dmtf-public-rackmount1", fail_tasks=True)
    with pytest.raises(OperationFailed, match="Exception"):
        make_driver(emulator.urls["dmtf-public-rackmount1"]).firmware_update("http://x/fw.bin")


@pytest.mark.parametrize("tree", TREES)
def test_secure_erase_needs_a_drive(emulator: RedfishEmulator, make_driver: MakeDriver,
                                    tree: str) -> None:
    with pytest.raises(NotSupported):  # no captured tree has Storage Drives
        make_driver(emulator.urls[tree]).secure_erase("0")


def test_secure_erase_follows_the_task_and_reads_back(gpu_emulator: RedfishEmulator,
                                                      make_driver: MakeDriver) -> None:
    drv = make_driver(gpu_emulator.urls["hgx-processors"])
    seen: list[TaskProgress] = []
    final = drv.secure_erase("1", progress=seen.append)
    assert final.state == "Completed"
    assert [p.percent for p in seen] == [0, 33, 66, 100]
    gpu_emulator.set_fault("hgx-processors", erase_leaves_data=True)
    with pytest.raises(OperationFailed, match="reads back"):
        drv.secure_erase("0")


def test_system_id_picks_and_checks(emulator: RedfishEmulator, make_driver: MakeDriver) -> None:
    url = emulator.urls["hpe-ilo5-dl325"]
    assert make_driver(url, system_id="1").system_path() == "/redfish/v1/Systems/1"
    with pytest.raises(NotSupported, match="no system 'Blade7'"):
        make_driver(url, system_id="Blade7").power_state()


def test_basic_auth_sends_no_session(emulator: RedfishEmulator, make_driver: MakeDriver) -> None:
    drv = make_driver(emulator.urls["openbmc-stock"], auth="basic")
    assert drv.power_state() in (PowerState.ON, PowerState.OFF)
    assert emulator.call(lambda: len(emulator.states["openbmc-stock"].sessions)) == 0


def test_close_logs_out(emulator: RedfishEmulator, make_driver: MakeDriver) -> None:
    drv = make_driver(emulator.urls["dmtf-public-rackmount1"])
    drv.power_state()
    assert emulator.call(lambda: len(emulator.states["dmtf-public-rackmount1"].sessions)) == 1
    drv.close()
    assert emulator.call(lambda: len(emulator.states["dmtf-public-rackmount1"].sessions)) == 0

"""The IPMI driver against our pyghmi-based emulator: real RMCP+ over UDP on loopback."""

from __future__ import annotations

from datetime import timedelta

import pytest

from lifecycle.drivers.bmc.base import (
    BiosInterface,
    BootDevice,
    BootMode,
    Capability,
    EraseInterface,
    FirmwareInterface,
    PowerAction,
    PowerState,
    VirtualMediaInterface,
    require,
)
from lifecycle.drivers.errors import AuthFailed, NotSupported, OperationFailed
from tests.bmc.ipmi_fixtures import POWER_DELAY_S, Lab, ipmi_lab_fixture  # noqa: F401 - fixture

CHASSIS_CONTROL = (0x00, 0x02)
SET_BOOT = (0x00, 0x08)


def test_power_on_lands_after_the_delay_and_repeating_it_sends_nothing(ipmi_lab: Lab) -> None:
    driver = ipmi_lab.driver()
    assert driver.power_state() is PowerState.OFF
    driver.power(PowerAction.ON)
    assert driver.power_state() is PowerState.OFF  # real hardware takes time
    ipmi_lab.clock.advance(POWER_DELAY_S)
    assert driver.power_state() is PowerState.ON
    assert ipmi_lab.bmc.calls[CHASSIS_CONTROL] == 1
    driver.power(PowerAction.ON)
    assert ipmi_lab.bmc.calls[CHASSIS_CONTROL] == 1  # already on: no request
    ipmi_lab.emulator.tick()
    assert ipmi_lab.power_events == [("bmc-a", "on")]
    driver.close()


def test_off_cycle_and_reset(ipmi_lab: Lab) -> None:
    driver = ipmi_lab.driver()
    driver.power(PowerAction.OFF)  # already off
    driver.power(PowerAction.GRACEFUL_OFF)
    assert ipmi_lab.bmc.calls[CHASSIS_CONTROL] == 0
    driver.power(PowerAction.CYCLE)  # off node: cycle means on
    ipmi_lab.clock.advance(POWER_DELAY_S)
    assert driver.power_state() is PowerState.ON
    driver.power(PowerAction.CYCLE)
    ipmi_lab.clock.advance(POWER_DELAY_S)
    assert driver.power_state() is PowerState.OFF
    ipmi_lab.clock.advance(POWER_DELAY_S)
    assert driver.power_state() is PowerState.ON
    driver.power(PowerAction.RESET)
    ipmi_lab.clock.advance(POWER_DELAY_S)
    assert driver.power_state() is PowerState.ON
    driver.power(PowerAction.GRACEFUL_OFF)
    ipmi_lab.clock.advance(POWER_DELAY_S)
    assert driver.power_state() is PowerState.OFF
    assert ipmi_lab.power_events == [("bmc-a", "on"), ("bmc-a", "off"), ("bmc-a", "on"),
                                     ("bmc-a", "off"), ("bmc-a", "on"), ("bmc-a", "off")]
    driver.close()


def test_once_boot_override_is_consumed_by_the_next_boot(ipmi_lab: Lab) -> None:
    driver = ipmi_lab.driver()
    driver.set_boot(BootDevice.PXE, once=True, mode=BootMode.UEFI)
    assert driver.boot_override() == (BootDevice.PXE, False, BootMode.UEFI)
    driver.power(PowerAction.ON)
    ipmi_lab.clock.advance(POWER_DELAY_S)
    assert driver.power_state() is PowerState.ON
    assert driver.boot_override()[0] is None


def test_persistent_legacy_boot_survives_a_reset(ipmi_lab: Lab) -> None:
    driver = ipmi_lab.driver()
    driver.set_boot(BootDevice.DISK, once=False, mode=BootMode.LEGACY)
    driver.power(PowerAction.ON)
    ipmi_lab.clock.advance(POWER_DELAY_S)
    driver.power(PowerAction.RESET)
    ipmi_lab.clock.advance(POWER_DELAY_S)
    assert driver.boot_override() == (BootDevice.DISK, True, BootMode.LEGACY)
    driver.set_boot(BootDevice.CD, once=True)
    assert driver.boot_override() == (BootDevice.CD, False, BootMode.UEFI)


def test_http_boot_is_not_supported_and_sends_nothing(ipmi_lab: Lab) -> None:
    driver = ipmi_lab.driver()
    with pytest.raises(NotSupported, match="HTTP"):
        driver.set_boot(BootDevice.HTTP)
    assert ipmi_lab.bmc.calls[SET_BOOT] == 0


def test_inventory_reads_fru_guid_and_firmware(ipmi_lab: Lab) -> None:
    inv = ipmi_lab.driver().inventory()
    assert inv.system.vendor == "Supermicro"
    assert inv.system.model == "SYS-821GE-TNHR"
    assert inv.system.serial == "S4Z1X0042"
    assert inv.system.uuid == "6f1c7e64-2b1d-4e8a-9c55-0c2f8a9b1d42"
    assert inv.system.bios_version == "2.4.V2"
    assert [(f.name, f.version) for f in inv.firmware] == [("BMC", "1.50"), ("BIOS", "2.4.V2")]
    assert (inv.cpus, inv.gpus, inv.nics, inv.drives) == ([], [], [], [])


def test_sensors_and_health(ipmi_lab: Lab) -> None:
    driver = ipmi_lab.driver()
    readings = {r.name: r for r in driver.sensors()}
    assert set(readings) == {"Inlet Temp", "CPU0 Temp", "GPU0 Temp", "12V", "FAN1", "Sys Power"}
    assert (readings["CPU0 Temp"].kind, readings["CPU0 Temp"].value) == ("temperature", 52.0)
    assert readings["CPU0 Temp"].unit == "°C"
    assert readings["12V"].value == pytest.approx(12.08)
    assert (readings["FAN1"].kind, readings["FAN1"].value) == ("fan", 7200.0)
    assert (readings["Sys Power"].kind, readings["Sys Power"].unit) == ("power", "W")
    assert driver.health().overall == "OK"
    ipmi_lab.spec.sensors[2].health = "Critical"
    ipmi_lab.spec.sensors[4].health = "Warning"
    health = driver.health()
    assert health.overall == "Critical"
    assert set(health.details) == {"GPU0 Temp", "FAN1"}
    assert health.details["GPU0 Temp"].startswith("Critical")


def test_sel_read_filter_and_clear(ipmi_lab: Lab) -> None:
    driver = ipmi_lab.driver()
    entries = driver.event_log()
    assert [(e.id, e.severity, e.message) for e in entries] == [
        ("1", "Critical", "CPU0 Temp: Upper critical"),
        ("2", "Warning", "Sensor 32.64.0: Correctable error"),
    ]
    first, second = (e.created for e in entries)
    assert first is not None and second is not None
    assert second - first == timedelta(minutes=30)
    assert [e.id for e in driver.event_log(since=first + timedelta(minutes=1))] == ["2"]
    driver.clear_event_log()
    assert driver.event_log() == []
    assert ipmi_lab.bmc.calls[(0x0A, 0x47)] == 1


def test_what_ipmi_cannot_do_it_does_not_offer(ipmi_lab: Lab) -> None:
    """IPMI's hardware type is power, boot and inventory: the other interfaces are absent (not
    methods that raise), and asking for one names the driver and points at Redfish."""
    driver = ipmi_lab.driver()
    assert driver.capabilities == {Capability.POWER, Capability.BOOT, Capability.INVENTORY}
    for interface in (FirmwareInterface, BiosInterface, VirtualMediaInterface, EraseInterface):
        assert not isinstance(driver, interface)
        with pytest.raises(NotSupported, match="the ipmi driver offers boot, inventory, power"
                           r".*Redfish"):
            require(driver, interface)
    assert not hasattr(driver, "firmware_update")
    assert sum(ipmi_lab.bmc.calls.values()) == 0  # nothing was sent


def test_pyghmi_negotiates_sha1_because_the_emulator_refuses_sha256(ipmi_lab: Lab) -> None:
    driver = ipmi_lab.driver()
    driver.power_state()
    assert driver._cmd.ipmi_session.currhashlib.__name__ == "openssl_sha1"


def test_wrong_password_and_unknown_user_are_auth_failures(ipmi_lab: Lab) -> None:
    with pytest.raises(AuthFailed) as wrong:
        ipmi_lab.driver(password="not-the-password").power_state()
    assert "not-the-password" not in str(wrong.value)
    assert wrong.value.exit_code == 4
    with pytest.raises(AuthFailed):
        ipmi_lab.driver(user="nobody").power_state()


def test_a_refused_power_request_is_operation_failed(ipmi_lab: Lab) -> None:
    ipmi_lab.spec.refuse_power = True
    with pytest.raises(OperationFailed, match="D5h") as refused:
        ipmi_lab.driver().power(PowerAction.ON)
    assert refused.value.exit_code == 5
    assert ipmi_lab.clock() == ipmi_lab.clock.now  # no retries were made
    assert ipmi_lab.bmc.calls[CHASSIS_CONTROL] == 1

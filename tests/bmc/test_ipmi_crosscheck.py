"""Cross-checks with independent IPMI implementations.

- Debian's ipmitool (``-I lanplus -C 3``) against our emulator: what it reads and writes must
  agree with what the driver reads and writes.
- Our driver (and ipmitool) against OpenIPMI's ipmi_sim. Known limits of ipmi_sim: it refuses
  Read FRU Data above ~32 bytes (completion code C8h; the driver halves its reads until
  accepted) and reports the boot device as "default" whatever was set.
"""

from __future__ import annotations

import re

from lifecycle.drivers.bmc.base import BootDevice, BootMode, PowerAction, PowerState
from tests.bmc.ipmi_fixtures import (  # noqa: F401 - fixtures
    POWER_DELAY_S,
    SIM_SENSOR,
    SIM_SPEC,
    Lab,
    Sim,
    ipmi_lab_fixture,
    ipmi_sim_fixture,
    ipmitool,
)


def test_ipmitool_power_agrees_with_the_driver(ipmi_lab: Lab) -> None:
    assert ipmi_lab.ipmitool("power", "status").stdout.strip() == "Chassis Power is off"
    assert ipmi_lab.ipmitool("power", "on").returncode == 0
    assert ipmi_lab.power_events == []  # not yet: the change takes time
    ipmi_lab.clock.advance(POWER_DELAY_S)
    ipmi_lab.emulator.tick()
    assert ipmi_lab.power_events == [("bmc-a", "on")]
    driver = ipmi_lab.driver()
    assert driver.power_state() is PowerState.ON
    driver.power(PowerAction.OFF)
    ipmi_lab.clock.advance(POWER_DELAY_S)
    assert ipmi_lab.ipmitool("power", "status").stdout.strip() == "Chassis Power is off"


def test_boot_device_both_ways(ipmi_lab: Lab) -> None:
    driver = ipmi_lab.driver()
    driver.set_boot(BootDevice.PXE, once=True, mode=BootMode.UEFI)
    out = ipmi_lab.ipmitool("chassis", "bootparam", "get", "5").stdout
    assert "Boot Device Selector : Force PXE" in out
    assert "Options apply to only next boot" in out
    assert "BIOS EFI boot" in out
    assert ipmi_lab.ipmitool("chassis", "bootdev", "disk", "options=persistent").returncode == 0
    assert driver.boot_override() == (BootDevice.DISK, True, BootMode.LEGACY)


def test_sensors_fru_and_sel_agree_with_ipmitool(ipmi_lab: Lab) -> None:
    driver = ipmi_lab.driver()
    sdr = ipmi_lab.ipmitool("sdr", "list").stdout
    rows = dict(re.findall(r"^(.+?)\s*\|\s*([\d.]+) ", sdr, re.MULTILINE))
    assert {name: float(v) for name, v in rows.items()} == {
        r.name: round(r.value or 0, 2) for r in driver.sensors()}
    fru = ipmi_lab.ipmitool("fru", "print", "0").stdout
    inv = driver.inventory()
    assert re.search(rf"Product Serial\s+: {inv.system.serial}$", fru, re.MULTILINE)
    assert re.search(rf"Product Manufacturer\s+: {inv.system.vendor}$", fru, re.MULTILINE)
    sel = ipmi_lab.ipmitool("sel", "list").stdout.strip().splitlines()
    assert len(sel) == len(driver.event_log()) == 2
    assert "Upper Critical going high" in sel[0]
    assert ipmi_lab.ipmitool("sel", "clear").returncode == 0
    assert driver.event_log() == []


def test_ipmitool_with_a_wrong_password_is_refused(ipmi_lab: Lab) -> None:
    result = ipmi_lab.ipmitool("power", "status", password="wrong-password")
    assert result.returncode != 0
    assert "Unable to establish IPMI v2 / RMCP+ session" in result.stderr


def test_driver_against_ipmi_sim(ipmi_sim: Sim) -> None:
    driver = ipmi_sim.driver()
    assert driver.power_state() is PowerState.OFF
    driver.power(PowerAction.ON)
    assert driver.power_state() is PowerState.ON
    driver.power(PowerAction.ON)  # idempotent against a second implementation too
    driver.power(PowerAction.OFF)
    assert driver.power_state() is PowerState.OFF
    inv = driver.inventory()  # needs the driver's FRU read back-off (ipmi_sim: C8h above ~32 B)
    assert (inv.system.vendor, inv.system.model, inv.system.serial) == (
        SIM_SPEC.manufacturer, SIM_SPEC.product, SIM_SPEC.serial)
    assert inv.system.bios_version == ""  # ipmi_sim has no System Info parameter 1
    [reading] = driver.sensors()
    assert (reading.name, reading.value, reading.unit) == (SIM_SENSOR.name, 24.0, "°C")
    driver.set_boot(BootDevice.PXE)
    assert driver.boot_override()[0] is None  # ipmi_sim always answers "default"
    assert driver.event_log() == []
    driver.close()


def test_ipmitool_against_ipmi_sim(ipmi_sim: Sim) -> None:
    assert ipmitool(ipmi_sim.port, "power", "on").returncode == 0
    assert ipmitool(ipmi_sim.port, "power", "status").stdout.strip() == "Chassis Power is on"
    assert ipmi_sim.driver().power_state() is PowerState.ON
    assert "Inlet Temp       | 24 degrees C" in ipmitool(ipmi_sim.port, "sdr", "list").stdout

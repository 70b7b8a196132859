"""The fake BMC behaves like hardware: changes take (virtual) time, faults can be injected."""

from __future__ import annotations

import pytest

from lifecycle.drivers.bmc.base import BootDevice, PowerAction, PowerState, TaskProgress
from lifecycle.drivers.bmc.fake import FakeBmc, ManualClock
from lifecycle.drivers.errors import (
    AuthFailed,
    DriverError,
    NotSupported,
    OperationFailed,
    Unreachable,
)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def bmc(clock: ManualClock) -> FakeBmc:
    return FakeBmc(clock=clock, sleep=clock.sleep, power_delay_s=10.0)


def test_power_on_takes_time_and_is_idempotent(bmc: FakeBmc, clock: ManualClock) -> None:
    assert bmc.power_state() is PowerState.OFF
    bmc.power(PowerAction.ON)
    assert bmc.power_state() is PowerState.POWERING_ON
    bmc.power(PowerAction.ON)  # already on the way
    clock.advance(9.9)
    assert bmc.power_state() is PowerState.POWERING_ON
    clock.advance(0.1)
    assert bmc.power_state() is PowerState.ON
    bmc.power(PowerAction.ON)
    assert bmc.requests == ["power:on"]
    assert bmc.calls["power"] == 3


def test_off_graceful_off_cycle_and_reset(bmc: FakeBmc, clock: ManualClock) -> None:
    bmc.power(PowerAction.OFF)
    bmc.power(PowerAction.GRACEFUL_OFF)
    assert bmc.requests == []  # already off
    bmc.power(PowerAction.CYCLE)  # off: cycle is just on
    clock.advance(10)
    assert bmc.power_state() is PowerState.ON
    bmc.power(PowerAction.GRACEFUL_OFF)  # an OS shutdown takes longer than a hard off
    clock.advance(10)
    assert bmc.power_state() is PowerState.POWERING_OFF
    clock.advance(10)
    assert bmc.power_state() is PowerState.OFF
    bmc.power(PowerAction.ON)
    clock.advance(10)
    bmc.power(PowerAction.CYCLE)
    clock.advance(10)
    assert bmc.power_state() is PowerState.POWERING_ON
    clock.advance(10)
    assert bmc.power_state() is PowerState.ON
    bmc.power(PowerAction.RESET)
    clock.advance(10)
    assert bmc.power_state() is PowerState.ON
    assert len(bmc.boots) == 4


def test_once_override_is_consumed_by_the_next_boot(bmc: FakeBmc, clock: ManualClock) -> None:
    bmc.set_boot(BootDevice.PXE, once=True)
    bmc.set_boot(BootDevice.PXE, once=True)  # same: no request
    bmc.power(PowerAction.ON)
    clock.advance(10)
    bmc.power_state()
    bmc.power(PowerAction.RESET)
    clock.advance(10)
    bmc.power_state()
    assert bmc.boots == [BootDevice.PXE, None]
    assert bmc.boot is None
    bmc.set_boot(BootDevice.DISK, once=False)
    bmc.power(PowerAction.RESET)
    clock.advance(10)
    bmc.power_state()
    assert bmc.boots[-1] is BootDevice.DISK and bmc.boot is not None
    assert bmc.requests.count("boot:pxe:once") == 1


def test_bios_attributes_apply_at_the_next_boot(bmc: FakeBmc, clock: ManualClock) -> None:
    bmc.set_bios_attributes({"SriovGlobalEnable": "Disabled"})
    assert bmc.bios_attributes()["SriovGlobalEnable"] == "Enabled"
    bmc.power(PowerAction.ON)
    clock.advance(10)
    assert bmc.bios_attributes()["SriovGlobalEnable"] == "Disabled"
    with pytest.raises(OperationFailed, match="NoSuchThing"):
        bmc.set_bios_attributes({"NoSuchThing": 1})


@pytest.mark.parametrize(("fault", "error", "exit_code"), [
    ("unreachable", Unreachable, 3), ("auth", AuthFailed, 4), ("refuse", OperationFailed, 5)])
def test_injected_faults_raise_the_right_error(bmc: FakeBmc, fault: str,
                                               error: type[DriverError], exit_code: int) -> None:
    bmc.inject(fault, methods={"power"}, times=2)  # type: ignore[arg-type]
    for _ in range(2):
        with pytest.raises(error) as raised:
            bmc.power(PowerAction.ON)
        assert raised.value.exit_code == exit_code
    assert bmc.power_state() is PowerState.OFF  # other methods are unaffected
    bmc.power(PowerAction.ON)  # healed after two failures
    assert bmc.requests == ["power:on"]
    assert bmc.calls["power"] == 3


def test_slow_bmc_takes_virtual_time(bmc: FakeBmc, clock: ManualClock) -> None:
    bmc.inject("slow", seconds=30)
    start = clock()
    bmc.inventory()
    assert clock() - start == 30
    bmc.clear_faults()
    bmc.inventory()
    assert clock() - start == 30


def test_tasks_report_progress_and_sensors_health(bmc: FakeBmc) -> None:
    seen: list[TaskProgress] = []
    final = bmc.firmware_update("https://images.example/bios.bin", progress=seen.append)
    assert [p.percent for p in seen] == [0, 50, 100] and final.state == "Completed"
    assert bmc.secure_erase("nvme0").state == "Completed"
    with pytest.raises(NotSupported):
        bmc.secure_erase("nvme9")
    assert bmc.health().overall == "OK"
    bmc.add_event("GPU 3 fell off the bus", "Critical")
    assert [e.message for e in bmc.event_log()] == ["GPU 3 fell off the bus"]
    bmc.clear_event_log()
    assert bmc.event_log() == []
    inv = bmc.inventory()
    assert len(inv.gpus) == 8 and inv.system.serial == "FAKE0001"

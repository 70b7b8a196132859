"""A fake BMC that behaves like hardware, for tests of workflows and the CLI.

Why it exists: workflow tests need a BMC that answers instantly yet does not lie about time.
Here, as on a real server, a power change lands ``power_delay_s`` after the request (on an
injectable clock, so tests advance virtual time instead of sleeping), a ``once`` boot override is
consumed by the next boot, BIOS attributes apply at the next boot, and faults can be injected:
unreachable, auth failure, slowness and refusals. Every call is counted (``calls``) and every
request that would have reached hardware is recorded (``requests``), so tests can prove
idempotence and the absence of retry storms.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from lifecycle.drivers.bmc.base import (
    BiosApplyTime,
    BiosInterface,
    BiosStaged,
    BmcDriver,
    BootDevice,
    BootMode,
    Cpu,
    Drive,
    DriveErase,
    EraseInterface,
    Firmware,
    FirmwareInterface,
    Gpu,
    HardwareInventory,
    Health,
    LogEntry,
    NicInfo,
    PowerAction,
    PowerState,
    ProgressCallback,
    SensorReading,
    SystemInfo,
    TaskProgress,
    UpdateMethod,
    VirtualMediaInterface,
)
from lifecycle.drivers.errors import (
    AuthFailed,
    DriverError,
    NotSupported,
    OperationFailed,
    Unreachable,
)

Fault = Literal["unreachable", "auth", "slow", "refuse"]


class ManualClock:
    """Virtual time: ``clock()`` reads it, ``sleep(s)`` and ``advance(s)`` move it."""

    def __init__(self, start: float = 1_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds

    sleep = advance


def default_inventory(serial: str = "FAKE0001") -> HardwareInventory:
    """An 8-GPU H100 server, as a Redfish inventory of one would read."""
    return HardwareInventory(
        system=SystemInfo("Supermicro", "SYS-821GE-TNHR", serial,
                          "4c4c4544-0000-1000-8000-000000000001", "2.1.V1"),
        cpus=[Cpu("Intel(R) Xeon(R) Platinum 8480+", 56, 112) for _ in range(2)],
        memory_gib=2048.0,
        gpus=[Gpu("NVIDIA H100 80GB HBM3", f"165232000{i:04d}", f"0000:{0x18 + i * 0x10:02x}:00.0")
              for i in range(8)],
        nics=[NicInfo("eno1", "3c:ec:ef:00:00:01", 25_000, True),
              NicInfo("ibp24s0", "a0:88:c2:00:00:01", 400_000, True)],
        drives=[Drive("nvme0", "SAMSUNG MZWLR3T8HBLS", "S6EWNA0000001", 3_840_755_982_336, "NVMe")],
        firmware=[Firmware("BMC", "1.50", True), Firmware("BIOS", "2.1.V1", True)],
    )


def default_sensors() -> list[SensorReading]:
    return [SensorReading("Inlet Temp", "temperature", 24.0, "°C", "OK"),
            SensorReading("GPU0 Temp", "temperature", 41.0, "°C", "OK"),
            SensorReading("FAN1", "fan", 7200.0, "RPM", "OK"),
            SensorReading("Sys Power", "power", 3200.0, "W", "OK")]


@dataclass
class _Injected:
    fault: Fault
    methods: frozenset[str] | None  # None: every method
    remaining: int | None  # None: until cleared
    seconds: float = 0.0


@dataclass
class FakeBmc(BmcDriver, FirmwareInterface, BiosInterface, VirtualMediaInterface, EraseInterface):
    """One fake system with every interface, as a Redfish BMC has. Power, boot, BIOS, firmware
    and logs are state; time comes from ``clock``.

    A firmware update installs ``next_versions[component]`` (the image's version, which a real
    BMC reads from the image): a component without one keeps its version, as a BMC that
    accepted an image and did not apply it does. ``fail_tasks`` ends every task in Exception.
    """

    hardware_type = "fake"

    target: str = "fake://bmc"
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    power_delay_s: float = 5.0
    powered: bool = False
    hardware: HardwareInventory = field(default_factory=default_inventory)
    readings: list[SensorReading] = field(default_factory=default_sensors)
    log: list[LogEntry] = field(default_factory=list)
    bios: dict[str, object] = field(
        default_factory=lambda: {"BootMode": "Uefi", "SriovGlobalEnable": "Enabled"})
    calls: Counter[str] = field(default_factory=Counter)
    requests: list[str] = field(default_factory=list)
    boots: list[BootDevice | None] = field(default_factory=list)  # device used by each boot
    boot: tuple[BootDevice, bool, BootMode] | None = None  # (device, once, mode)
    media: str | None = None
    bios_pending: dict[str, object] = field(default_factory=dict)
    bios_apply_times: tuple[BiosApplyTime, ...] = (BiosApplyTime.ON_RESET, BiosApplyTime.IMMEDIATE)
    methods: tuple[UpdateMethod, ...] = (UpdateMethod.PULL, UpdateMethod.PUSH)
    next_versions: dict[str, str] = field(default_factory=dict)
    fail_tasks: bool = False
    _pending: list[tuple[float, str]] = field(default_factory=list)
    _faults: list[_Injected] = field(default_factory=list)

    # -- fault injection
    def inject(self, fault: Fault, *, methods: set[str] | None = None, times: int | None = None,
               seconds: float = 30.0) -> None:
        """Make calls fail (or, for ``slow``, take ``seconds``) — all, or only ``methods``."""
        self._faults.append(_Injected(fault, frozenset(methods) if methods else None, times,
                                      seconds))

    def clear_faults(self) -> None:
        self._faults.clear()

    def _enter(self, method: str) -> None:
        self.calls[method] += 1
        for f in list(self._faults):
            if f.methods is not None and method not in f.methods:
                continue
            if f.remaining is not None:
                f.remaining -= 1
                if f.remaining <= 0:
                    self._faults.remove(f)
            error: DriverError
            if f.fault == "slow":
                self.sleep(f.seconds)
                continue
            if f.fault == "unreachable":
                error = Unreachable(self.target, f"{method}: connection timed out")
            elif f.fault == "auth":
                error = AuthFailed(self.target, f"{method}: 401 Unauthorized")
            else:
                error = OperationFailed(self.target, f"{method}: the BMC refused the request")
            raise error
        self._settle()

    # -- the hardware model
    def _settle(self) -> None:
        now = self.clock()
        while self._pending and self._pending[0][0] <= now:
            _, state = self._pending.pop(0)
            was_on, self.powered = self.powered, state != "off"
            if state == "reset" or (self.powered and not was_on):
                self._booted()

    def _booted(self) -> None:
        self.boots.append(self.boot[0] if self.boot else None)
        if self.boot and self.boot[1]:
            self.boot = None  # a one-time override is consumed by the boot that used it
        self.bios.update(self.bios_pending)
        self.bios_pending = {}

    def _schedule(self, *steps: tuple[int, str]) -> None:
        now = self.clock()
        self._pending = [(now + n * self.power_delay_s, s) for n, s in steps]

    def power_state(self) -> PowerState:
        self._enter("power_state")
        if self._pending:
            target = self._pending[-1][1]
            return PowerState.POWERING_OFF if target == "off" else PowerState.POWERING_ON
        return PowerState.ON if self.powered else PowerState.OFF

    def power(self, action: PowerAction) -> None:
        self._enter("power")
        heading = self._pending[-1][1] if self._pending else ("on" if self.powered else "off")
        wants_off = action in (PowerAction.OFF, PowerAction.GRACEFUL_OFF)
        if (wants_off and heading == "off") or (action is PowerAction.ON and heading != "off"):
            return  # already there, or already on the way
        self.requests.append(f"power:{action.value}")
        if action is PowerAction.ON or (not self.powered and not wants_off):
            self._schedule((1, "on"))
        elif wants_off:
            self._schedule((2 if action is PowerAction.GRACEFUL_OFF else 1, "off"))
        elif action is PowerAction.CYCLE:
            self._schedule((1, "off"), (2, "on"))
        else:
            self._schedule((1, "reset"))

    def set_boot(self, device: BootDevice, *, once: bool = True,
                 mode: BootMode = BootMode.UEFI) -> None:
        self._enter("set_boot")
        if self.boot == (device, once, mode):
            return
        self.requests.append(f"boot:{device.value}:{'once' if once else 'persistent'}")
        self.boot = (device, once, mode)

    def inventory(self) -> HardwareInventory:
        self._enter("inventory")
        return self.hardware

    def sensors(self) -> list[SensorReading]:
        self._enter("sensors")
        return list(self.readings)

    def health(self) -> Health:
        self._enter("health")
        bad = {r.name: r.health or "Unknown" for r in self.readings if r.health not in ("OK", None)}
        overall = "Critical" if "Critical" in bad.values() else "Warning" if bad else "OK"
        return Health(overall, bad)

    def event_log(self, since: datetime | None = None) -> list[LogEntry]:
        self._enter("event_log")
        return [e for e in self.log if since is None or e.created is None or e.created >= since]

    def clear_event_log(self) -> None:
        self._enter("clear_event_log")
        self.requests.append("sel:clear")
        self.log.clear()

    def add_event(self, message: str, severity: str = "Warning") -> LogEntry:
        entry = LogEntry(str(len(self.log) + 1), datetime.now(UTC), severity, message)
        self.log.append(entry)
        return entry

    def bios_attributes(self) -> dict[str, object]:
        self._enter("bios_attributes")
        return dict(self.bios)

    def bios_pending_attributes(self) -> dict[str, object]:
        self._enter("bios_pending")
        return dict(self.bios_pending)

    def set_bios_attributes(self, attributes: dict[str, object], *,
                            apply_time: BiosApplyTime | None = None) -> BiosStaged:
        self._enter("set_bios_attributes")
        unknown = sorted(set(attributes) - set(self.bios))
        if unknown:
            raise OperationFailed(self.target, f"unknown BIOS attributes: {', '.join(unknown)}")
        chosen = apply_time or self.bios_apply_times[0]
        if chosen not in self.bios_apply_times:
            raise NotSupported(self.target, f"apply time {chosen} is not offered")
        changes = {k: v for k, v in attributes.items()
                   if self.bios_pending.get(k, self.bios.get(k)) != v}
        if changes:
            self.requests.append("bios:set")
            if chosen is BiosApplyTime.IMMEDIATE:
                self.bios.update(changes)
            else:
                self.bios_pending.update(changes)
        return BiosStaged(changes, chosen)

    def virtual_media_insert(self, url: str) -> None:
        self._enter("virtual_media_insert")
        if self.media != url:
            self.requests.append("media:insert")
            self.media = url

    def virtual_media_eject(self) -> None:
        self._enter("virtual_media_eject")
        if self.media is not None:
            self.requests.append("media:eject")
            self.media = None

    def _task(self, name: str, progress: ProgressCallback | None) -> TaskProgress:
        for percent in (0, 50, 100):
            state = "Running" if percent < 100 else "Exception" if self.fail_tasks else "Completed"
            update = TaskProgress(name, state, percent)
            if progress is not None:
                progress(update)
            if percent < 100:
                self.sleep(self.power_delay_s)
        if self.fail_tasks:
            raise OperationFailed(self.target, f"task {name} ended Exception")
        return update

    def firmware_inventory(self) -> list[Firmware]:
        self._enter("firmware_inventory")
        return list(self.hardware.firmware)

    def update_methods(self) -> tuple[UpdateMethod, ...]:
        self._enter("update_methods")
        return self.methods

    def _install(self, targets: list[str] | None) -> None:
        installed = [replace(f, version=self.next_versions.get(f.name, f.version))
                     if not targets or f.id in targets or f.name in targets else f
                     for f in self.hardware.firmware]
        self.hardware = replace(self.hardware, firmware=installed)

    def firmware_update(self, image_url: str, targets: list[str] | None = None,
                        progress: ProgressCallback | None = None) -> TaskProgress:
        self._enter("firmware_update")
        if UpdateMethod.PULL not in self.methods:
            raise NotSupported(self.target, "no SimpleUpdate")
        if not image_url.startswith(("http://", "https://")):
            raise OperationFailed(self.target, "image URL must be http:// or https://")
        self.requests.append("firmware:update")
        done = self._task("fw-1", progress)
        self._install(targets)
        return done

    def firmware_push(self, image: Path, targets: list[str] | None = None,
                      progress: ProgressCallback | None = None) -> TaskProgress:
        self._enter("firmware_push")
        if UpdateMethod.PUSH not in self.methods:
            raise NotSupported(self.target, "no MultipartHttpPushUri")
        if not image.is_file():
            raise OperationFailed(self.target, f"cannot read {image}")
        self.requests.append("firmware:push")
        done = self._task("fw-1", progress)
        self._install(targets)
        return done

    erase_method = "fake erase"
    erase_verifier = "FakeBmc: the task's end state (nothing is read back)"

    def drives(self) -> list[Drive]:
        self._enter("drives")
        return list(self.hardware.drives)

    def erase_drive(self, drive_id: str, progress: ProgressCallback | None = None) -> DriveErase:
        self._enter("secure_erase")
        drive = next((d for d in self.hardware.drives if d.id == drive_id), None)
        if drive is None:
            raise NotSupported(self.target, f"no drive {drive_id!r}")
        self.requests.append(f"erase:{drive_id}")
        at = f"{self.clock():.3f}"
        try:
            done = self._task(f"erase-{drive_id}", progress)
        except OperationFailed as exc:
            return DriveErase(drive, self.erase_method, at, f"{self.clock():.3f}", f"erase-{drive_id}", "Exception",
                              verification="the task failed", problems=(exc.message,))
        return DriveErase(drive, self.erase_method, at, f"{self.clock():.3f}", done.task_id, done.state,
                          verified=True, verification="task Completed")

"""The BMC interfaces, one per concern, that implementations (Redfish, IPMI, fake) compose.

As in ironic, a *hardware type* is a list of per-concern interfaces: power,
boot, inventory, firmware, BIOS, virtual media, erase. ``BmcDriver`` has the
three every BMC offers; a driver class adds the others by inheriting their
interface, so whether a node can take a firmware or BIOS step is known before
the step is planned (``capabilities``, ``require``; ``factory.supports`` for an
inventory node), instead of discovered as ``NotSupported`` half-way through a
rollout. IPMI has power, boot and a limited inventory only.

Results are frozen dataclasses, never raw JSON, so workflows do not depend on
a vendor's tree. Errors are those of ``lifecycle.drivers.errors``.
"""

from __future__ import annotations

import abc
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import TypeVar, cast

from lifecycle.drivers.errors import AuthFailed, NotSupported
from lifecycle.model.redact import register


class PowerState(StrEnum):
    ON = "on"
    OFF = "off"
    POWERING_ON = "powering_on"
    POWERING_OFF = "powering_off"
    UNKNOWN = "unknown"


class PowerAction(StrEnum):
    ON = "on"
    OFF = "off"  # hard off
    GRACEFUL_OFF = "graceful_off"
    CYCLE = "cycle"  # off then on; on a node that is off, just on
    RESET = "reset"  # warm reset


class BootDevice(StrEnum):
    PXE = "pxe"
    HTTP = "http"
    DISK = "disk"
    CD = "cd"


class BootMode(StrEnum):
    UEFI = "uefi"
    LEGACY = "legacy"


@dataclass(frozen=True)
class SystemInfo:
    vendor: str
    model: str
    serial: str
    uuid: str
    bios_version: str


@dataclass(frozen=True)
class Cpu:
    model: str
    cores: int | None
    threads: int | None


@dataclass(frozen=True)
class Gpu:
    model: str
    serial: str | None
    pcie_slot: str | None


@dataclass(frozen=True)
class NicInfo:
    name: str
    mac: str  # lower-case, colon-separated
    speed_mbps: int | None
    link_up: bool | None


@dataclass(frozen=True)
class Drive:
    id: str
    model: str
    serial: str | None
    capacity_bytes: int | None
    protocol: str | None


@dataclass(frozen=True)
class Firmware:
    name: str
    version: str
    updateable: bool | None = None
    # The BMC's handle for the component (Redfish: the member's @odata.id, an update's Target);
    # not part of what a version comparison compares.
    id: str | None = field(default=None, compare=False)


@dataclass(frozen=True)
class HardwareInventory:
    system: SystemInfo
    cpus: list[Cpu]
    memory_gib: float
    gpus: list[Gpu]
    nics: list[NicInfo]
    drives: list[Drive]
    firmware: list[Firmware]


@dataclass(frozen=True)
class SensorReading:
    name: str
    kind: str  # temperature | fan | voltage | power | other
    value: float | None
    unit: str
    health: str | None  # OK | Warning | Critical | None


@dataclass(frozen=True)
class Health:
    overall: str  # OK | Warning | Critical | Unknown
    details: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class LogEntry:
    id: str
    created: datetime | None
    severity: str | None
    message: str


@dataclass(frozen=True)
class TaskProgress:
    task_id: str
    state: str
    percent: int | None
    messages: tuple[str, ...] = ()


ProgressCallback = Callable[[TaskProgress], None]


@dataclass(frozen=True)
class Credentials:
    """A BMC user and password. ``repr`` never shows the password."""

    username: str
    password: str = field(repr=False)

    def __post_init__(self) -> None:
        # Loaded means in use: from now on the redaction filter masks it everywhere.
        register(self.password, username=self.username)

    def __str__(self) -> str:
        return f"Credentials(username={self.username!r}, password=***)"


def resolve_credentials(ref: str, target: str) -> Credentials:
    """Resolve an inventory credentials reference (``env:VAR`` or ``file:/path``).

    ``env:VAR`` reads ``VAR`` as ``user:password`` (or ``VAR_USER`` and
    ``VAR_PASSWORD``); ``file:/path`` reads one line ``user:password``.
    """
    kind, _, where = ref.partition(":")
    raw: str | None
    if kind == "env":
        raw = os.environ.get(where)
        if raw is None and f"{where}_USER" in os.environ and f"{where}_PASSWORD" in os.environ:
            raw = f"{os.environ[f'{where}_USER']}:{os.environ[f'{where}_PASSWORD']}"
    elif kind == "file":
        try:
            raw = Path(where).read_text(encoding="utf-8").strip()
        except OSError:
            raw = None
    else:
        raw = None
    if not raw or ":" not in raw:
        raise AuthFailed(target, f"credentials reference '{ref}' does not resolve to 'user:password'")
    user, _, password = raw.partition(":")
    return Credentials(user, password)


class Capability(StrEnum):
    """What a BMC can be asked to do, one per interface (ironic's interface kinds)."""

    POWER = "power"
    BOOT = "boot"
    INVENTORY = "inventory"  # hardware inventory, sensors, health, the event log
    FIRMWARE = "firmware"
    BIOS = "bios"
    VIRTUAL_MEDIA = "virtual_media"
    ERASE = "erase"


class BiosApplyTime(StrEnum):
    """When staged BIOS settings take effect (Redfish ``@Redfish.SettingsApplyTime``)."""

    IMMEDIATE = "Immediate"
    ON_RESET = "OnReset"


class UpdateMethod(StrEnum):
    """How an image reaches the BMC: it fetches a URL (SimpleUpdate) or we push it."""

    PULL = "pull"  # UpdateService.SimpleUpdate with an ImageURI the BMC downloads
    PUSH = "push"  # a multipart POST to UpdateService.MultipartHttpPushUri


@dataclass(frozen=True)
class BiosStaged:
    """What ``set_bios_attributes`` did: the attributes it staged and when they apply."""

    changed: dict[str, object]
    apply_time: BiosApplyTime


class _Interface(abc.ABC):
    target: str  # address (and system) for messages; never includes credentials


class PowerInterface(_Interface):
    @abc.abstractmethod
    def power_state(self) -> PowerState: ...

    @abc.abstractmethod
    def power(self, action: PowerAction) -> None:
        """Idempotent: asking for the state the system is already in returns without a call."""


class BootInterface(_Interface):
    @abc.abstractmethod
    def set_boot(self, device: BootDevice, *, once: bool = True,
                 mode: BootMode = BootMode.UEFI) -> None: ...


class InventoryInterface(_Interface):
    """Hardware inventory, sensors, health and the event log: what a BMC reports."""

    @abc.abstractmethod
    def inventory(self) -> HardwareInventory: ...

    def inspect(self) -> HardwareInventory:
        """What inspection compares with the inventory file: system identity, CPUs, memory,
        NICs and GPUs. ``drives`` and ``firmware`` may be left empty where reading them
        costs extra requests. Default: the full inventory."""
        return self.inventory()

    @abc.abstractmethod
    def sensors(self) -> list[SensorReading]: ...

    @abc.abstractmethod
    def health(self) -> Health: ...

    @abc.abstractmethod
    def event_log(self, since: datetime | None = None) -> list[LogEntry]: ...

    @abc.abstractmethod
    def clear_event_log(self) -> None: ...


class FirmwareInterface(_Interface):
    @abc.abstractmethod
    def firmware_inventory(self) -> list[Firmware]:
        """Every component the BMC reports (Redfish ``UpdateService/FirmwareInventory``)."""

    @abc.abstractmethod
    def update_methods(self) -> tuple[UpdateMethod, ...]:
        """The ways this BMC takes an image, preferred first; empty when it takes none."""

    @abc.abstractmethod
    def firmware_update(self, image_url: str, targets: list[str] | None = None,
                        progress: ProgressCallback | None = None) -> TaskProgress:
        """SimpleUpdate from ``image_url``; follow its task to the end; return the last state."""

    @abc.abstractmethod
    def firmware_push(self, image: Path, targets: list[str] | None = None,
                      progress: ProgressCallback | None = None) -> TaskProgress:
        """Push ``image`` (multipart HTTP push); follow its task to the end."""


class BiosInterface(_Interface):
    @abc.abstractmethod
    def bios_attributes(self) -> dict[str, object]: ...

    @abc.abstractmethod
    def bios_pending_attributes(self) -> dict[str, object]:
        """Attributes staged with a value not yet applied (empty when nothing is pending)."""

    @abc.abstractmethod
    def set_bios_attributes(self, attributes: dict[str, object], *,
                            apply_time: BiosApplyTime | None = None) -> BiosStaged:
        """Stage attributes (Redfish Bios/Settings) to apply at ``apply_time`` (None: the
        BMC's default, OnReset where it says nothing). Attributes already so are left out."""


class VirtualMediaInterface(_Interface):
    @abc.abstractmethod
    def virtual_media_insert(self, url: str) -> None: ...

    @abc.abstractmethod
    def virtual_media_eject(self) -> None: ...


@dataclass(frozen=True)
class DriveErase:
    """One drive's erase: what was asked, what the BMC's task said, and what was read back after it."""

    drive: Drive
    method: str
    """How it was erased, in the BMC's words (``Drive.SecureErase``)."""
    started_at: str
    ended_at: str
    task_id: str
    task_state: str
    task_messages: tuple[str, ...] = ()
    verified: bool = False
    verification: str = ""
    """What was read back and what it said (an erase certificate quotes it)."""
    problems: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.task_state == "Completed" and self.verified and not self.problems


class EraseInterface(_Interface):
    """Secure erase of the system's drives: each erase followed to its end, then read back.

    ``erase_drive`` never raises for an erase that failed or could not be verified (that is in
    its ``DriveErase``, with the words of the read-back, for a certificate); only for a drive that
    cannot be erased at all or a BMC that cannot be reached. ``secure_erase`` is the short form
    that raises ``OperationFailed`` unless the erase was verified.
    """

    erase_method: str = ""
    erase_verifier: str = ""
    """Who verifies and what is read (an erase certificate's ``verifier``)."""

    @abc.abstractmethod
    def drives(self) -> list[Drive]:
        """Every drive the BMC reports for the system (some may not be erasable: erase_drive says so)."""

    @abc.abstractmethod
    def erase_drive(self, drive_id: str, progress: ProgressCallback | None = None) -> DriveErase:
        """Erase one drive, follow the task to the end, read the drive back; the result says how it went."""

    def secure_erase(self, drive_id: str,
                     progress: ProgressCallback | None = None) -> TaskProgress:
        """Erase, follow the task to the end, then read the drive back to verify (raises unless verified)."""
        from lifecycle.drivers.errors import OperationFailed

        done = self.erase_drive(drive_id, progress)
        if not done.ok:
            raise OperationFailed(self.target, f"drive {drive_id}: " + "; ".join(done.problems or (done.verification,)))
        return TaskProgress(done.task_id, done.task_state, 100, done.task_messages)


# Each capability is one interface; a hardware type is the set it inherits.
INTERFACES: dict[Capability, type[_Interface]] = {
    Capability.POWER: PowerInterface,
    Capability.BOOT: BootInterface,
    Capability.INVENTORY: InventoryInterface,
    Capability.FIRMWARE: FirmwareInterface,
    Capability.BIOS: BiosInterface,
    Capability.VIRTUAL_MEDIA: VirtualMediaInterface,
    Capability.ERASE: EraseInterface,
}


class BmcDriver(PowerInterface, BootInterface, InventoryInterface):
    """One BMC, one system: a hardware type, composed of per-concern interfaces.

    Every BMC racklife drives has power, boot and inventory; firmware, BIOS, virtual media
    and erase are interfaces a hardware type adds by inheriting them (Redfish does, IPMI
    does not). Ask ``capabilities`` (or ``factory.supports`` for an inventory node, without
    touching the BMC) before planning a step. Implementations translate vendor errors into
    DriverError.
    """

    hardware_type: str = "unknown"

    def validate(self) -> None:
        """Check required settings without touching the BMC (Ironic's validate())."""

    @property
    def capabilities(self) -> frozenset[Capability]:
        return capabilities_of(type(self))

    def close(self) -> None:
        """Log out and release connections."""


def capabilities_of(cls: type[object]) -> frozenset[Capability]:
    """The capabilities a driver class implements (the interfaces it inherits)."""
    return frozenset(c for c, iface in INTERFACES.items() if issubclass(cls, iface))


Iface = TypeVar("Iface", bound=_Interface)

_STEP_WORDS: dict[Capability, str] = {
    Capability.POWER: "power control", Capability.BOOT: "setting the boot device",
    Capability.INVENTORY: "reading the inventory", Capability.FIRMWARE: "a firmware update",
    Capability.BIOS: "a BIOS change", Capability.VIRTUAL_MEDIA: "virtual media",
    Capability.ERASE: "a secure erase",
}


def not_supported_message(hardware_type: str, capability: Capability,
                          has: frozenset[Capability]) -> str:
    """One wording for "this BMC cannot", used by the driver check and the planning check."""
    offered = ", ".join(sorted(c.value for c in has)) or "nothing"
    return (f"{_STEP_WORDS[capability]} needs a BMC with the {capability.value} interface; "
            f"the {hardware_type} driver offers {offered} (use Redfish for this node)")


def require(driver: BmcDriver, interface: Callable[..., Iface]) -> Iface:
    """``driver`` as ``interface``, or ``NotSupported`` saying which driver lacks what.

    ``interface`` is one of the interface classes (typed as a callable only because mypy
    refuses abstract classes where a ``type[...]`` is expected)."""
    if isinstance(driver, interface):  # type: ignore[arg-type]
        return cast(Iface, driver)
    capability = next(c for c, i in INTERFACES.items() if i is interface)
    raise NotSupported(driver.target, not_supported_message(
        driver.hardware_type, capability, driver.capabilities))

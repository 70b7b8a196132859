"""The BMC interface every implementation (Redfish, IPMI, fake) provides.

Like an Ironic hardware type, the interface is small and typed; each method
maps to one lifecycle need. Results are frozen dataclasses, never raw JSON,
so workflows do not depend on a vendor's tree. Errors are those of
``lifecycle.drivers.errors``.
"""

from __future__ import annotations

import abc
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from pathlib import Path

from lifecycle.drivers.errors import AuthFailed
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


class BmcDriver(abc.ABC):
    """One BMC, one system. Implementations translate vendor errors into DriverError."""

    target: str  # address (and system) for messages; never includes credentials

    def validate(self) -> None:  # noqa: B027 - optional cheap check, no I/O by default
        """Check required settings without touching the BMC (Ironic's validate())."""

    @abc.abstractmethod
    def power_state(self) -> PowerState: ...

    @abc.abstractmethod
    def power(self, action: PowerAction) -> None:
        """Idempotent: asking for the state the system is already in returns without a call."""

    @abc.abstractmethod
    def set_boot(self, device: BootDevice, *, once: bool = True,
                 mode: BootMode = BootMode.UEFI) -> None: ...

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

    @abc.abstractmethod
    def bios_attributes(self) -> dict[str, object]: ...

    @abc.abstractmethod
    def set_bios_attributes(self, attributes: dict[str, object]) -> None:
        """Stage attributes; they apply at the next reboot (Redfish Bios/Settings)."""

    @abc.abstractmethod
    def virtual_media_insert(self, url: str) -> None: ...

    @abc.abstractmethod
    def virtual_media_eject(self) -> None: ...

    @abc.abstractmethod
    def firmware_update(self, image_url: str, targets: list[str] | None = None,
                        progress: ProgressCallback | None = None) -> TaskProgress:
        """Start the update and follow its task to the end; return the final task state."""

    @abc.abstractmethod
    def secure_erase(self, drive_id: str,
                     progress: ProgressCallback | None = None) -> TaskProgress:
        """Erase, follow the task to the end, then read the drive back to verify."""

    def close(self) -> None:  # noqa: B027 - drivers without sessions need nothing
        """Log out and release connections."""

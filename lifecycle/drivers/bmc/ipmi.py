"""The IPMI implementation of ``BmcDriver``, over RMCP+ (IPMI 2.0 LAN) with pyghmi.

Why it exists: older or cheaper BMCs, and some BMCs with Redfish switched off, still answer only
IPMI. IPMI covers power, the boot device, sensors, the SEL and FRU inventory: the hardware type
is ``BmcDriver``'s power, boot and inventory interfaces and nothing more, so a workflow sees
before it plans a step that firmware, BIOS, virtual media and erase need Redfish
(``base.require``, ``factory.supports``). HTTP boot, which IPMI boot flags cannot name, raises
``NotSupported``.

pyghmi has its own retransmit loop (about six seconds before it gives up on a silent peer); that
is the only retry inside the driver: a step that gets ``Unreachable`` may be retried by the
workflow step layer, never here. pyghmi errors are translated here into
``lifecycle.drivers.errors``: no answer is ``Unreachable`` (temporary), a refused user or password
is ``AuthFailed``, a completion code is looked up in ``COMPLETION_CODES``: the "not now" codes
(node busy, timeout, out of space for the moment) are ``Busy`` (temporary), the rest
``OperationFailed`` (permanent) with their meaning. Each failure is also told to the driver's
observer with its class (``call_errors``: no answer is a timeout, an OS error a connection failure).
"""

# ruff: noqa: E402  # pyghmi is imported below, after pyghmi_import.load()
from __future__ import annotations

import contextlib
import select
import threading
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any, TypeVar

from lifecycle.drivers.bmc import pyghmi_import

# Before pyghmi's own imports: its plugin loader moves sys.path under other threads' imports (pyghmi_import).
pyghmi_import.load()

from pyghmi import exceptions as pyghmi_exc
from pyghmi.ipmi import command as pyghmi_command
from pyghmi.ipmi import fru as pyghmi_fru
from pyghmi.ipmi.private import constants as pyghmi_constants
from pyghmi.ipmi.private import session as pyghmi_session
from pyghmi.ipmi.private import util as pyghmi_util

from lifecycle.drivers.bmc.base import (
    BmcDriver,
    BootDevice,
    BootMode,
    Credentials,
    Firmware,
    HardwareInventory,
    Health,
    LogEntry,
    PowerAction,
    PowerState,
    SensorReading,
    SystemInfo,
)
from lifecycle.drivers.bmc.call_errors import CallErrorClass, CallFailure, CallObserver
from lifecycle.drivers.errors import (
    AuthFailed,
    Busy,
    DriverError,
    NotSupported,
    OperationFailed,
    Unreachable,
)

T = TypeVar("T")

# IPMI 2.0 completion codes (table 5-2) racklife tells apart; the "not now" ones are Busy (temporary),
# any code not listed is OperationFailed (permanent).
COMPLETION_CODES: dict[int, tuple[type[DriverError], str]] = {
    0xC0: (Busy, "node busy"),
    0xC3: (Busy, "timeout while processing the command"),
    0xC4: (Busy, "out of space"),
    0xCE: (Busy, "command response could not be provided"),
    0xD0: (Busy, "SDR repository in update mode"),
    0xD1: (Busy, "device in firmware update mode"),
    0xD2: (Busy, "BMC initialization in progress"),
    0xC1: (NotSupported, "the BMC does not know this command"),
    0xD5: (OperationFailed, "not supported in the present state"),
}
# pyghmi often raises only the text of a completion code (``IpmiException("Node Busy")``): the
# code comes back from pyghmi's own table of those texts.
_CODE_OF_TEXT = {text.lower(): code for code, text in pyghmi_constants.ipmi_completion_codes.items()
                 if code not in (0x00, 0xFFFF)}


def _sendto_keeping_nonblocking(sock: Any, packet: bytes, sockaddr: Any) -> None:
    """Replacement for pyghmi's ``_io_sendto``, which makes the socket blocking before each send.

    pyghmi sends from whichever thread issues a command and receives in its own I/O thread,
    which makes the socket non-blocking just before each receive. A send between those two
    steps leaves the receive blocking forever, and every IPMI session of the process hangs
    (seen with concurrent drivers). A UDP send seldom blocks: wait until writable instead.
    """
    sock = getattr(sock, "fd", sock)  # pyghmi's eventlet convention
    try:
        sock.sendto(packet, sockaddr)
    except BlockingIOError:
        select.select([], [sock], [], 1.0)
        with contextlib.suppress(OSError):
            sock.sendto(packet, sockaddr)
    except OSError:
        pass  # as pyghmi does: a lost datagram is retransmitted by the session


pyghmi_session._io_sendto = _sendto_keeping_nonblocking

# Chassis Control directives (IPMI 2.0, 28.3).
_CHASSIS_CONTROL = {
    PowerAction.OFF: 0x00,
    PowerAction.ON: 0x01,
    PowerAction.CYCLE: 0x02,
    PowerAction.RESET: 0x03,
    PowerAction.GRACEFUL_OFF: 0x05,
}
# Boot device selector of boot flags data 2, bits 5:2 (IPMI 2.0, table 28-14). HTTP has none.
_BOOT_SELECTOR = {BootDevice.PXE: 0x1, BootDevice.DISK: 0x2, BootDevice.CD: 0x5}
# pyghmi's Health bit field -> our words; the worst bit wins.
_HEALTH_WORDS = ((4, "Critical"), (2, "Critical"), (1, "Warning"))
_SENSOR_KINDS = {"Temperature": "temperature", "Fan": "fan", "Voltage": "voltage",
                 "Power": "power", "Current": "power"}
# Login failures that mean "these credentials are refused", as pyghmi words them.
_AUTH_WORDS = ("password", "unauthorized", "rakp", "privilege", "invalid role")
# Completion codes that mean "ask for less" on Read FRU Data (ipmi_sim answers C8h above ~32 B).
_FRU_TOO_BIG = (0xC7, 0xC8, 0xC9, 0xCA)
_FRU_CHUNK = 224  # pyghmi's choice: most BMCs accept it
DEFAULT_PORT = 623
# The class of each error this driver raises (an OSError is a connection failure: see _failed's callers).
_CLASS_OF: dict[type[DriverError], CallErrorClass] = {
    AuthFailed: CallErrorClass.AUTH,
    Unreachable: CallErrorClass.TIMEOUT,  # RMCP+ is UDP: "no answer" is the retransmits running out
    Busy: CallErrorClass.THROTTLED,
    NotSupported: CallErrorClass.IPMI_COMPLETION,
    OperationFailed: CallErrorClass.IPMI_COMPLETION,
}


def parse_address(address: str) -> tuple[str, int]:
    """``host``, ``host:port``, ``[v6]:port`` or ``ipmi://host[:port]`` -> (host, port)."""
    rest = address.split("://", 1)[1] if "://" in address else address
    rest = rest.split("/", 1)[0]
    if rest.startswith("["):
        host, _, tail = rest[1:].partition("]")
        port = tail.lstrip(":")
    elif rest.count(":") == 1:
        host, _, port = rest.partition(":")
    else:
        host, port = rest, ""
    if not host or (port and not (port.isdigit() and 0 < int(port) < 65536)):
        raise ValueError(f"not an IPMI address (host[:port]): {address!r}")
    return host, int(port) if port else DEFAULT_PORT


class _Login:
    """One logged-in pyghmi session (its ``Command``), shared by the drivers of this process to one BMC and user."""

    def __init__(self, cmd: Any) -> None:
        self.cmd = cmd
        self.lock = threading.Lock()  # one command at a time on the session
        self.users = 0


class _Logins:
    """One pyghmi session per BMC, port and login in this process, shared by every :class:`IpmiDriver` to it.

    pyghmi gives a second session to a BMC it already has one with its own socket, which pyghmi's I/O
    thread starts listening to only when its ``select()`` next wakes: up to 300 s in a process with no
    other IPMI traffic. The second driver's login waited that long (a refresh reading a node while a
    workflow held a driver to it, in one ``racklife serve``). And where pyghmi did hand two drivers one
    session, one driver's close logged the other out. So drivers share the session, counted: the last
    to close logs out; one that finds the session broken forgets it, and the next driver logs in anew.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._key_locks: dict[tuple[object, ...], threading.Lock] = {}
        self._current: dict[tuple[object, ...], _Login] = {}

    def _key_lock(self, key: tuple[object, ...]) -> threading.Lock:
        with self._lock:
            return self._key_locks.setdefault(key, threading.Lock())

    def acquire(self, key: tuple[object, ...], login: Callable[[], Any]) -> _Login:
        """The live session for ``key``, logging in with ``login()`` (which may raise) if there is none."""
        with self._key_lock(key):  # a login per BMC at a time; other BMCs' logins go on meanwhile
            current = self._current.get(key)
            if current is None or getattr(current.cmd.ipmi_session, "broken", False):
                current = _Login(login())
                self._current[key] = current
            current.users += 1
            return current

    def release(self, key: tuple[object, ...], held: _Login, broken: bool = False) -> bool:
        """A driver is done with ``held``; True when it was the last user (the caller logs it out)."""
        with self._key_lock(key):
            held.users -= 1
            if (broken or held.users <= 0) and self._current.get(key) is held:
                del self._current[key]
            return held.users <= 0


_LOGINS = _Logins()


class IpmiDriver(BmcDriver):
    """One BMC over IPMI 2.0 LAN (RMCP+). The session opens on first use."""

    hardware_type = "ipmi"

    def __init__(self, address: str, credentials: Credentials, *,
                 command_factory: Callable[..., Any] = pyghmi_command.Command,
                 observer: CallObserver | None = None) -> None:
        self.host, self.port = parse_address(address)
        self._observer = observer
        self.target = f"ipmi://{self.host}:{self.port}"
        self._credentials = credentials
        self._factory = command_factory
        self._login: _Login | None = None
        self._lock = threading.Lock()  # this driver's own state (its login); the session's lock serializes commands
        self._fru_chunk = _FRU_CHUNK  # shrinks to what the BMC accepts, once

    def validate(self) -> None:
        if not self._credentials.username:
            raise AuthFailed(self.target, "no IPMI user name given")

    # -- session and error translation, in one place
    @property
    def _cmd(self) -> Any:
        """The pyghmi ``Command`` this driver uses (None before its first call)."""
        return self._login.cmd if self._login is not None else None

    def _key(self) -> tuple[object, ...]:
        return (self.host, self.port, self._credentials.username, self._credentials.password)

    def _session(self) -> Any:
        if self._login is None:
            self._login = _LOGINS.acquire(self._key(), self._log_in)
        return self._login.cmd

    def _log_in(self) -> Any:
        user, password = self._credentials.username, self._credentials.password
        # pyghmi keeps a failed login in its table of logins in progress (its key there is
        # not the one it deletes), and hands that dead session to the next caller; drop it.
        key = (self.host, user, password, self.port, None)
        stale = pyghmi_session.Session.initting_sessions.get(key)
        if stale is not None and getattr(stale, "broken", False):
            del pyghmi_session.Session.initting_sessions[key]
        try:
            return self._factory(bmc=self.host, userid=user, password=password, port=self.port)
        except pyghmi_exc.IpmiException as exc:
            raise self._failed(self._login_error(exc)) from None
        except AttributeError:
            # pyghmi race: another thread marked the session broken and this one saw it
            # before the error message was stored. The session is still in that table.
            raise self._failed(self._login_error(pyghmi_exc.IpmiException(self._late_error(key)))) from None
        except OSError as exc:  # name resolution, no route
            raise self._failed(Unreachable(self.target, f"cannot reach the BMC: {exc.strerror or exc}"),
                               CallErrorClass.CONNECTION) from None

    @staticmethod
    def _late_error(key: tuple[object, ...]) -> str:
        session = pyghmi_session.Session.initting_sessions.pop(key, None)
        for _ in range(50):  # the other thread stores it microseconds later
            if getattr(session, "errormsg", None) is not None:
                return str(session.errormsg)
            time.sleep(0.01)
        return ""

    def _login_error(self, exc: pyghmi_exc.IpmiException) -> DriverError:
        text = str(exc.args[0]) if exc.args and exc.args[0] else ""
        if any(word in text.lower() for word in _AUTH_WORDS):
            return AuthFailed(self.target, f"the BMC refused the user or password ({text})")
        return Unreachable(self.target, "no answer to IPMI session setup "
                                        f"({text or 'timed out'})")

    def _call(self, what: str, fn: Callable[[Any], T]) -> T:
        with self._lock:
            cmd = self._session()
            assert self._login is not None
            try:
                with self._login.lock:
                    return fn(cmd)
            except pyghmi_exc.IpmiException as exc:
                error = self._failed(self._command_error(what, exc))
            except (pyghmi_exc.UnsupportedFunctionality, NotImplementedError) as exc:
                error = self._failed(NotSupported(self.target, f"{what}: {exc or 'not supported by this BMC'}"))
            except OSError as exc:
                error = self._failed(Unreachable(self.target, f"{what}: {exc.strerror or exc}"),
                                     CallErrorClass.CONNECTION)
            if isinstance(error, Unreachable):
                self._drop(broken=True)  # the session is broken: log in afresh next time
            raise error

    def _failed(self, error: DriverError, kind: CallErrorClass | None = None) -> DriverError:
        """``error``, after telling the observer its class (the caller raises it)."""
        if self._observer is not None:
            self._observer.failed(CallFailure(kind or _CLASS_OF.get(type(error), CallErrorClass.IPMI_COMPLETION),
                                              "ipmi", None, error.message))
        return error

    def _command_error(self, what: str, exc: pyghmi_exc.IpmiException) -> DriverError:
        text = str(exc.args[0]) if exc.args and exc.args[0] else ""
        code = getattr(exc, "ipmicode", 0) or _CODE_OF_TEXT.get(text.lower(), 0)
        if code == 0xFFFF or text in ("timeout", "") or "session" in text.lower():
            return Unreachable(self.target, f"{what}: the BMC stopped answering")
        suffix = f" (completion code {code:02X}h)" if code else ""
        kind, meaning = COMPLETION_CODES.get(code, (OperationFailed, ""))
        if kind is NotSupported:
            return NotSupported(self.target, f"{what}: {meaning} ({code:02X}h)")
        return kind(self.target, f"{what}: {text or meaning}{suffix}")

    def _raw(self, cmd: Any, netfn: int, command: int, data: tuple[int, ...] = ()) -> bytes:
        rsp = cmd.raw_command(netfn=netfn, command=command, data=data)
        if "error" in rsp:
            raise pyghmi_exc.IpmiException(rsp["error"], rsp.get("code", 0))
        return bytes(rsp["data"])

    def _drop(self, broken: bool = False) -> None:
        held, self._login = self._login, None
        if held is not None and _LOGINS.release(self._key(), held, broken):
            # the last driver on the session; a broken session may fail to log out: nothing is left then
            with contextlib.suppress(Exception):
                held.cmd.ipmi_session.logout()

    def close(self) -> None:
        with self._lock:
            self._drop()

    # -- power
    def power_state(self) -> PowerState:
        state = self._call("power status", lambda c: c.get_power()["powerstate"])
        return PowerState.ON if state == "on" else PowerState.OFF

    def power(self, action: PowerAction) -> None:
        current = self.power_state()
        if current is PowerState.ON and action is PowerAction.ON:
            return
        if current is PowerState.OFF and action in (PowerAction.OFF, PowerAction.GRACEFUL_OFF):
            return
        if current is PowerState.OFF and action in (PowerAction.CYCLE, PowerAction.RESET):
            action = PowerAction.ON  # nothing to restart: just power on
        directive = _CHASSIS_CONTROL[action]
        self._call(f"power {action.value}", lambda c: self._raw(c, 0x00, 0x02, (directive,)))

    # -- boot device
    def set_boot(self, device: BootDevice, *, once: bool = True,
                 mode: BootMode = BootMode.UEFI) -> None:
        if device not in _BOOT_SELECTOR:
            raise NotSupported(self.target, f"boot device {device.value}: IPMI boot flags have "
                                            "no HTTP boot selector; use Redfish (UefiHttp)")
        flags = 0x80 | (0x00 if once else 0x40) | (0x20 if mode is BootMode.UEFI else 0x00)
        data = (0x05, flags, _BOOT_SELECTOR[device] << 2, 0x00, 0x00, 0x00)

        def send(cmd: Any) -> None:
            self._raw(cmd, 0x00, 0x08, (0x03, 0x08))  # clear the valid bit only at our request
            self._raw(cmd, 0x00, 0x08, data)

        self._call(f"set boot device {device.value}", send)

    def boot_override(self) -> tuple[BootDevice | None, bool, BootMode]:
        """The pending override: (device or None, persistent, mode), from boot flags."""
        raw = self._call("get boot device", lambda c: self._raw(c, 0x00, 0x09, (0x05, 0, 0)))
        flags, selector = (raw[2], raw[3]) if len(raw) >= 4 else (0, 0)
        mode = BootMode.UEFI if flags & 0x20 else BootMode.LEGACY
        if not flags & 0x80:
            return None, False, mode
        device = next((d for d, s in _BOOT_SELECTOR.items() if s == (selector >> 2) & 0x0F), None)
        return device, bool(flags & 0x40), mode

    # -- inventory
    def _read_fru(self, cmd: Any) -> bytes:
        info = self._raw(cmd, 0x0A, 0x10, (0,))
        size = info[0] | info[1] << 8
        data, chunk = bytearray(), self._fru_chunk
        while len(data) < size:
            count = min(chunk, size - len(data))
            rsp = cmd.raw_command(netfn=0x0A, command=0x11,
                                  data=(0, len(data) & 0xFF, len(data) >> 8, count))
            if rsp.get("code") in _FRU_TOO_BIG and chunk > 8:
                chunk = self._fru_chunk = chunk // 2  # ask for less, as the BMC wants
                continue
            if "error" in rsp:
                raise pyghmi_exc.IpmiException(rsp["error"], rsp.get("code", 0))
            got = bytes(rsp["data"][1:1 + rsp["data"][0]])
            if not got:
                break
            data += got
        return bytes(data)

    def _system_firmware(self, cmd: Any) -> str:
        """Get System Info Parameters, parameter 1 (system firmware version); '' if absent."""
        rsp = cmd.raw_command(netfn=0x06, command=0x59, data=(0, 1, 0, 0))
        if "error" in rsp or len(rsp["data"]) < 4:
            return ""
        data = bytes(rsp["data"])
        return data[4:4 + data[3]].decode("ascii", "replace").strip("\x00 ")

    def _fru_inventory(self, cmd: Any) -> dict[str, Any]:
        found: dict[str, Any] = {}
        raw = self._read_fru(cmd)
        if raw:
            found.update(pyghmi_fru.FRU(rawdata=raw).info or {})
        device = self._raw(cmd, 0x06, 0x01)
        found["bmc_firmware"] = f"{device[2] & 0x7F}.{device[3]:02X}"
        guid = cmd.raw_command(netfn=0x06, command=0x37)
        if "error" not in guid and len(guid["data"]) == 16:
            found["uuid"] = pyghmi_util.decode_wireformat_uuid(guid["data"]).lower()
        found["bios_version"] = self._system_firmware(cmd)
        return found

    def inventory(self) -> HardwareInventory:
        """System identity from FRU 0, GUID and firmware versions.

        IPMI has no standard records for CPUs, memory, GPUs, NICs or drives: those lists are
        empty and ``memory_gib`` is 0 here. Use Redfish for the full inventory.
        """
        fru = self._call("read FRU inventory", self._fru_inventory)

        def text(*keys: str) -> str:
            return next((str(fru[k]) for k in keys if fru.get(k)), "")

        system = SystemInfo(
            vendor=text("Manufacturer", "Board manufacturer"),
            model=text("Product name", "Model", "Board product name"),
            serial=text("Serial Number", "Chassis serial number", "Board serial number"),
            uuid=text("uuid"),
            bios_version=text("bios_version"),
        )
        if system.vendor and self._observer is not None:
            self._observer.identified("ipmi", system.vendor)
        firmware = [Firmware("BMC", fru["bmc_firmware"])]
        if fru.get("bios_version"):
            firmware.append(Firmware("BIOS", fru["bios_version"]))
        return HardwareInventory(system=system, cpus=[], memory_gib=0.0, gpus=[], nics=[],
                                 drives=[], firmware=firmware)

    # -- sensors and health
    def sensors(self) -> list[SensorReading]:
        readings = self._call("read sensors", lambda c: list(c.get_sensor_data()))
        # pyghmi computes raw * M * 10**R in floating point: 12.080000000000002 V
        return [SensorReading(name=r.name, kind=_SENSOR_KINDS.get(r.type, "other"),
                              value=None if r.value is None else round(r.value, 6),
                              unit=r.units or "", health=_health_word(r.health))
                for r in readings]

    def health(self) -> Health:
        summary = self._call("read health", lambda c: c.get_health())
        details = {r.name: f"{_health_word(r.health)}: {', '.join(r.states)}".rstrip(": ")
                   for r in summary.get("badreadings", [])}
        return Health(overall=_health_word(summary.get("health", 0)), details=details)

    # -- SEL
    def event_log(self, since: datetime | None = None) -> list[LogEntry]:
        records = self._call("read SEL", lambda c: list(c.get_event_log()))
        entries = [_log_entry(r) for r in records]
        if since is not None:
            entries = [e for e in entries if e.created is None or e.created >= since]
        return entries

    def clear_event_log(self) -> None:
        def clear(cmd: Any) -> None:
            rsv = self._raw(cmd, 0x0A, 0x42)  # Reserve SEL
            self._raw(cmd, 0x0A, 0x47, (rsv[0], rsv[1], *b"CLR", 0xAA))

        self._call("clear SEL", clear)


def _health_word(bits: int) -> str:
    return next((word for bit, word in _HEALTH_WORDS if bits & bit), "OK")


def _log_entry(record: dict[str, Any]) -> LogEntry:
    created = None
    if record.get("timestamp"):
        # pyghmi gives local time without a zone; make it aware in the local zone.
        created = datetime.fromisoformat(record["timestamp"]).astimezone()
    parts = [str(p) for p in (record.get("component"), record.get("event"),
                              record.get("event_data")) if p]
    if record.get("deassertion"):
        parts.append("deasserted")
    message = ": ".join(parts[:2]) + (f" ({', '.join(parts[2:])})" if parts[2:] else "")
    if not message:
        oem = bytes(record.get("oemdata") or b"")
        message = f"OEM record {oem.hex()}" if oem else "unknown record"
    severity = _health_word(record["severity"]) if "severity" in record else None
    return LogEntry(id=str(record.get("record_id", "")), created=created, severity=severity,
                    message=message)


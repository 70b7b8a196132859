"""IPMI-over-LAN BMC emulator: many BMCs in one process, each on its own loopback UDP port.

Why it exists: the IPMI driver must be proven against the real protocol (RMCP+ over UDP, as
``ipmitool -I lanplus`` speaks it), and the lab needs BMCs that behave like hardware: power
changes land after a delay, a one-time boot override is consumed by the next boot, and sensors,
SEL and FRU read back like a real BMC's. pyghmi's ``Bmc`` class supplies the RMCP+ session
layer; this module adds what that server lacks or gets wrong:

- cipher negotiation: pyghmi's server always answers with cipher suite 3 (HMAC-SHA1), even to a
  client that proposed SHA-256, and both sides then fail their HMAC checks. We refuse every
  proposal but suite 3 (RMCP+ status 0x11), so clients fall back to SHA-1, as pyghmi's own does.
- an unknown user name gets RAKP2 status "unauthorized name" instead of silence, so a client
  sees an authentication failure rather than a timeout;
- chassis power with a delay, boot flags, SDR repository, sensor readings, SEL, FRU, system GUID
  and the system firmware version (Get System Info parameter 1).

Run ``python -m lifecycle.lab.ipmi_emulator --count N --base-port P --password-env VAR``.
"""

# ruff: noqa: E402  # pyghmi is imported below, after pyghmi_import.load()
from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import signal
import struct
import sys
import threading
import time
import traceback
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from lifecycle.drivers.bmc import pyghmi_import

# Before pyghmi's own imports: its plugin loader moves sys.path under other threads' imports (pyghmi_import).
pyghmi_import.load()

from pyghmi.ipmi import bmc as pyghmi_bmc
from pyghmi.ipmi.private import constants as pyghmi_constants
from pyghmi.ipmi.private import serversession
from pyghmi.ipmi.private import session as pyghmi_session

PowerHook = Callable[[str, str], None]
Clock = Callable[[], float]

# kind -> (IPMI sensor type, unit code, M, R exponent): value = raw * M * 10**R, raw 0..255.
SENSOR_KINDS: dict[str, tuple[int, int, int, int]] = {
    "temperature": (0x01, 1, 1, 0),
    "voltage": (0x02, 4, 8, -2),
    "fan": (0x04, 18, 100, 0),
    "power": (0x0B, 6, 40, 0),
}
# health -> threshold status bits of Get Sensor Reading (upper non-critical / upper critical)
_HEALTH_BITS = {"OK": 0x00, "Warning": 0x08, "Critical": 0x10}
# Chassis Control directive -> power transitions as (delay multiple, state) steps.
_CHASSIS_STEPS: dict[int, tuple[tuple[int, str], ...]] = {
    0: ((1, "off"),),
    1: ((1, "on"),),
    2: ((1, "off"), (2, "on")),  # power cycle
    3: ((1, "reset"),),  # hard reset: a boot without a power-off period
    5: ((1, "off"),),  # soft shutdown (ACPI)
}
RMCP_NO_CIPHER_MATCH = 0x11
RMCP_UNAUTHORIZED_NAME = 0x0D


@dataclass
class SensorSpec:
    name: str
    kind: str  # a key of SENSOR_KINDS
    value: float
    health: str = "OK"  # OK | Warning | Critical


@dataclass
class SelSpec:
    """One SEL record (IPMI system event, record type 02h)."""

    sensor_type: int
    sensor_number: int
    event_type: int  # 01h threshold, 6Fh sensor-specific
    data: tuple[int, int, int]
    timestamp: int  # seconds since the epoch
    deassertion: bool = False


def _default_sensors() -> list[SensorSpec]:
    return [
        SensorSpec("Inlet Temp", "temperature", 24),
        SensorSpec("CPU0 Temp", "temperature", 52),
        SensorSpec("GPU0 Temp", "temperature", 41),
        SensorSpec("12V", "voltage", 12.08),
        SensorSpec("FAN1", "fan", 7200),
        SensorSpec("Sys Power", "power", 3200),
    ]


def _default_sel() -> list[SelSpec]:
    now = int(time.time())
    return [
        # CPU0 Temp (sensor 2): upper critical going high, trigger 95, threshold 90
        SelSpec(0x01, 2, 0x01, (0x59, 95, 90), now - 3600),
        # memory: correctable ECC (sensor type 0Ch, offset 0)
        SelSpec(0x0C, 0x40, 0x6F, (0x00, 0xFF, 0xFF), now - 1800),
    ]


@dataclass
class BmcSpec:
    """What one emulated BMC is: identity, credentials, hardware facts and behaviour."""

    name: str
    port: int
    username: str = "admin"
    password: str = field(default="", repr=False)
    power_on: bool = False
    power_delay_s: float = 2.0
    manufacturer: str = "Supermicro"
    product: str = "SYS-821GE-TNHR"
    serial: str = "S00000001"
    board_serial: str = "WM000000001"
    part_number: str = "X13DEG-OAD"
    bios_version: str = "2.1.V1"
    uuid: str = ""
    manufacturer_id: int = 10876  # IANA enterprise number (10876 = Supermicro)
    product_id: int = 0x1B51
    firmware: tuple[int, int] = (1, 0x50)  # major, minor (BCD): "1.50"
    sensors: list[SensorSpec] = field(default_factory=_default_sensors)
    sel: list[SelSpec] = field(default_factory=_default_sel)
    refuse_power: bool = False  # answer Chassis Control with D5h (not supported in present state)


def _tlv(text: str) -> bytes:
    raw = text.encode("latin-1", "replace")[:63]
    return bytes([0xC0 | len(raw)]) + raw


def _fru_area(fields: bytes) -> bytes:
    data = bytearray([1, 0]) + fields + b"\xc1"
    data += bytes(-(len(data) + 1) % 8)
    data[1] = (len(data) + 1) // 8
    return bytes(data + bytes([-sum(data) & 0xFF]))


def build_fru(spec: BmcSpec) -> bytes:
    """FRU 0 in the Platform Management FRU format: chassis, board and product areas."""
    chassis = _fru_area(bytes([0x17]) + _tlv(spec.part_number) + _tlv(spec.serial))
    board = _fru_area(bytes([0, 0, 0, 0]) + _tlv(spec.manufacturer) + _tlv(spec.part_number)
                      + _tlv(spec.board_serial) + _tlv(spec.part_number) + _tlv(""))
    product = _fru_area(bytes([0]) + _tlv(spec.manufacturer) + _tlv(spec.product)
                        + _tlv(spec.product) + _tlv("1.0") + _tlv(spec.serial) + _tlv("")
                        + _tlv(""))
    offsets = [1, 1 + len(chassis) // 8, 1 + (len(chassis) + len(board)) // 8]
    header = bytearray([1, 0, *offsets, 0, 0])
    header.append(-sum(header) & 0xFF)
    return bytes(header) + chassis + board + product


def _raw(sensor: SensorSpec) -> int:
    _, _, m, r = SENSOR_KINDS[sensor.kind]
    return max(0, min(255, round(sensor.value / (m * 10.0**r))))


def build_sdr(number: int, sensor: SensorSpec) -> bytes:
    """A Full Sensor Record (type 01h) for a linear threshold sensor; record id = number - 1."""
    stype, unit, m, r = SENSOR_KINDS[sensor.kind]
    name = sensor.name.encode("ascii")[:16]
    body = bytes([
        0x20, 0x00, number, 0x07, 0x01,  # owner, LUN, number, entity (system board), instance
        0x7F, 0x40, stype, 0x01,  # init, capabilities (auto re-arm, no threshold access), type
        0, 0, 0, 0, 0, 0,  # event masks
        0x00, unit, 0x00, 0x00,  # unsigned, base unit, no modifier, linear
        m & 0xFF, (m >> 2) & 0xC0, 0, 0, 0, (r & 0x0F) << 4,  # M, tolerance, B, accuracy, R/B exp
        0, 0, 0, 0, 0xFF, 0x00,  # analog flags, nominal, normal max/min, sensor max/min
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,  # thresholds, hysteresis, reserved, OEM
        0xC0 | len(name),
    ]) + name
    return struct.pack("<HBBB", number - 1, 0x51, 0x01, len(body)) + body


class _Session(serversession.ServerSession):  # type: ignore[misc]
    """RMCP+ server session that refuses what it cannot do instead of answering wrongly.

    pyghmi files server sessions under the client's address, then the BMC's port: a client
    process sends from one UDP socket, so its sessions to all our BMCs share one address. pyghmi
    gets two things wrong there, fixed here. A new login from an address (an IPMI 1.5 packet with
    session 0 and sequence 0) makes it forget *every* BMC's session for that address, so the
    client's live session to another BMC goes unanswered until it logs in again; and a packet
    queued to a session forgotten that way raises AttributeError in the serving thread, after
    which no BMC of the process answers (CI: node-04's and node-08's BMCs, both served here, never
    answered again). This session forgets only itself, when its client logs in again or out.
    """

    def _forget(self) -> None:
        """Unregister this session (its address's dict stays: pyghmi's I/O thread reads it)."""
        mine = pyghmi_session.Session.bmc_handlers.get(self.sockaddr, {})
        if mine.get(self.bmc.port) is self:
            del mine[self.bmc.port]

    def process_pktqueue(self) -> None:
        while self.pktqueue:
            pkt = list(self.pktqueue.popleft())
            pkt[0] = bytearray(pkt[0])
            if not (pkt[0][0] == 6 and pkt[0][2:4] == b"\xff\x07"):
                continue  # not IPMI over RMCP
            owner = pyghmi_session.Session.bmc_handlers.get(pkt[1], {}).get(self.bmc.port)
            if owner is None:  # its session was forgotten after the packet was queued
                self.bmc.sessionless_data(pkt[0], pkt[1])
            else:
                owner._handle_ipmi_packet(pkt[0], sockaddr=pkt[1], qent=pkt)

    def _handle_ipmi_packet(self, data: Any, sockaddr: Any = None, qent: Any = None) -> Any:
        if data[4] in (0, 2) and not any(data[5:13]):  # IPMI 1.5, sequence 0, session 0
            self._forget()  # the client starts a new login: this session is over
            self.bmc.sessionless_data(data, sockaddr)
            return None
        return super()._handle_ipmi_packet(data, sockaddr=sockaddr, qent=qent)

    def close_server_session(self) -> None:
        """Close Session (logout) was answered: forget the session, as a BMC does."""
        self._forget()

    def create_open_session_response(self, request: Any) -> Any:
        req = bytearray(request)
        algorithms = (req[12], req[20], req[28]) if len(req) >= 32 else ()
        if algorithms != (1, 1, 1):  # only cipher suite 3: HMAC-SHA1, HMAC-SHA1-96, AES-CBC-128
            self.clientsessionid = req[4:8]
            self.managedsessionid = os.urandom(4)
            return bytearray([req[0], RMCP_NO_CIPHER_MATCH, 0, 0]) + req[4:8]
        return super().create_open_session_response(request)

    def _got_rakp1(self, data: Any) -> None:
        name = bytes(data[28:]).decode("utf-8", "replace")
        if data[27] == 0 or self.authdata.get(name) is None:
            reply = bytearray([data[0], RMCP_UNAUTHORIZED_NAME, 0, 0]) + self.clientsessionid
            self.send_payload(reply, pyghmi_constants.payload_types["rakp2"], retry=False)
            return
        super()._got_rakp1(data)


class _NonBlockingSocket:
    """A server socket that stays non-blocking.

    pyghmi sets a socket blocking before each send (in whichever thread sends) and non-blocking
    before each receive (in its I/O thread). Our handlers answer from the serving thread, so a
    send can flip the socket between the I/O thread's two steps and its receive then blocks
    forever: under load (hundreds of clients) the whole emulator hangs. A UDP send on loopback
    does not block, so this socket ignores the flips.
    """

    def __init__(self, sock: Any) -> None:
        sock.setblocking(False)
        self._sock = sock

    def setblocking(self, flag: bool) -> None:
        """Ignored: see the class docstring."""

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)


class EmulatedBmc(pyghmi_bmc.Bmc):  # type: ignore[misc]
    """One BMC: its protocol handlers and state. All state changes hold the emulator's lock."""

    def __init__(self, spec: BmcSpec, emulator: IpmiEmulator, address: str) -> None:
        ident = uuid.UUID(spec.uuid) if spec.uuid else uuid.uuid5(uuid.NAMESPACE_DNS, spec.name)
        super().__init__({spec.username: spec.password}, port=spec.port, bmcuuid=ident,
                         address=address)
        raw: Any = getattr(self, "serversocket")  # noqa: B009 - untyped pyghmi attribute
        wrapped = _NonBlockingSocket(raw)
        pyghmi_session.iosockets[pyghmi_session.iosockets.index(raw)] = wrapped
        pyghmi_session.Session.bmc_handlers[wrapped] = pyghmi_session.Session.bmc_handlers.pop(raw)
        self.serversocket = wrapped
        self.spec = spec
        self.emulator = emulator
        self.mfgid, self.prodid = spec.manufacturer_id, spec.product_id
        self.firmwaremajor, self.firmwareminor = spec.firmware
        self.additionaldevices = 0x0F  # sensor, SDR repository, SEL and FRU devices
        self.powered = spec.power_on
        self.pending: list[tuple[float, str]] = []
        self.boot_flags = bytes(5)  # parameter 5 of the boot options, as last set
        self.fru = build_fru(spec)
        self.sdrs = [build_sdr(i + 1, s) for i, s in enumerate(spec.sensors)]
        self.sdr_stamp = int.from_bytes(hashlib.sha256(b"".join(self.sdrs)).digest()[:4], "little")
        self.sel = list(spec.sel)
        self.calls: Counter[tuple[int, int]] = Counter()
        self.busy = 0  # answer the next this many chassis commands with C0h (node busy)
        self._handlers: dict[tuple[int, int], Callable[[bytes], tuple[int, bytes]]] = {
            (0x00, 0x01): self._chassis_status, (0x00, 0x02): self._chassis_control,
            (0x00, 0x08): self._set_boot_options, (0x00, 0x09): self._get_boot_options,
            (0x04, 0x2D): self._sensor_reading, (0x06, 0x01): self._device_id,
            (0x06, 0x37): lambda _: (0, self.uuid.bytes_le), (0x06, 0x59): self._system_info,
            (0x0A, 0x10): self._fru_info, (0x0A, 0x11): self._fru_read,
            (0x0A, 0x20): self._sdr_info, (0x0A, 0x22): lambda _: (0, b"\x01\x00"),
            (0x0A, 0x23): self._get_sdr, (0x0A, 0x40): self._sel_info,
            (0x0A, 0x42): lambda _: (0, b"\x01\x00"), (0x0A, 0x43): self._sel_entry,
            (0x0A, 0x47): self._sel_clear,
            (0x0A, 0x48): lambda _: (0, struct.pack("<I", int(time.time()))),
        }

    # -- pyghmi entry points
    def sessionless_data(self, data: Any, sockaddr: Any) -> None:
        if len(data) >= 22 and data[0] == 6 and data[4] == 6 and data[5] == 0x10:
            _Session(self.authdata, self.kg, sockaddr, self.serversocket, bytearray(data)[16:],
                     self.uuid, bmc=self)
            return
        super().sessionless_data(data, sockaddr)

    def handle_raw_request(self, request: dict[str, Any], session: Any) -> None:
        key = (request["netfn"], request["command"])
        handler = self._handlers.get(key)
        with self.emulator.lock:
            self.calls[key] += 1
            self.settle()
            if self.busy > 0 and request["netfn"] == 0x00:
                self.busy -= 1
                session.send_ipmi_response(data=[], code=0xC0)
                return
            try:
                code, data = (0xC1, b"") if handler is None else handler(bytes(request["data"]))
            except (IndexError, ValueError, struct.error):
                code, data = 0xC7, b""  # request data length invalid
        session.send_ipmi_response(data=list(data), code=code)

    # -- power, on the emulator's clock
    def settle(self) -> None:
        """Apply the power transitions that are due; each boot consumes a one-time override."""
        now = self.emulator.clock()
        while self.pending and self.pending[0][0] <= now:
            _, state = self.pending.pop(0)
            booted = state == "reset" or (state == "on" and not self.powered)
            if state == "reset":
                self.emulator.notify(self.spec.name, "off")
                state = "on"
            changed = (state == "on") != self.powered
            self.powered = state == "on"
            if booted and self.boot_flags[0] & 0x80 and not self.boot_flags[0] & 0x40:
                self.boot_flags = bytes(5)
            if changed or booted:
                self.emulator.notify(self.spec.name, state)

    def _chassis_status(self, _: bytes) -> tuple[int, bytes]:
        return 0, bytes([0x01 if self.powered else 0x00, 0x00, 0x40])

    def _chassis_control(self, data: bytes) -> tuple[int, bytes]:
        steps = _CHASSIS_STEPS.get(data[0] & 0x0F)
        if steps is None:
            return 0xCC, b""
        if self.spec.refuse_power:
            return 0xD5, b""
        now = self.emulator.clock()
        self.pending = [(now + n * self.spec.power_delay_s, s) for n, s in steps]
        return 0, b""

    # -- boot device
    def _set_boot_options(self, data: bytes) -> tuple[int, bytes]:
        param = data[0] & 0x7F
        if param == 5:
            self.boot_flags = bytes(data[1:6]).ljust(5, b"\x00")
            return 0, b""
        return (0, b"") if param in (0, 3, 4) else (0x80, b"")

    def _get_boot_options(self, data: bytes) -> tuple[int, bytes]:
        if data[0] & 0x7F != 5:
            return 0x80, b""
        return 0, bytes([0x01, 0x05]) + self.boot_flags

    # -- identity
    def _device_id(self, _: bytes) -> tuple[int, bytes]:
        major, minor = self.spec.firmware
        mfg = struct.pack("<I", self.mfgid)[:3]
        return 0, bytes([0x20, 0x01, major, minor, 0x02, self.additionaldevices]) + mfg + \
            struct.pack("<H", self.prodid)

    def _system_info(self, data: bytes) -> tuple[int, bytes]:
        if data[1] != 1:  # only parameter 1: system firmware version
            return 0x80, b""
        text = self.spec.bios_version.encode("ascii")[:14]
        return 0, bytes([0x11, 0x00, 0x00, len(text)]) + text

    # -- FRU
    def _fru_info(self, data: bytes) -> tuple[int, bytes]:
        if data[0] != 0:
            return 0xCB, b""
        return 0, struct.pack("<HB", len(self.fru), 0)

    def _fru_read(self, data: bytes) -> tuple[int, bytes]:
        fruid, offset, count = data[0], data[1] | data[2] << 8, data[3]
        if fruid != 0 or offset > len(self.fru):
            return 0xCB, b""
        chunk = self.fru[offset:offset + count]
        return 0, bytes([len(chunk)]) + chunk

    # -- SDR and sensors
    def _sdr_info(self, _: bytes) -> tuple[int, bytes]:
        stamp = struct.pack("<I", self.sdr_stamp)
        return 0, bytes([0x51]) + struct.pack("<HH", len(self.sdrs), 0xFFFF) + stamp + stamp + \
            b"\x02"

    def _get_sdr(self, data: bytes) -> tuple[int, bytes]:
        recid, offset, count = data[2] | data[3] << 8, data[4], data[5]
        if recid >= len(self.sdrs):
            return 0xCB, b""
        record = self.sdrs[recid]
        nxt = recid + 1 if recid + 1 < len(self.sdrs) else 0xFFFF
        part = record[offset:] if count == 0xFF else record[offset:offset + count]
        return 0, struct.pack("<H", nxt) + part

    def _sensor_reading(self, data: bytes) -> tuple[int, bytes]:
        number = data[0]
        if not 1 <= number <= len(self.spec.sensors):
            return 0xCB, b""
        sensor = self.spec.sensors[number - 1]
        return 0, bytes([_raw(sensor), 0xC0, _HEALTH_BITS.get(sensor.health, 0), 0x80])

    # -- SEL
    def _sel_info(self, _: bytes) -> tuple[int, bytes]:
        last = self.sel[-1].timestamp if self.sel else 0
        return 0, bytes([0x51]) + struct.pack("<HHII", len(self.sel), 0xFFFF, last, 0) + b"\x02"

    def _sel_entry(self, data: bytes) -> tuple[int, bytes]:
        recid = data[2] | data[3] << 8
        index = len(self.sel) - 1 if recid == 0xFFFF else recid - 1 if recid else 0
        if not 0 <= index < len(self.sel):
            return 0xCB, b""
        e = self.sel[index]
        nxt = index + 2 if index + 1 < len(self.sel) else 0xFFFF
        direction = 0x80 if e.deassertion else 0x00
        record = struct.pack("<HBIBBBBBB", index + 1, 0x02, e.timestamp, 0x20, 0x00, 0x04,
                             e.sensor_type, e.sensor_number, direction | e.event_type) + \
            bytes(e.data)
        return 0, struct.pack("<H", nxt) + record

    def _sel_clear(self, data: bytes) -> tuple[int, bytes]:
        if data[2:5] != b"CLR":
            return 0xCC, b""
        if data[5] == 0xAA:
            self.sel.clear()
        return 0, b"\x01"  # erasure completed


class IpmiEmulator:
    """Serve many emulated BMCs from one thread of this process.

    ``clock`` drives power delays (inject a manual clock in tests). ``on_power(bmc_name, state)``
    is called with "on" or "off" when a transition lands (a reset reports "off" then "on").
    """

    def __init__(self, specs: list[BmcSpec], *, address: str = "127.0.0.1",
                 clock: Clock = time.monotonic, on_power: PowerHook | None = None) -> None:
        self.lock = threading.RLock()
        self.clock = clock
        self.on_power = on_power
        if not pyghmi_session.iosockets:
            # pyghmi's I/O thread wakes itself through its first socket, which must be a
            # dual-stack client socket, not one of our IPv4 server sockets.
            pyghmi_session.Session._assignsocket()
        self.bmcs = {s.name: EmulatedBmc(s, self, address) for s in specs}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def notify(self, name: str, state: str) -> None:
        if self.on_power is not None:
            self.on_power(name, state)

    def tick(self) -> None:
        """Land the power transitions that are due (the serving thread calls this)."""
        with self.lock:
            for b in self.bmcs.values():
                b.settle()

    def serve_forever(self) -> None:
        while not self._stop.is_set():
            try:
                pyghmi_session.Session.wait_for_rsp(timeout=0.1)
                self.tick()
            except Exception:  # one bad packet or hook must not silence every BMC
                # A real BMC drops a request it chokes on; it does not stop answering for good.
                # The traceback goes to stderr (the lab's supervisor.log) so the bug is seen.
                traceback.print_exc()

    def start(self) -> IpmiEmulator:
        self._thread = threading.Thread(target=self.serve_forever, name="ipmi-emulator",
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and release the ports."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        ours = [b.serversocket for b in self.bmcs.values()]
        for sock in ours:
            pyghmi_session.iosockets.remove(sock)
            pyghmi_session.Session.bmc_handlers.pop(sock, None)
        for handlers in list(pyghmi_session.Session.bmc_handlers.values()):
            for port, handler in list(handlers.items()):
                if isinstance(handler, _Session) and handler.bmc in self.bmcs.values():
                    del handlers[port]
        pyghmi_session._io_wait(0)  # let the I/O thread leave a select() that held our sockets
        for sock in ours:
            sock.close()


def lab_specs(count: int, base_port: int, password: str, **overrides: Any) -> list[BmcSpec]:
    """``count`` BMCs named bmc-0001… on consecutive ports, with distinct serials and UUIDs."""
    return [BmcSpec(name=f"bmc-{i + 1:04d}", port=base_port + i, password=password,
                    serial=f"S{i + 1:08d}", board_serial=f"WM{i + 1:09d}", **overrides)
            for i in range(count)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--count", type=int, default=1)
    parser.add_argument("--base-port", type=int, default=6230)
    parser.add_argument("--address", default="127.0.0.1")
    parser.add_argument("--user", default="admin")
    parser.add_argument("--password-env", required=True,
                        help="environment variable holding the BMC password")
    parser.add_argument("--power-delay", type=float, default=2.0)
    parser.add_argument("--power-on", action="store_true")
    args = parser.parse_args(argv)
    password = os.environ.get(args.password_env)
    if not password:
        parser.error(f"environment variable {args.password_env} is empty or unset")
    specs = lab_specs(args.count, args.base_port, password, username=args.user,
                      power_delay_s=args.power_delay, power_on=args.power_on)
    try:
        emulator = IpmiEmulator(specs, address=args.address)
    except OSError as exc:  # a port taken: one line, not a traceback
        parser.exit(1, f"cannot serve on {args.address}:{args.base_port}-{args.base_port + args.count - 1}: "
                       f"{exc.strerror or exc}\n")
    signal.signal(signal.SIGTERM, lambda *_: emulator._stop.set())
    print(f"serving {args.count} BMCs on {args.address}:{args.base_port}"
          f"-{args.base_port + args.count - 1}", flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        emulator.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())

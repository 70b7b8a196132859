"""Fixtures for the IPMI tests: our pyghmi-based emulator, OpenIPMI's ipmi_sim, ipmitool, and a
UDP black hole that counts what a client sends to a BMC that never answers.

Test modules import the fixtures they use from here (tests/bmc/conftest.py belongs to Redfish).
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from lifecycle.drivers.bmc.base import Credentials
from lifecycle.drivers.bmc.fake import ManualClock
from lifecycle.drivers.bmc.ipmi import IpmiDriver
from lifecycle.lab.ipmi_emulator import (
    BmcSpec,
    EmulatedBmc,
    IpmiEmulator,
    SensorSpec,
    build_fru,
    build_sdr,
)

USER = "admin"
PASSWORD = "ipmi-Emu-S3cret"  # the emulator's own test password
POWER_DELAY_S = 5.0


def free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def require(tool: str) -> str:
    """The path of a Debian tool the test needs; a missing tool fails the test (CI installs it)."""
    path = shutil.which(tool)
    assert path, f"{tool} is required (Debian packages ipmitool and openipmi)"
    return path


@dataclass
class Lab:
    emulator: IpmiEmulator
    clock: ManualClock
    spec: BmcSpec
    power_events: list[tuple[str, str]] = field(default_factory=list)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.spec.port}"

    @property
    def bmc(self) -> EmulatedBmc:
        return self.emulator.bmcs[self.spec.name]

    def driver(self, password: str = PASSWORD, user: str = USER) -> IpmiDriver:
        return IpmiDriver(self.address, Credentials(user, password))

    def ipmitool(self, *args: str, password: str = PASSWORD) -> subprocess.CompletedProcess[str]:
        return ipmitool(self.spec.port, *args, password=password)


def ipmitool(port: int, *args: str, password: str = PASSWORD) -> subprocess.CompletedProcess[str]:
    """Debian ipmitool over lanplus with cipher suite 3 (without -C 3 each call takes ~10 s)."""
    argv = [require("ipmitool"), "-I", "lanplus", "-C", "3", "-N", "1", "-R", "2",
            "-H", "127.0.0.1", "-p", str(port), "-U", USER, "-E", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60,
                          env={"IPMI_PASSWORD": password, "PATH": "/usr/bin:/bin"}, check=False)


@pytest.fixture(name="ipmi_lab")
def ipmi_lab_fixture() -> Iterator[Lab]:
    """One emulated BMC (off, 5 s power delay on a manual clock) on a free loopback port."""
    clock = ManualClock()
    spec = BmcSpec(name="bmc-a", port=free_udp_port(), username=USER, password=PASSWORD,
                   power_delay_s=POWER_DELAY_S, serial="S4Z1X0042", board_serial="WM23AB0042",
                   uuid="6f1c7e64-2b1d-4e8a-9c55-0c2f8a9b1d42", bios_version="2.4.V2")
    lab = Lab(IpmiEmulator([spec], clock=clock), clock, spec)
    lab.emulator.on_power = lambda name, state: lab.power_events.append((name, state))
    lab.emulator.start()
    try:
        yield lab
    finally:
        lab.emulator.stop()


class BlackHole:
    """A UDP port that receives and never answers: a BMC that is down or firewalled."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.port = int(self.sock.getsockname()[1])
        self.datagrams = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.sock.recv(4096)
            except TimeoutError:
                continue
            self.datagrams += 1

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self.sock.close()


@pytest.fixture(name="black_hole")
def black_hole_fixture() -> Iterator[BlackHole]:
    hole = BlackHole()
    try:
        yield hole
    finally:
        hole.close()


SIM_SENSOR = SensorSpec("Inlet Temp", "temperature", 24)
SIM_SPEC = BmcSpec(name="ipmi-sim", port=0, serial="SIM0001", board_serial="SIMBOARD01")
_CHASSIS_CONTROL = """#!/bin/sh
# ipmi_sim chassis_control program: DEVICE get|set [PARAM [VALUE]]...; power kept in a file.
state="$(dirname "$0")/power.state"
op=$2; shift 2
if [ "$op" = get ]; then
  for p in "$@"; do
    case "$p" in
      power) echo "power:$(cat "$state" 2>/dev/null || echo 0)";;
      boot) echo "boot:default";;
    esac
  done
  exit 0
fi
while [ $# -gt 1 ]; do
  case "$1" in power) echo "$2" > "$state";; esac
  shift 2
done
"""


@dataclass
class Sim:
    port: int
    process: subprocess.Popen[bytes]

    def driver(self) -> IpmiDriver:
        return IpmiDriver(f"127.0.0.1:{self.port}", Credentials(USER, PASSWORD))


@pytest.fixture(name="ipmi_sim")
def ipmi_sim_fixture(tmp_path: Path) -> Iterator[Sim]:
    """OpenIPMI's ipmi_sim with one BMC: a temperature sensor, FRU 0 and external power control.

    The FRU and the sensor record are the bytes our emulator serves, so both peers describe the
    same machine.
    """
    binary = require("ipmi_sim")
    port = free_udp_port()
    control = tmp_path / "chassis-control.sh"
    control.write_text(_CHASSIS_CONTROL, encoding="utf-8")
    control.chmod(0o755)
    (tmp_path / "lan.conf").write_text(f"""name "racklife"
set_working_mc 0x20
  startlan 1
    addr 127.0.0.1 {port}
    priv_limit admin
    allowed_auths_callback none md2 md5 straight
    allowed_auths_user none md2 md5 straight
    allowed_auths_operator none md2 md5 straight
    allowed_auths_admin none md2 md5 straight
    guid a123456789abcdefa123456789abcdef
  endlan
  startnow false
  chassis_control "{control} 0x20"
  user 2 true "{USER}" "{PASSWORD}" admin 10 none md2 md5 straight
""", encoding="utf-8")
    fru, sdr = build_fru(SIM_SPEC), build_sdr(1, SIM_SENSOR)

    def hexes(data: bytes) -> str:
        return " ".join(f"0x{b:02x}" for b in data)

    (tmp_path / "sim.emu").write_text("\n".join([
        "mc_setbmc 0x20",
        "mc_add 0x20 0 no-device-sdrs 0x23 9 8 0x9f 0x1291 0xf02",
        "sel_enable 0x20 1000 0x0a",
        "sensor_add 0x20 0 1 0x01 0x01",
        f"sensor_set_value 0x20 0 1 {int(SIM_SENSOR.value)} 0",
        "sensor_set_event_support 0x20 0 1 enable scanning per-state "
        "000000000000000 000000000000000 000000000000000 000000000000000",
        f"main_sdr_add 0x20 {hexes(sdr)}",
        f"mc_add_fru_data 0x20 0 {len(fru)} data {hexes(fru)}",
        "mc_enable 0x20",
    ]) + "\n", encoding="utf-8")
    state = tmp_path / "state"
    state.mkdir()
    process = subprocess.Popen(
        [binary, "-n", "-p", "-c", str(tmp_path / "lan.conf"), "-f", str(tmp_path / "sim.emu"),
         "-s", str(state)], cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(50):  # up to ~5 s (ipmitool's own 0.1 s-scale retries) for it to listen
            if ipmitool(port, "mc", "info").returncode == 0:
                break
            assert process.poll() is None, "ipmi_sim exited at start"
        else:
            raise AssertionError("ipmi_sim did not answer ipmitool")
        yield Sim(port, process)
    finally:
        process.terminate()
        process.wait(timeout=10)

"""The emulator as the lab runs it: one process, many BMCs on consecutive loopback ports."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys

from lifecycle.drivers.bmc.base import Credentials, PowerAction, PowerState
from lifecycle.drivers.bmc.ipmi import IpmiDriver
from lifecycle.lab.ipmi_emulator import BmcSpec, build_fru, lab_specs
from tests.bmc.ipmi_fixtures import PASSWORD, USER

COUNT = 3


def _free_run(count: int) -> int:
    """A base port with ``count`` free UDP ports after it."""
    for base in range(41000, 60000, 97):
        socks = []
        try:
            for port in range(base, base + count):
                s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                socks.append(s)
                s.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise AssertionError("no free port range")


def test_many_bmcs_in_one_process() -> None:
    base = _free_run(COUNT)
    env = {**os.environ, "LAB_IPMI_PASSWORD": PASSWORD}
    process = subprocess.Popen(
        [sys.executable, "-m", "lifecycle.lab.ipmi_emulator", "--count", str(COUNT),
         "--base-port", str(base), "--password-env", "LAB_IPMI_PASSWORD", "--power-delay", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert process.stdout is not None
        banner = process.stdout.readline()
        assert banner.strip() == f"serving {COUNT} BMCs on 127.0.0.1:{base}-{base + COUNT - 1}"
        drivers = [IpmiDriver(f"127.0.0.1:{base + i}", Credentials(USER, PASSWORD))
                   for i in range(COUNT)]
        assert [d.inventory().system.serial for d in drivers] == [
            "S00000001", "S00000002", "S00000003"]
        drivers[1].power(PowerAction.ON)
        assert drivers[1].power_state() is PowerState.ON  # delay 0: lands at once
        assert drivers[0].power_state() is PowerState.OFF
        for d in drivers:
            d.close()
    finally:
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=20)
    assert process.returncode == 0, err
    assert PASSWORD not in err


def test_password_must_come_from_the_environment() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "lifecycle.lab.ipmi_emulator", "--password-env",
         "RACKLIFE_TEST_UNSET_VARIABLE"], capture_output=True, text=True, timeout=60,
        env={k: v for k, v in os.environ.items() if k != "RACKLIFE_TEST_UNSET_VARIABLE"},
        check=False)
    assert result.returncode == 2
    assert "RACKLIFE_TEST_UNSET_VARIABLE is empty or unset" in result.stderr


def test_lab_specs_and_fru_layout() -> None:
    specs = lab_specs(2, 7000, "pw")
    assert [(s.name, s.port, s.serial) for s in specs] == [
        ("bmc-0001", 7000, "S00000001"), ("bmc-0002", 7001, "S00000002")]
    fru = build_fru(BmcSpec(name="x", port=1))
    assert fru[0] == 1 and sum(fru[:8]) % 256 == 0  # common header version and checksum
    for offset in fru[2:5]:  # chassis, board, product areas: each sums to zero
        start = offset * 8
        length = fru[start + 1] * 8
        assert sum(fru[start:start + length]) % 256 == 0

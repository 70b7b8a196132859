"""The emulator as the lab runs it: one process, many BMCs on consecutive loopback ports."""

from __future__ import annotations

import contextlib
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator

from lifecycle.drivers.bmc.base import Credentials, PowerAction, PowerState
from lifecycle.drivers.bmc.fake import ManualClock
from lifecycle.drivers.bmc.ipmi import IpmiDriver
from lifecycle.drivers.errors import Unreachable
from lifecycle.lab.ipmi_emulator import BmcSpec, IpmiEmulator, build_fru, lab_specs
from tests.bmc.ipmi_fixtures import PASSWORD, USER, free_udp_port

COUNT = 3


def _free_run(count: int) -> int:
    """A base port with ``count`` free UDP ports after it, from a random start: two workers running
    these tests at once started from the same port and raced each other for it (CI: the second
    emulator could not bind and printed no banner)."""
    start = random.randrange(41000, 59000)
    for base in range(start, start + 97 * 100, 97):
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


@contextlib.contextmanager
def _emulator_process(count: int) -> Iterator[tuple[int, str]]:
    """``python -m lifecycle.lab.ipmi_emulator`` serving ``count`` BMCs; yields its base port and banner.

    A range is free when chosen but may be taken before the emulator binds it (another test's socket):
    the emulator then ends with "Address already in use", and a new range is tried. Any other end
    fails the test with what the emulator printed."""
    for _ in range(5):
        base = _free_run(count)
        process = subprocess.Popen(
            [sys.executable, "-m", "lifecycle.lab.ipmi_emulator", "--count", str(count), "--base-port",
             str(base), "--password-env", "LAB_IPMI_PASSWORD", "--power-delay", "0"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**os.environ, "LAB_IPMI_PASSWORD": PASSWORD})
        assert process.stdout is not None
        banner = process.stdout.readline()
        if banner:
            break
        _, err = process.communicate(timeout=20)
        assert "Address already in use" in err, f"the emulator ended (exit {process.returncode}): {err}"
    else:
        raise AssertionError("five port ranges were taken before the emulator could bind them")
    try:
        yield base, banner
    finally:
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=20)
    assert process.returncode == 0, err
    assert "Traceback" not in err, err
    assert PASSWORD not in err


def test_many_bmcs_in_one_process() -> None:
    with _emulator_process(COUNT) as (base, banner):
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


def test_password_must_come_from_the_environment() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "lifecycle.lab.ipmi_emulator", "--password-env",
         "RACKLIFE_TEST_UNSET_VARIABLE"], capture_output=True, text=True, timeout=60,
        env={k: v for k, v in os.environ.items() if k != "RACKLIFE_TEST_UNSET_VARIABLE"},
        check=False)
    assert result.returncode == 2
    assert "RACKLIFE_TEST_UNSET_VARIABLE is empty or unset" in result.stderr


def test_a_taken_port_is_one_line_not_a_traceback() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as taken:
        taken.bind(("127.0.0.1", 0))
        port = taken.getsockname()[1]
        result = subprocess.run(
            [sys.executable, "-m", "lifecycle.lab.ipmi_emulator", "--count", "1", "--base-port", str(port),
             "--password-env", "LAB_IPMI_PASSWORD"], capture_output=True, text=True, timeout=60,
            env={**os.environ, "LAB_IPMI_PASSWORD": PASSWORD}, check=False)
    assert result.returncode == 1
    assert result.stderr.strip() == f"cannot serve on 127.0.0.1:{port}-{port}: Address already in use"
    assert result.stdout == ""


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


def test_a_new_login_to_one_bmc_leaves_the_clients_session_to_another_alive() -> None:
    """One client process (one UDP socket) holds sessions to two BMCs of one emulator; it logs out
    of the second and logs in to it again. pyghmi's server then forgot the client's session to the
    first BMC too, whose next command went unanswered until the client logged in afresh (~20 s), and
    a packet already queued for it killed the serving thread: no BMC of the process answered again
    (CI: node-04 and node-08 stayed unreadable). The first session must serve on, unbroken."""
    with _emulator_process(2) as (base, _):
        first = IpmiDriver(f"127.0.0.1:{base}", Credentials(USER, PASSWORD))
        second = IpmiDriver(f"127.0.0.1:{base + 1}", Credentials(USER, PASSWORD))
        assert first.power_state() is PowerState.OFF
        session = first._session().ipmi_session
        login = session.sessionid  # the id the BMC gave this login
        assert second.power_state() is PowerState.OFF
        second.close()  # logs out
        again = IpmiDriver(f"127.0.0.1:{base + 1}", Credentials(USER, PASSWORD))
        assert again.power_state() is PowerState.OFF
        started = time.monotonic()
        assert first.power_state() is PowerState.OFF
        # pyghmi logs in again by itself when a session goes unanswered: that is the old failure
        assert (first._session().ipmi_session, session.sessionid) == (session, login), \
            f"the first BMC's session was lost: it answered after {time.monotonic() - started:.1f} s"
        fresh = subprocess.run(  # and every BMC answers a fresh client, as the lab's next command is
            [sys.executable, "-c", "import sys; from lifecycle.drivers.bmc.base import Credentials; "
             "from lifecycle.drivers.bmc.ipmi import IpmiDriver; "
             f"[print(IpmiDriver(f'127.0.0.1:{{p}}', Credentials({USER!r}, sys.argv[1])).power_state().value) "
             f"for p in ({base}, {base + 1})]", PASSWORD],
            capture_output=True, text=True, timeout=60, check=False)
        assert fresh.stdout.split() == ["off", "off"], fresh.stderr[-2000:]
        for d in (first, again):
            d.close()


def test_a_failing_power_hook_does_not_stop_the_bmcs() -> None:
    """The lab's power hook raising (a node it no longer knows, a lab going down) killed the one
    thread that serves every BMC of the process; it must go on serving."""
    clock, calls = ManualClock(), []

    def hook(name: str, state: str) -> None:
        calls.append((name, state))
        raise RuntimeError("hook failed")

    spec = BmcSpec(name="bmc-hook", port=free_udp_port(), username=USER, password=PASSWORD,
                   power_delay_s=1.0)
    emulator = IpmiEmulator([spec], clock=clock, on_power=hook).start()
    try:
        driver = IpmiDriver(f"127.0.0.1:{spec.port}", Credentials(USER, PASSWORD))
        driver.power(PowerAction.ON)
        clock.advance(2)  # the serving thread lands the power-on and calls the hook
        for _ in range(50):
            if calls:
                break
            time.sleep(0.05)
        assert calls == [("bmc-hook", "on")]
        time.sleep(0.3)  # a few more turns of the serving loop
        assert emulator._thread is not None and emulator._thread.is_alive()
        assert driver.power_state() is PowerState.ON
        driver.close()
    finally:
        emulator.stop()


def _answers_within(call: Callable[[], object], seconds: float) -> object:
    """``call()`` on a thread; fails the test if it has not returned within ``seconds`` (it hung)."""
    box: list[object] = []
    worker = threading.Thread(target=lambda: box.append(call()), daemon=True)
    worker.start()
    worker.join(seconds)
    assert box, f"no answer within {seconds} s"
    return box[0]


def test_two_drivers_to_one_bmc_share_its_session_and_the_last_to_close_logs_out() -> None:
    """A second driver to a BMC this process already had a session with (a refresh reading a node while a
    workflow held a driver to it) waited in its login until pyghmi's I/O thread next woke, up to 300 s:
    pyghmi gave it a socket of its own that the thread was not yet listening on. Drivers to one BMC and
    user now share one session; closing one leaves the other's session logged in."""
    with _emulator_process(1) as (base, _):
        address = f"127.0.0.1:{base}"
        first = IpmiDriver(address, Credentials(USER, PASSWORD))
        second = IpmiDriver(address, Credentials(USER, PASSWORD))
        assert first.power_state() is PowerState.OFF
        assert _answers_within(second.power_state, 20) is PowerState.OFF
        session = first._session().ipmi_session
        assert second._session().ipmi_session is session
        login = session.sessionid
        second.close()
        assert _answers_within(first.power_state, 20) is PowerState.OFF
        assert (first._session().ipmi_session, session.sessionid) == (session, login)  # still logged in
        first.close()
        third = IpmiDriver(address, Credentials(USER, PASSWORD))
        assert _answers_within(third.power_state, 20) is PowerState.OFF
        assert third._session().ipmi_session is not session  # the last close logged out: a fresh login
        third.close()


def test_a_session_found_broken_is_not_handed_to_the_next_driver() -> None:
    """The BMC restarts (its sessions are gone): the driver that finds the session broken forgets it, and a
    driver made after logs in anew instead of inheriting the dead session."""
    base = _free_run(1)
    args = [sys.executable, "-m", "lifecycle.lab.ipmi_emulator", "--count", "1", "--base-port", str(base),
            "--password-env", "LAB_IPMI_PASSWORD", "--power-delay", "0"]
    env = {**os.environ, "LAB_IPMI_PASSWORD": PASSWORD}
    bmc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert bmc.stdout is not None and bmc.stdout.readline().startswith("serving")
        first = IpmiDriver(f"127.0.0.1:{base}", Credentials(USER, PASSWORD))
        assert first.power_state() is PowerState.OFF
        bmc.kill()
        bmc.communicate(timeout=20)
        bmc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        assert bmc.stdout is not None and bmc.stdout.readline().startswith("serving"), bmc.communicate(timeout=20)
        with contextlib.suppress(Unreachable):  # the old session: unanswered (or pyghmi logs in again itself)
            first.power_state()
        fresh = IpmiDriver(f"127.0.0.1:{base}", Credentials(USER, PASSWORD))
        assert _answers_within(fresh.power_state, 60) is PowerState.OFF
        fresh.close()
        first.close()
    finally:
        bmc.kill()
        bmc.communicate(timeout=20)

"""Each injected fault gives the right error class, and the driver sends each request once.

Temporary or permanent is decided here, at the edge; retrying is the workflow step layer's
(tests/workflows/test_retry.py). The fake clock proves that the driver never waits.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from lifecycle.drivers.bmc.base import Credentials, PowerState
from lifecycle.drivers.bmc.redfish import RedfishDriver
from lifecycle.drivers.errors import (
    AuthFailed,
    Busy,
    OperationFailed,
    PermanentError,
    TemporaryError,
    Unreachable,
)
from lifecycle.lab.redfish_emulator import BmcConfig, RedfishEmulator

MakeDriver = Callable[..., RedfishDriver]
TREE = "dmtf-public-rackmount1"
SESSIONS = "/redfish/v1/SessionService/Sessions"


def served(emu: RedfishEmulator) -> int:
    return emu.requests(TREE)


def test_hanging_bmc_times_out_once(emulator: RedfishEmulator, make_driver: MakeDriver) -> None:
    emulator.set_fault(TREE, timeout=True)
    drv = make_driver(emulator.urls[TREE], timeout=0.3)
    with pytest.raises(Unreachable, match="timed out") as caught:
        drv.power_state()
    assert caught.value.retryable and caught.value.exit_code == 3
    assert served(emulator) == 1  # a read timeout is not retried
    assert drv.transport.calls == 1


def test_internal_error_on_a_read_is_temporary_and_sent_once(emulator: RedfishEmulator,
                                                              make_driver: MakeDriver,
                                                              clock: Any) -> None:
    emulator.set_fault(TREE, status=500)
    with pytest.raises(Busy, match="HTTP 500: Injected fault") as caught:
        make_driver(emulator.urls[TREE]).power_state()
    assert isinstance(caught.value, TemporaryError) and caught.value.delay_s is None
    assert served(emulator) == 1  # the driver never retries: that is the step layer's call
    assert clock.sleeps == []


def test_internal_error_on_an_action_is_permanent(emulator: RedfishEmulator,
                                                  make_driver: MakeDriver) -> None:
    drv = make_driver(emulator.urls[TREE])
    assert drv.power_state() is PowerState.ON
    emulator.set_fault(TREE, status=500)
    reset = "/redfish/v1/Systems/437XR1138R2/Actions/ComputerSystem.Reset"
    with pytest.raises(OperationFailed, match="HTTP 500") as caught:
        drv.transport.request("POST", reset, {"ResetType": "ForceOff"})  # the BMC may have done it
    assert isinstance(caught.value, PermanentError) and not caught.value.retryable
    with pytest.raises(Busy, match="HTTP 500"):
        drv.transport.request("PATCH", "/redfish/v1/Systems/437XR1138R2", {"AssetTag": "x"})


def test_503_and_429_carry_the_bmcs_retry_after(emulator: RedfishEmulator,
                                                make_driver: MakeDriver, clock: Any) -> None:
    for status in (503, 429):
        emulator.set_fault(TREE, status=status, retry_after=2)
        before = served(emulator)
        with pytest.raises(Busy, match=f"HTTP {status}") as caught:
            make_driver(emulator.urls[TREE]).power_state()
        assert caught.value.delay_s == 2.0 and caught.value.exit_code == 3
        assert served(emulator) == before + 1
    assert clock.sleeps == []


def test_503_without_retry_after_suggests_no_delay(emulator: RedfishEmulator,
                                                   make_driver: MakeDriver) -> None:
    emulator.set_fault(TREE, status=503)
    with pytest.raises(Busy) as caught:
        make_driver(emulator.urls[TREE]).power_state()
    assert caught.value.delay_s is None and caught.value.retryable
    assert served(emulator) == 1


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def test_connection_refused_is_unreachable_and_sent_once(make_driver: MakeDriver,
                                                         clock: Any) -> None:
    drv = make_driver(f"http://127.0.0.1:{_closed_port()}")
    with pytest.raises(Unreachable, match="connection failed") as caught:
        drv.power_state()
    assert caught.value.retryable and isinstance(caught.value, TemporaryError)
    assert drv.transport.calls == 1
    assert clock.sleeps == []


def test_expired_session_logs_in_again_once(emulator: RedfishEmulator,
                                            make_driver: MakeDriver) -> None:
    drv = make_driver(emulator.urls[TREE])
    drv.power_state()
    emulator.set_fault(TREE, expire_sessions=True)
    assert drv.power_state() is PowerState.ON
    assert emulator.call(lambda: emulator.states[TREE].requests[("POST", SESSIONS)]) == 2


def test_sessions_that_die_at_once_give_auth_failed_after_one_relogin(
        redfish_dir: Path, make_driver: MakeDriver) -> None:
    config = BmcConfig(name="idle", tree=redfish_dir / TREE, username="racklife",
                       password="emulator-S3cret!", session_timeout_s=0.0)
    with RedfishEmulator([config]) as emu:
        drv = make_driver(emu.urls["idle"])
        with pytest.raises(AuthFailed, match="HTTP 401"):
            drv.power_state()
        assert emu.call(lambda: emu.states["idle"].requests[("POST", SESSIONS)]) == 2
        assert emu.requests("idle") == 5  # root, login, GET, login, GET: no loop


def test_credentials_changed_under_us_fail_after_one_relogin(emulator: RedfishEmulator,
                                                             make_driver: MakeDriver) -> None:
    drv = make_driver(emulator.urls[TREE])
    drv.power_state()
    state = emulator.states[TREE]
    emulator.call(lambda: setattr(state, "config", replace(state.config,
                                                           password="rotated-elsewhere")))
    emulator.set_fault(TREE, expire_sessions=True)
    with pytest.raises(AuthFailed):
        drv.power_state()
    assert emulator.call(lambda: state.requests[("POST", SESSIONS)]) == 2


@pytest.mark.parametrize("auth", ["session", "basic"])
def test_wrong_password_is_auth_failed_and_never_echoed(emulator: RedfishEmulator,
                                                        clock: Any, auth: str,
                                                        caplog: pytest.LogCaptureFixture) -> None:
    secret = "Wr0ng-but-secret-pw"
    caplog.set_level(logging.DEBUG)
    drv = RedfishDriver(emulator.urls[TREE], Credentials("racklife", secret),
                        auth=auth, clock=clock)  # type: ignore[arg-type]
    with pytest.raises(AuthFailed) as caught:
        drv.power_state()
    assert caught.value.exit_code == 4
    assert secret not in str(caught.value) and secret not in repr(caught.value)
    assert secret not in caplog.text
    assert secret not in repr(drv.__dict__)
    assert emulator.requests(TREE) == 2  # service root, then one login (or one GET)


def test_session_token_never_logged(emulator: RedfishEmulator, make_driver: MakeDriver,
                                    caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    drv = make_driver(emulator.urls[TREE])
    drv.power_state()
    tokens = emulator.call(lambda: [s.token for s in emulator.states[TREE].sessions.values()])
    assert tokens and all(t not in caplog.text for t in tokens)
    assert "emulator-S3cret!" not in caplog.text


def test_slow_bmc_within_timeout_works_beyond_it_fails(emulator: RedfishEmulator,
                                                       make_driver: MakeDriver) -> None:
    emulator.set_fault(TREE, slow_s=0.1)
    assert make_driver(emulator.urls[TREE], timeout=5.0).power_state() is PowerState.ON
    emulator.set_fault(TREE, slow_s=1.0)
    before = served(emulator)
    with pytest.raises(Unreachable, match="timed out"):
        make_driver(emulator.urls[TREE], timeout=0.3).power_state()
    assert served(emulator) == before + 1


def test_credentials_in_the_address_are_refused_and_not_echoed(clock: Any) -> None:
    drv = RedfishDriver("https://admin:Hunter2-secret@10.0.0.9", Credentials("a", "b"),
                        clock=clock)
    with pytest.raises(OperationFailed, match="do not belong") as caught:
        drv.power_state()
    assert "Hunter2-secret" not in str(caught.value)
    assert drv.target == "https://10.0.0.9"

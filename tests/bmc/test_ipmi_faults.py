"""A BMC that never answers: Unreachable, within a bounded number of packets, with no retries
on top of pyghmi's own and a fresh attempt (not a cached broken session) on the next call."""

from __future__ import annotations

import pytest
from pyghmi import exceptions as pyghmi_exc

from lifecycle.drivers.bmc.base import Credentials, PowerState
from lifecycle.drivers.bmc.ipmi import IpmiDriver, parse_address
from lifecycle.drivers.errors import (
    Busy,
    DriverError,
    NotSupported,
    OperationFailed,
    PermanentError,
    TemporaryError,
    Unreachable,
)
from lifecycle.workflows.retry import Retrier, RetryPolicy, retrier, using
from tests.bmc.ipmi_fixtures import (  # noqa: F401 - fixtures
    PASSWORD,
    BlackHole,
    Lab,
    black_hole_fixture,
    ipmi_lab_fixture,
)

# pyghmi retransmits the channel-auth request a few times before it gives up; more than this
# many datagrams for one call would be a retry storm.
MAX_DATAGRAMS_PER_CALL = 8


def test_unreachable_bmc_gives_unreachable_without_a_retry_storm(black_hole: BlackHole) -> None:
    driver = IpmiDriver(f"127.0.0.1:{black_hole.port}", Credentials("admin", PASSWORD))
    with pytest.raises(Unreachable) as first:
        driver.power_state()
    assert first.value.retryable
    assert first.value.exit_code == 3
    assert PASSWORD not in str(first.value)
    sent = black_hole.datagrams
    assert 0 < sent <= MAX_DATAGRAMS_PER_CALL
    with pytest.raises(Unreachable):
        driver.power_state()
    assert 0 < black_hole.datagrams - sent <= MAX_DATAGRAMS_PER_CALL


@pytest.mark.parametrize(("address", "expected"), [
    ("10.0.0.5", ("10.0.0.5", 623)),
    ("bmc-r1-07.example:6230", ("bmc-r1-07.example", 6230)),
    ("[fd00::5]:624", ("fd00::5", 624)),
    ("fd00::5", ("fd00::5", 623)),
    ("ipmi://10.0.0.5:6231", ("10.0.0.5", 6231)),
])
def test_parse_address(address: str, expected: tuple[str, int]) -> None:
    assert parse_address(address) == expected


@pytest.mark.parametrize("address", ["", ":623", "host:0", "host:99999", "host:abc"])
def test_parse_address_refuses_garbage(address: str) -> None:
    with pytest.raises(ValueError, match="not an IPMI address"):
        parse_address(address)


@pytest.mark.parametrize(("code", "text", "kind"), [
    (0xC0, "Node busy", Busy),
    (0xC3, "Timeout", Busy),
    (0xCE, "Cannot provide response", Busy),
    (0xC1, "Invalid command", NotSupported),
    (0xCC, "Invalid data field in request", OperationFailed),
    (0xD5, "Command not supported in present state", OperationFailed),
])
def test_completion_codes_say_whether_a_retry_can_help(code: int, text: str, kind: type[DriverError]) -> None:
    """pyghmi's own exception for each completion code, through the driver's one table."""
    driver = IpmiDriver("127.0.0.1:623", Credentials("admin", PASSWORD))
    error = driver._command_error("set power", pyghmi_exc.IpmiException(text, code))
    assert type(error) is kind
    assert error.retryable is (kind is Busy)
    assert isinstance(error, TemporaryError if kind is Busy else PermanentError)
    assert f"{code:02X}h" in error.message


def test_a_busy_bmc_is_retried_by_an_idempotent_step(ipmi_lab: Lab) -> None:
    """Real RMCP+ exchanges: the emulator answers C0h (node busy) twice, then the status."""
    ipmi_lab.bmc.busy = 2
    driver = ipmi_lab.driver()
    with pytest.raises(Busy, match="C0h"):
        driver.power_state()
    waited: list[float] = []
    with using(Retrier(RetryPolicy(attempts=3, backoff_s=1.0), waited.append)):
        assert retrier().call(driver.power_state) is PowerState.OFF
    assert waited == [1.0]  # one more C0h, then the answer
    assert ipmi_lab.bmc.busy == 0

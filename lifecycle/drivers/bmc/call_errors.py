"""What a failed BMC call was, in one vocabulary, told to whoever watches the driver.

Operators ask "are the iDRACs timing out, or is it auth on the HPEs?": a
question about every failed call, by vendor and by what went wrong, across
every workflow and controller process. Only the driver's edge knows both
exactly — which exception the HTTP or IPMI library raised, which status the
BMC sent, which vendor the service root named — so the class is decided
there, once, in the same place the error is translated (``redfish_transport``,
``ipmi``), never guessed later from a message.

Drivers do not write anywhere: a driver is given an observer
(:class:`CallObserver`) by whoever builds it (``factory.driver_for``), and the
workflows' observer stores each failure (``lifecycle/workflows/bmc_calls.py``),
so the metrics can count them at scrape time. Without an observer nothing is
recorded and nothing changes.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol


class CallErrorClass(StrEnum):
    """What went wrong with one BMC call."""

    TIMEOUT = "timeout"  # sent, no answer in time (HTTP read or connect timeout; IPMI no reply)
    CONNECTION = "connection"  # refused, reset, no route, name resolution
    TLS = "tls"  # the BMC's certificate does not verify
    AUTH = "auth"  # credentials refused (HTTP 401/403, IPMI RAKP/password)
    HTTP_4XX = "http_4xx"  # another client error: a missing resource, a bad request
    HTTP_5XX = "http_5xx"  # the BMC's own error (500, 503, ...)
    THROTTLED = "throttled"  # "not now": HTTP 429, IPMI node busy and its kin
    PROTOCOL = "protocol"  # an answer racklife cannot read: invalid JSON, a login without a token
    IPMI_COMPLETION = "ipmi_completion"  # an IPMI completion code that refuses the command


@dataclass(frozen=True)
class CallFailure:
    """One failed call: the class, the vendor as the driver identified the BMC (None: not yet), the message."""

    error_class: CallErrorClass
    hardware_type: str  # redfish | ipmi
    vendor: str | None
    message: str  # already redacted (DriverError's message)


class CallObserver(Protocol):
    def failed(self, failure: CallFailure) -> None:
        """A call failed (the driver then raises the error; the observer must not)."""

    def identified(self, hardware_type: str, vendor: str) -> None:
        """The driver learnt which vendor the BMC is (so a later failure before identification can be named)."""


def http_class(status: int) -> CallErrorClass:
    """The class of an HTTP error status (400 and up)."""
    if status in (401, 403):
        return CallErrorClass.AUTH
    if status == 429:
        return CallErrorClass.THROTTLED
    return CallErrorClass.HTTP_5XX if status >= 500 else CallErrorClass.HTTP_4XX

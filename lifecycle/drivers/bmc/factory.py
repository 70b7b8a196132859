"""Build the right ``BmcDriver`` for a BMC, and say what a node's BMC can do before asking it.

Why it exists: workflows and the CLI name a BMC by what the inventory says (driver, address,
credentials reference, TLS, system id); one function turns that into a driver, so credential
resolution and the Redfish/IPMI choice live in one place. The Redfish driver is imported only
when asked for, so IPMI users do not load the Redfish stack — which is also why the hardware
types' capabilities are a table here (a test checks it against the driver classes) rather than
read off the classes: planning a rollout over a thousand IPMI nodes must not import Redfish.
"""

from __future__ import annotations

from typing import Literal

from lifecycle.drivers.bmc.base import (
    BmcDriver,
    Capability,
    Credentials,
    not_supported_message,
    resolve_credentials,
)
from lifecycle.drivers.bmc.call_errors import CallObserver
from lifecycle.model.inventory import BmcSpec, Node

DriverName = Literal["redfish", "ipmi"]
DRIVERS: tuple[DriverName, ...] = ("redfish", "ipmi")

_BASE = frozenset({Capability.POWER, Capability.BOOT, Capability.INVENTORY})
# What each hardware type's driver class implements (tests/bmc/test_capabilities.py checks it).
HARDWARE_TYPES: dict[str, frozenset[Capability]] = {
    "redfish": frozenset(Capability),
    "ipmi": _BASE,
}


def capabilities(what: BmcDriver | BmcSpec | Node) -> frozenset[Capability]:
    """What a node's BMC offers: read off a driver, or, without I/O, from its inventory entry."""
    if isinstance(what, BmcDriver):
        return what.capabilities
    spec = what.bmc if isinstance(what, Node) else what
    return HARDWARE_TYPES.get(spec.driver, frozenset())


def supports(what: BmcDriver | BmcSpec | Node, capability: Capability) -> bool:
    """Whether the node's BMC can take a step needing ``capability`` (ask before planning it)."""
    return capability in capabilities(what)


def unsupported_reason(what: BmcDriver | BmcSpec | Node, capability: Capability) -> str | None:
    """None when supported; else the sentence a refusal reports."""
    if supports(what, capability):
        return None
    kind = what.hardware_type if isinstance(what, BmcDriver) else (
        what.bmc if isinstance(what, Node) else what).driver
    return not_supported_message(kind, capability, capabilities(what))


def driver_from_args(driver: str, address: str, credentials: Credentials, *,
                     verify_tls: bool = True, system: str | None = None,
                     timeout: float = 10.0, observer: CallObserver | None = None) -> BmcDriver:
    """A driver for ``address``; raises ValueError on input that names no usable BMC.

    ``observer`` is told of every failed call with its class, and of the vendor once identified.
    """
    if driver == "redfish":
        from lifecycle.drivers.bmc.redfish import RedfishDriver

        return RedfishDriver(address, credentials, verify_tls=verify_tls, system_id=system,
                             timeout=timeout, observer=observer)
    if driver == "ipmi":
        from lifecycle.drivers.bmc.ipmi import IpmiDriver

        if system:
            raise ValueError("--system picks a Redfish system; an IPMI BMC manages one system")
        return IpmiDriver(address, credentials, observer=observer)
    raise ValueError(f"unknown BMC driver {driver!r} (known: {', '.join(DRIVERS)})")


def driver_for(spec: BmcSpec, *, credentials: Credentials | None = None,
               timeout: float = 10.0, observer: CallObserver | None = None) -> BmcDriver:
    """The driver for an inventory BMC; credentials come from its reference unless given.

    Raises ``AuthFailed`` when the reference does not resolve (the message names the
    reference, never a secret).
    """
    creds = credentials or resolve_credentials(spec.credentials, spec.address)
    return driver_from_args(spec.driver, spec.address, creds, verify_tls=spec.verify_tls,
                            system=spec.system, timeout=timeout, observer=observer)

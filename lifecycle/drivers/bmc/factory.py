"""Build the right ``BmcDriver`` for a BMC: from an inventory node's ``BmcSpec`` or from flags.

Why it exists: workflows and the CLI name a BMC by what the inventory says (driver, address,
credentials reference, TLS, system id); one function turns that into a driver, so credential
resolution and the Redfish/IPMI choice live in one place. The Redfish driver is imported only
when asked for, so IPMI users do not load the Redfish stack.
"""

from __future__ import annotations

from typing import Literal

from lifecycle.drivers.bmc.base import BmcDriver, Credentials, resolve_credentials
from lifecycle.model.inventory import BmcSpec

DriverName = Literal["redfish", "ipmi"]
DRIVERS: tuple[DriverName, ...] = ("redfish", "ipmi")


def driver_from_args(driver: str, address: str, credentials: Credentials, *,
                     verify_tls: bool = True, system: str | None = None,
                     timeout: float = 10.0) -> BmcDriver:
    """A driver for ``address``; raises ValueError on input that names no usable BMC."""
    if driver == "redfish":
        from lifecycle.drivers.bmc.redfish import RedfishDriver

        return RedfishDriver(address, credentials, verify_tls=verify_tls, system_id=system,
                             timeout=timeout)
    if driver == "ipmi":
        from lifecycle.drivers.bmc.ipmi import IpmiDriver

        if system:
            raise ValueError("--system picks a Redfish system; an IPMI BMC manages one system")
        return IpmiDriver(address, credentials)
    raise ValueError(f"unknown BMC driver {driver!r} (known: {', '.join(DRIVERS)})")


def driver_for(spec: BmcSpec, *, credentials: Credentials | None = None,
               timeout: float = 10.0) -> BmcDriver:
    """The driver for an inventory BMC; credentials come from its reference unless given.

    Raises ``AuthFailed`` when the reference does not resolve (the message names the
    reference, never a secret).
    """
    creds = credentials or resolve_credentials(spec.credentials, spec.address)
    return driver_from_args(spec.driver, spec.address, creds, verify_tls=spec.verify_tls,
                            system=spec.system, timeout=timeout)

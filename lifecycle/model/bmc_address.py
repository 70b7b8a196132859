"""A BMC address, parsed once into what identifies the BMC: scheme, host, port and system.

Two nodes pointing at one BMC is the most dangerous mistake an inventory can
hold: a power-off meant for one server stops the other. A string comparison
does not see it, because one BMC has many spellings (``https://10.0.0.5``,
``https://10.0.0.5:443/``, ``HTTPS://10.0.0.5/redfish/v1``) and one host
serves both protocols (IPMI on 623 and Redfish on 443 of the same address are
the same controller). :func:`parse` gives every spelling one canonical form,
and :meth:`BmcEndpoint.identity` is what the inventory's duplicate check
compares.

An explicit non-default port names a distinct endpoint (an emulator, a port
forward, a chassis manager fanning out), so ``127.0.0.1:6230`` and
``127.0.0.1:6231`` are two BMCs; a default port means "the host's BMC", and
IPMI and Redfish on their default ports of one host are one BMC. A URL carries
no user, password, query or fragment: credentials come only from the
credentials reference.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

from lifecycle.model import vocab

DEFAULT_PORTS: dict[str, int] = {"https": 443, "http": 80, "ipmi": 623}
# Which schemes each driver speaks; the first is the one an address without a scheme gets.
DRIVER_SCHEMES: dict[str, tuple[str, ...]] = {"redfish": ("https", "http"), "ipmi": ("ipmi",)}
_PATH = re.compile(r"(/[A-Za-z0-9._~%+-]*)*")


@dataclass(frozen=True)
class BmcEndpoint:
    scheme: str
    host: str
    """An IP in canonical spelling, or a lower-case host name."""
    port: int
    path: str = ""

    @property
    def default_port(self) -> bool:
        return self.port == DEFAULT_PORTS[self.scheme]

    def identity(self) -> tuple[str, int | None]:
        """(host, port): the port is None on a default port (one host's BMC, whatever the protocol)."""
        return self.host, None if self.default_port else self.port

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}{self.path}"


def _host(text: str) -> str:
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        return vocab.hostname(text)


def parse(address: str, driver: str) -> BmcEndpoint:
    """Parse ``address`` for ``driver`` (redfish: a URL or host[:port]; ipmi: host[:port] or ipmi://…)."""
    schemes = DRIVER_SCHEMES.get(driver)
    if schemes is None:
        raise ValueError(f"unknown BMC driver (known: {', '.join(DRIVER_SCHEMES)})")
    if not address or any(c.isspace() for c in address):
        raise ValueError("is not a host name, IP address or URL (empty, or contains white space)")
    scheme, sep, rest = address.partition("://")
    if not sep:
        scheme, rest = schemes[0], address
    scheme = scheme.lower()
    if scheme not in schemes:
        want = " or ".join(f"{s}://" for s in schemes)
        raise ValueError(f"scheme must be {want} for driver {driver}")
    authority, slash, path = rest.partition("/")
    path = slash + path
    if any(c in rest for c in "?#"):
        raise ValueError("a BMC address has no query or fragment (credentials come from 'credentials')")
    if "@" in authority:
        raise ValueError("a BMC address has no user or password (credentials come from 'credentials')")
    if path and (scheme == "ipmi" or not _PATH.fullmatch(path)):
        raise ValueError("has a path that is not a plain URL path" if scheme != "ipmi"
                         else "an IPMI address has no path")
    if authority.startswith("["):
        inner, close, port = authority[1:].partition("]")
        if not close or (port and not port.startswith(":")):
            raise ValueError("has an unclosed or malformed [IPv6] address")
        try:
            host = str(ipaddress.IPv6Address(inner))
        except ValueError:
            raise ValueError("has a bracketed host that is not an IPv6 address") from None
        port = port[1:]
    elif authority.count(":") > 1:
        raise ValueError("an IPv6 address must be in brackets: [2001:db8::5]:623")
    else:
        host_text, _, port = authority.partition(":")
        host = _host(host_text)
    if port and not (port.isdigit() and len(port) <= 5 and 0 < int(port) < 65536):
        raise ValueError("has an invalid port")
    path = path.rstrip("/")
    return BmcEndpoint(scheme, host, int(port) if port else DEFAULT_PORTS[scheme], path)

"""Serve one firmware image over HTTP for a BMC's SimpleUpdate, for as long as the update runs.

Why it exists: Redfish SimpleUpdate makes the BMC download the image from a URL, and the
controller's HTTP server (``server.BootServer``, the one that serves boot images) is where
racklife serves files from. This puts the image in a private directory under an unguessable
name, serves it from a BootServer with no boot scripts and no phone-home, and stops when the
update is over. It binds only to loopback or the lab's network (``ALLOWED``): an image server
on a production address is a decision for the operator's controller configuration, not a
side effect of a CLI command.
"""

from __future__ import annotations

import ipaddress
import os
import secrets
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from lifecycle.drivers.boot.server import BootServer, PhoneHomeReport, PhoneHomeVerdict

ALLOWED = (ipaddress.ip_network("127.0.0.0/8"), ipaddress.ip_network("::1/128"),
           ipaddress.ip_network("10.77.0.0/16"))


class _NoBoots:
    """A backend that boots nothing and accepts no phone-home: this server only serves a file."""

    def script_for(self, mac: str) -> str | None:
        return None

    def phone_home(self, report: PhoneHomeReport) -> PhoneHomeVerdict:
        return PhoneHomeVerdict(False, "this server only serves a firmware image")


def check_host(host: str) -> None:
    """ValueError unless ``host`` is an address in ``ALLOWED``."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        raise ValueError(f"serve address {host!r} is not an IP address") from None
    if not any(address in net for net in ALLOWED):
        raise ValueError(f"serve address {host} is not loopback or on the lab network "
                         f"({', '.join(str(n) for n in ALLOWED)})")


@contextmanager
def serve_image(image: Path, host: str = "127.0.0.1", port: int = 0) -> Iterator[str]:
    """Yield the URL the BMC downloads ``image`` from; the server stops on exit."""
    check_host(host)
    if not image.is_file():
        raise ValueError(f"{image}: no such file")
    with tempfile.TemporaryDirectory(prefix="racklife-fw-") as tmp:
        token = secrets.token_urlsafe(16)
        (Path(tmp) / token).mkdir(mode=0o700)
        served = Path(tmp) / token / image.name
        try:
            os.link(image, served)
        except OSError:  # another filesystem, or links refused: copy instead
            shutil.copyfile(image, served)
        with BootServer(_NoBoots(), tmp, host=host, port=port) as server:
            yield server.image_url(f"{token}/{image.name}")

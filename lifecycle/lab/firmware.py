"""What a lab node's "OS" does after a network boot: read its iPXE script, phone home.

The real minimal image does this in busybox (images/minimal/init): it reads
the ``racklife.*`` kernel arguments the iPXE script passed and POSTs its
token, name, image and MACs to the phone-home URL. Simulated nodes do the
same here, so provisioning in the lab runs the real token protocol.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from typing import Protocol

from lifecycle.drivers.boot.render import parse_ipxe_args


class _Booted(Protocol):
    @property
    def ipxe_script(self) -> str | None: ...


class PhoneHomeRefused(RuntimeError):
    pass


def phone_home_payload(script: str, macs: Sequence[str]) -> tuple[str, dict[str, object]]:
    """(URL, JSON body) the booted image sends, from the iPXE script it booted with."""
    args = parse_ipxe_args(script)
    body: dict[str, object] = {
        "token": args.get("token", ""), "node": args.get("node", ""), "image": args.get("image", ""),
        "image_version": args.get("image_version", ""), "macs": [m.lower() for m in macs],
    }
    return args["phone_home"], body


def racklife_phone_home(macs: Sequence[str], timeout_s: float = 10.0,
                        run_in: Callable[[Callable[[], None]], None] | None = None,
                        retry_for_s: float = 120.0) -> Callable[[_Booted], None]:
    """A phone-home callable for a simulated node whose NICs have ``macs``.

    ``run_in`` runs the POST where the node lives (its network namespace).
    Like the minimal image, a node keeps trying while the boot server does not
    answer (a controller being restarted); a refusal (403) is final.
    Booted from local disk (no iPXE script): nothing to report, as on real hardware.
    """

    def call(report: _Booted) -> None:
        if not report.ipxe_script:
            return
        url, body = phone_home_payload(report.ipxe_script, macs)
        req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",  # noqa: S310
                                     headers={"Content-Type": "application/json"})
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

        def post() -> None:
            deadline = time.monotonic() + retry_for_s
            while True:
                try:
                    with opener.open(req, timeout=timeout_s) as resp:
                        resp.read()
                    return
                except urllib.error.HTTPError as exc:
                    detail = exc.read().decode(errors="replace")
                    exc.close()
                    raise PhoneHomeRefused(f"phone-home refused: HTTP {exc.code} {detail}") from None
                except (urllib.error.URLError, OSError):
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(1.0)

        (run_in or (lambda f: f()))(post)

    return call

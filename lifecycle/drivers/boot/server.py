"""The HTTP boot server: iPXE scripts per MAC, image files with range requests, and phone-home.

iPXE and the racklife initramfs speak plain HTTP/1.1, so the standard
library's threading server is enough; what it lacks (byte ranges, a
traversal-proof file root, token-checked phone-home) is here. Decisions
about scripts and tokens belong to a :class:`BootBackend` the caller
supplies (the provisioning workflow's, backed by the store), so this module
imports nothing but the model.
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Protocol
from urllib.parse import unquote

from lifecycle.drivers.boot.render import chain_script

log = logging.getLogger(__name__)

_MAC_PATH = re.compile(r"^/boot/([0-9a-fA-F]{2}(?:[:-][0-9a-fA-F]{2}){5})\.ipxe$")
_RANGE = re.compile(r"^bytes=(\d*)-(\d*)$")
MAX_REPORT_BYTES = 64 * 1024
_HOST_KEY = re.compile(r"^(ssh-ed25519|ecdsa-sha2-nistp(256|384|521)|ssh-rsa) [A-Za-z0-9+/]+={0,3}$")


def host_key(value: object) -> str:
    """A reported SSH host key as ``TYPE BASE64``; anything else (none, a comment, options, junk) is ""."""
    if not isinstance(value, str) or not value.isprintable():  # one line: nothing to smuggle into known_hosts
        return ""
    text = " ".join(value.split()[:2])
    return text if _HOST_KEY.match(text) else ""


@dataclass(frozen=True)
class PhoneHomeReport:
    token: str
    node: str
    image: str
    image_version: str
    macs: tuple[str, ...]
    remote: str
    ssh_host_key: str = ""
    """The SSH host key the booted image made at this boot (``TYPE BASE64``; the maintenance image), or ""."""


@dataclass(frozen=True)
class PhoneHomeVerdict:
    accepted: bool
    reason: str = ""


class BootBackend(Protocol):
    def script_for(self, mac: str) -> str | None:
        """The iPXE script for this boot MAC, or None when no boot is pending for it."""

    def phone_home(self, report: PhoneHomeReport) -> PhoneHomeVerdict:
        """Authenticate the token (single use) and record the report."""


def parse_range(header: str, size: int) -> tuple[int, int] | None:
    """(first, last) inclusive for one ``bytes=`` range; None when unsatisfiable."""
    m = _RANGE.match(header.strip())
    if not m or (m.group(1) == "" and m.group(2) == ""):
        return None
    if m.group(1) == "":
        n = int(m.group(2))
        if n == 0:
            return None
        return max(0, size - n), size - 1
    first = int(m.group(1))
    last = int(m.group(2)) if m.group(2) else size - 1
    if first >= size or last < first:
        return None
    return first, min(last, size - 1)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:
        log.debug("%s %s", self.client_address[0], format % args)

    def _send(self, status: int, body: bytes, ctype: str = "text/plain; charset=utf-8",
              headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def do_HEAD(self) -> None:
        self.do_GET()

    def do_GET(self) -> None:
        path = unquote(self.path.split("?", 1)[0])
        if path == "/boot.ipxe":
            self._send(200, chain_script(self.server.base_url).encode())
            return
        m = _MAC_PATH.match(path)
        if m:
            mac = m.group(1).lower().replace("-", ":")
            script = self.server.backend.script_for(mac)
            if script is None:
                self._send(404, b"no boot pending for this MAC\n")
            else:
                self._send(200, script.encode())
            return
        if path.startswith("/images/"):
            self._file(path.removeprefix("/images/"))
            return
        self._send(404, b"not found\n")

    def _file(self, rel: str) -> None:
        root = self.server.images_dir
        if root is None:
            self._send(404, b"no images served\n")
            return
        target = (root / rel).resolve()
        if not target.is_relative_to(root) or not target.is_file():
            self._send(404, b"not found\n")
            return
        size = target.stat().st_size
        first, last = 0, size - 1
        status = 200
        headers = {"Accept-Ranges": "bytes"}
        rng = self.headers.get("Range")
        if rng:
            parsed = parse_range(rng, size)
            if parsed is None:
                self._send(416, b"", headers={"Content-Range": f"bytes */{size}"})
                return
            first, last = parsed
            status = 206
            headers["Content-Range"] = f"bytes {first}-{last}/{size}"
        length = last - first + 1 if size else 0
        self.send_response(status)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(length))
        for k, v in headers.items():
            self.send_header(k, v)
        self.end_headers()
        if self.command == "HEAD" or length == 0:
            return
        with target.open("rb") as f:
            f.seek(first)
            left = length
            while left > 0:
                chunk = f.read(min(1 << 20, left))
                if not chunk:
                    break
                self.wfile.write(chunk)
                left -= len(chunk)

    def do_POST(self) -> None:
        if self.path.split("?", 1)[0] != "/phone-home":
            self._send(404, b"not found\n")
            return
        try:
            length = int(self.headers.get("Content-Length", "0"))
        except ValueError:
            length = -1
        if not 0 < length <= MAX_REPORT_BYTES:
            self._send(400, b"bad Content-Length\n")
            return
        try:
            data = json.loads(self.rfile.read(length))
            report = PhoneHomeReport(
                token=str(data["token"]), node=str(data["node"]), image=str(data.get("image", "")),
                image_version=str(data.get("image_version", "")),
                macs=tuple(str(m).lower() for m in data.get("macs", [])),
                remote=self.client_address[0], ssh_host_key=host_key(data.get("ssh_host_key")))
        except (ValueError, KeyError, TypeError):
            self._send(400, b"malformed phone-home report\n")
            return
        verdict = self.server.backend.phone_home(report)
        if verdict.accepted:
            self._send(200, b'{"accepted": true}\n', "application/json")
        else:
            # The token is never logged: it is a credential until it is spent.
            log.warning("phone-home refused from %s for node %s: %s", report.remote, report.node, verdict.reason)
            body = json.dumps({"accepted": False, "reason": verdict.reason}).encode()
            self._send(HTTPStatus.FORBIDDEN, body, "application/json")


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    backend: BootBackend
    images_dir: Path | None
    base_url: str


class BootServer:
    """Serve boot scripts, images and phone-home on ``host:port`` (port 0: pick a free one)."""

    def __init__(self, backend: BootBackend, images_dir: str | os.PathLike[str] | None = None,
                 host: str = "127.0.0.1", port: int = 0, advertise: str | None = None) -> None:
        self._httpd = _Server((host, port), _Handler)
        self._httpd.backend = backend
        self._httpd.images_dir = Path(images_dir).resolve() if images_dir else None
        bound_host, bound_port = self._httpd.server_address[:2]
        host_s = bound_host.decode() if isinstance(bound_host, bytes) else str(bound_host)
        self.url = advertise or f"http://{host_s}:{bound_port}"
        self._httpd.base_url = self.url
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    def advertise_as(self, url: str) -> None:
        """The base URL clients use (e.g. ``http://10.0.2.2:PORT`` from a QEMU user-mode guest)."""
        self.url = url.rstrip("/")
        self._httpd.base_url = self.url

    @property
    def phone_home_url(self) -> str:
        return f"{self.url}/phone-home"

    def image_url(self, rel: str) -> str:
        return f"{self.url}/images/{rel}"

    def start(self) -> BootServer:
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="boot-server", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread:
            self._thread.join(5)

    def __enter__(self) -> BootServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

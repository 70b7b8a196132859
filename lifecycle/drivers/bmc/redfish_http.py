"""One keep-alive HTTP(S) connection to one BMC, on the standard library's ``http.client``.

Why not DMTF's python-redfish-library over requests and urllib3, as before: a
request through those three layers cost about 1 ms of the controller's CPU,
against 0.16 ms through ``http.client`` itself (a GET of a ComputerSystem from
the project's emulator, on loopback), and provisioning sends about 21 requests
per node: the largest part of the controller's CPU per node
(``bench/provision.py``; docs/provisioning.md, Throughput). racklife used
little of what they offer, and that little is here:

* TLS verified against ``REQUESTS_CA_BUNDLE`` or ``CURL_CA_BUNDLE`` when set,
  else certifi's bundle (what requests did), or not verified when asked;
* the environment's proxy for the BMC's address (``https_proxy``/``http_proxy``,
  ``no_proxy`` honoured; an ``http://`` proxy: HTTPS through ``CONNECT``);
* one timeout for the connection and for each read;
* a connection the BMC closed while idle is opened again before a request is
  sent, never after: every request is sent once (retrying is the workflow
  step layer's decision);
* a GET redirected within the same BMC is followed (a few times at most).

Failures are :class:`HttpFailure` with a kind (timeout, connection, TLS);
``redfish_transport`` turns them and the HTTP statuses into racklife's errors.
"""

from __future__ import annotations

import base64
import http.client
import os
import select
import ssl
import urllib.request
import weakref
from dataclasses import dataclass
from typing import Literal
from urllib.parse import unquote, urlsplit
from urllib.request import proxy_bypass_environment  # type: ignore[attr-defined]  # not in typeshed

import certifi

REDIRECTS = frozenset({301, 302, 303, 307, 308})
MAX_REDIRECTS = 5


class HttpFailure(Exception):
    """No HTTP answer: the kind says why (the message names no secret)."""

    def __init__(self, kind: Literal["timeout", "connection", "tls"], detail: str) -> None:
        super().__init__(detail)
        self.kind = kind
        self.detail = detail


@dataclass(frozen=True)
class Response:
    status: int
    headers: dict[str, str]  # names in lower case
    data: bytes


def tls_context(verify: bool) -> ssl.SSLContext:
    if not verify:
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        return ctx
    bundle = os.environ.get("REQUESTS_CA_BUNDLE") or os.environ.get("CURL_CA_BUNDLE")
    return ssl.create_default_context(cafile=bundle or certifi.where())


def environ_proxy(base_url: str) -> str | None:
    """The proxy the environment names for ``base_url`` (None: direct, or ``no_proxy`` covers it)."""
    parts = urlsplit(base_url)
    proxies = urllib.request.getproxies_environment()
    if not proxies or proxy_bypass_environment(parts.hostname or "", proxies):
        return None
    return proxies.get(parts.scheme) or proxies.get("all")


class Connection:
    """HTTP/1.1 to one BMC (``base_url``: scheme://host[:port]), one request at a time."""

    def __init__(self, base_url: str, *, timeout: float, verify_tls: bool) -> None:
        parts = urlsplit(base_url)
        self._https = parts.scheme == "https"
        self._host = parts.hostname or ""
        self._port = parts.port or (443 if self._https else 80)
        self._origin = f"{parts.scheme}://{parts.netloc}"
        self._timeout = timeout
        self._tls = tls_context(verify_tls) if self._https else None
        self._proxy = environ_proxy(base_url)
        self._proxy_headers: dict[str, str] = {}  # an http:// BMC through a proxy: its credentials
        # The open connection, in a list a finalizer can close when the driver is dropped
        # unclosed (as urllib3's pools do), so no socket is left for the garbage collector.
        self._slot: list[http.client.HTTPConnection] = []
        weakref.finalize(self, _close_all, self._slot)

    def _open(self) -> http.client.HTTPConnection:
        if self._proxy is None:
            if self._https:
                return http.client.HTTPSConnection(self._host, self._port, timeout=self._timeout, context=self._tls)
            return http.client.HTTPConnection(self._host, self._port, timeout=self._timeout)
        proxy = urlsplit(self._proxy if "://" in self._proxy else f"http://{self._proxy}")
        if proxy.scheme != "http":
            raise HttpFailure("connection", f"proxy {proxy.scheme}://{proxy.hostname}: only http:// proxies are "
                              "supported for BMCs")
        auth = {}
        if proxy.username:
            pair = f"{unquote(proxy.username)}:{unquote(proxy.password or '')}"
            auth = {"Proxy-Authorization": "Basic " + base64.b64encode(pair.encode()).decode()}
        conn: http.client.HTTPConnection
        if self._https:
            conn = http.client.HTTPSConnection(proxy.hostname or "", proxy.port or 80, timeout=self._timeout,
                                               context=self._tls)
            conn.set_tunnel(self._host, self._port, headers=auth)
        else:
            conn = http.client.HTTPConnection(proxy.hostname or "", proxy.port or 80, timeout=self._timeout)
            self._proxy_headers = auth
        return conn

    def _connection(self) -> http.client.HTTPConnection:
        conn = self._slot[0] if self._slot else None
        if conn is not None and conn.sock is not None:
            # An idle keep-alive connection is readable only when the BMC closed it (or sent
            # something unasked): open a new one before sending, as urllib3 does.
            # poll, not select: a controller with a thousand BMCs has file descriptors past 1024.
            probe = select.poll()
            probe.register(conn.sock, select.POLLIN)
            if probe.poll(0):
                self.close()
                conn = None
        if conn is None:
            conn = self._open()
            self._slot.append(conn)
        return conn

    def request(self, method: str, path: str, body: bytes | None, headers: dict[str, str]) -> Response:
        """Send once; follow a GET's redirects within this BMC; raise HttpFailure when no answer came."""
        for _ in range(MAX_REDIRECTS + 1):
            resp = self._send(method, path, body, headers)
            location = resp.headers.get("location", "")
            if method != "GET" or resp.status not in REDIRECTS or not location:
                return resp
            moved = urlsplit(location)
            if moved.netloc and f"{moved.scheme}://{moved.netloc}" != self._origin:
                return resp  # another host: the session token is not sent there
            path = moved.path + (f"?{moved.query}" if moved.query else "")
        return resp

    def _send(self, method: str, path: str, body: bytes | None, headers: dict[str, str]) -> Response:
        try:
            conn = self._connection()
            target = path
            if self._proxy is not None and not self._https:
                target = self._origin + path
                headers = {**headers, **self._proxy_headers}
            conn.request(method, target, body=body, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
        except ssl.SSLError as exc:
            self.close()
            raise HttpFailure("tls", f"TLS: {exc.reason or type(exc).__name__}") from None
        except TimeoutError:
            self.close()
            raise HttpFailure("timeout", "timed out") from None
        except (OSError, http.client.HTTPException) as exc:
            self.close()
            raise HttpFailure("connection", type(exc).__name__) from None
        if resp.will_close:
            self.close()
        return Response(resp.status, {k.lower(): v for k, v in resp.getheaders()}, data)

    def close(self) -> None:
        _close_all(self._slot)


def _close_all(slot: list[http.client.HTTPConnection]) -> None:
    while slot:
        slot.pop().close()

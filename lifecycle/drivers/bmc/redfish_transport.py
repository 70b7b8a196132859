"""The one place the Redfish driver does I/O: sessions, errors and their translation.

Every request goes through ``RedfishTransport.request``, over one keep-alive
connection per BMC (``redfish_http``: the standard library's ``http.client``;
DMTF's python-redfish-library over requests cost five times the CPU per
request), and this class owns:

* authentication: a Redfish session (POST to ``Links.Sessions``) or HTTP Basic,
  with one re-login when a session has expired (401) and never a second;
* no retries: each logical request is sent once. Retrying is the workflow step
  layer's decision (``lifecycle/workflows/retry.py``), because only a step
  knows whether repeating it is safe;
* translation of transport failures and HTTP errors into ``lifecycle.drivers.errors``, in
  ``_send`` (no answer) and ``_checked`` (an HTTP status): a connection refused
  or timed out is ``Unreachable``, 429 and 503 are ``Busy`` with the BMC's
  ``Retry-After``, another 5xx is ``Busy`` only for an idempotent method (a
  POST such as a reset may have been applied) — those are temporary; an
  untrusted certificate, 401/403, other 4xx are permanent;
* the class of each failure (``CallErrorClass``: timeout, connection, TLS, auth, HTTP 4xx/5xx,
  throttled, protocol), told to ``on_failure`` as the error is raised, for the metrics;
* secrecy: the password and session token never reach a message or a log line.
"""

from __future__ import annotations

import base64
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import urlsplit

from urllib3.filepost import encode_multipart_formdata

from lifecycle.drivers.bmc.base import Credentials
from lifecycle.drivers.bmc.call_errors import CallErrorClass, http_class
from lifecycle.drivers.bmc.redfish_http import Connection, HttpFailure, Response
from lifecycle.drivers.errors import (
    AuthFailed,
    Busy,
    DriverError,
    NotSupported,
    OperationFailed,
    Unreachable,
    Untrusted,
)

LOG = logging.getLogger(__name__)
Json = dict[str, Any]
# A JSON object, or the parts of a multipart/form-data body (the library encodes those).
Body = Json | list[tuple[str, Any]]
FailureHook = Callable[[CallErrorClass, DriverError], None]


class Clock(Protocol):
    def monotonic(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...


class SystemClock:
    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


@dataclass(frozen=True)
class TaskPolling:
    """How often to poll a BMC task (firmware update, secure erase) and for how long."""

    poll_s: float = 2.0
    timeout_s: float = 3600.0


# Methods a BMC applies at most once however often they are sent: a 5xx to one of these
# can be retried; to a POST (an action) it cannot, since the action may have run.
IDEMPOTENT_METHODS = frozenset({"GET", "HEAD", "PUT", "PATCH", "DELETE"})
SENT_METHODS = frozenset({"GET", "POST", "PATCH", "DELETE"})


def _path(path: str) -> str:
    """The request target: a path (a BMC's absolute URL of itself, as in a Location, is cut to its path)."""
    if "://" in path:
        parts = urlsplit(path)
        path = parts.path + (f"?{parts.query}" if parts.query else "")
    return path.replace("//", "/") or "/"


def _retry_after(headers: dict[str, str]) -> float | None:
    value = headers.get("retry-after", "").strip()
    return float(value) if value.isdigit() else None


@dataclass
class Reply:
    status: int
    body: Json
    headers: dict[str, str]


def _message(body: Json) -> str | None:
    """The BMC's own words from a Redfish error body."""
    err = body.get("error")
    if not isinstance(err, dict):
        return None
    infos = err.get("@Message.ExtendedInfo")
    if isinstance(infos, list) and infos and isinstance(infos[0], dict):
        text = infos[0].get("Message") or infos[0].get("MessageId")
        if text:
            return str(text)
    return str(err.get("message") or err.get("code") or "") or None


class RedfishTransport:
    """A logged-in Redfish client for one BMC."""

    def __init__(self, base_url: str, credentials: Credentials, *, verify_tls: bool,
                 timeout: float, auth: str, target: str, on_failure: FailureHook | None = None) -> None:
        self.base_url = base_url
        self._on_failure = on_failure
        self.target = target
        self._credentials = credentials
        self._auth = auth
        self._http = Connection(base_url, timeout=timeout, verify_tls=verify_tls)
        self._auth_header: dict[str, str] = {}  # X-Auth-Token (a session) or Authorization (Basic)
        self._session_location: str | None = None
        self._root: Json | None = None
        self._logged_in = False
        self.calls = 0  # HTTP requests sent, for tests that count (no retry storms)

    # --- public ---------------------------------------------------------------------------

    @property
    def root(self) -> Json:
        if self._root is None:
            self._root = self._checked("GET", "/redfish/v1/", self._send("GET", "/redfish/v1/"))
        return self._root

    @property
    def seen_root(self) -> Json | None:
        """The service root if it was read (no request)."""
        return self._root

    def get(self, path: str) -> Json:
        return self.request("GET", path).body

    def request(self, method: str, path: str, body: Body | None = None,
                headers: dict[str, str] | None = None) -> Reply:
        """Send with authentication; re-login once on 401; raise DriverError on failure."""
        reply = self._authed(method, path, body, headers)
        self._checked(method, path, reply)
        return reply

    def upload(self, path: str, parts: list[tuple[str, tuple[str | None, str | bytes, str]]]
               ) -> Reply:
        """POST a multipart/form-data body (Redfish ``MultipartHttpPushUri``); sent once."""
        return self.request("POST", path, list(parts), {"Content-Type": "multipart/form-data"})

    def fetch(self, path: str, absent: frozenset[int] = frozenset({404})) -> Json | None:
        """GET that returns None when the BMC answers one of the ``absent`` statuses."""
        reply = self._authed("GET", path)
        if reply.status in absent:
            return None
        return self._checked("GET", path, reply)

    def _authed(self, method: str, path: str, body: Body | None = None,
                headers: dict[str, str] | None = None) -> Reply:
        if not self._logged_in:
            self.login()
        reply = self._send(method, path, body, headers)
        if reply.status == 401 and self._auth == "session":
            LOG.info("%s: session rejected (expired?); logging in again", self.target)
            self._auth_header = {}
            self._logged_in = False
            self.login()
            reply = self._send(method, path, body, headers)
        return reply

    def login(self) -> None:
        root = self.root
        if self._auth == "session" and "Sessions" not in root.get("Links", {}) \
                and "SessionService" not in root:
            LOG.info("%s: no SessionService; using HTTP Basic", self.target)
            self._auth = "basic"
        if self._auth == "basic":
            pair = f"{self._credentials.username}:{self._credentials.password}"
            self._auth_header = {"Authorization": "Basic " + base64.b64encode(pair.encode()).decode()}
            self._logged_in = True
            return
        sessions = root.get("Links", {}).get("Sessions", {}).get(
            "@odata.id", "/redfish/v1/SessionService/Sessions")
        reply = self._send("POST", sessions, {"UserName": self._credentials.username,
                                              "Password": self._credentials.password})
        token = reply.headers.get("x-auth-token")
        if reply.status in (401, 403):
            raise self._failed(CallErrorClass.AUTH,
                               AuthFailed(self.target, "the BMC refused the credentials (session login)"))
        if reply.status not in (200, 201, 202, 204) or not token:
            detail = _message(reply.body) or f"HTTP {reply.status}"
            kind = http_class(reply.status) if reply.status >= 400 else CallErrorClass.PROTOCOL
            raise self._failed(kind, OperationFailed(self.target, f"session login failed: {detail}"))
        self._auth_header = {"X-Auth-Token": token}
        self._session_location = reply.headers.get("location") or reply.body.get("@odata.id")
        self._logged_in = True

    def close(self) -> None:
        """Delete the session (best effort) and close connections."""
        location = self._session_location
        if self._logged_in and self._auth == "session" and location:
            try:
                self._send("DELETE", urlsplit(location).path)
            except DriverError as exc:
                LOG.info("%s: logout failed: %s", self.target, exc.message)
        self._auth_header = {}
        self._session_location = None
        self._logged_in = False
        self._http.close()

    # --- internals --------------------------------------------------------------------------

    def _failed(self, kind: CallErrorClass, error: DriverError) -> DriverError:
        """``error``, after telling the hook what class of failure it is (the caller raises it)."""
        if self._on_failure is not None:
            self._on_failure(kind, error)
        return error

    def _send(self, method: str, path: str, body: Body | None = None,
              headers: dict[str, str] | None = None) -> Reply:
        """One request, sent once; no answer becomes ``Unreachable`` (or ``Untrusted``)."""
        if method not in SENT_METHODS:
            raise ValueError(f"unsupported HTTP method {method}")
        self.calls += 1
        sent = {"Accept": "*/*", "OData-Version": "4.0", "User-Agent": "racklife", **(headers or {}),
                **self._auth_header}
        data: bytes | None = None
        if body is None and method == "POST":
            body = {}
        if isinstance(body, list):  # multipart/form-data parts, in order
            data, sent["Content-Type"] = encode_multipart_formdata(body)
        elif body is not None:
            data = json.dumps(body).encode()
            sent["Content-Type"] = "application/json"
        try:
            resp = self._http.request(method, _path(path), data, sent)
        except HttpFailure as exc:
            if exc.kind == "tls":
                raise self._failed(CallErrorClass.TLS, Untrusted(
                    self.target, "TLS verification failed (the BMC's certificate is not trusted; "
                    "verify_tls=False to accept it)")) from None
            timed_out = exc.kind == "timeout"
            raise self._failed(CallErrorClass.TIMEOUT if timed_out else CallErrorClass.CONNECTION, Unreachable(
                self.target, f"{method} {path}: {'timed out' if timed_out else 'connection failed'}")) from None
        return self._reply(resp, method, path)

    def _reply(self, resp: Response, method: str, path: str) -> Reply:
        body: Json = {}
        if resp.data:
            try:
                parsed = json.loads(resp.data)
            except ValueError:  # not JSON, or not UTF-8
                if resp.status < 400:
                    raise self._failed(CallErrorClass.PROTOCOL, OperationFailed(
                        self.target, f"{method} {path}: the BMC sent invalid JSON")) from None
                parsed = {}
            body = parsed if isinstance(parsed, dict) else {}
        LOG.debug("%s: %s %s -> %s", self.target, method, path, resp.status)
        return Reply(resp.status, body, resp.headers)

    def _checked(self, method: str, path: str, reply: Reply) -> Json:
        status = reply.status
        if status < 400:
            return reply.body
        said = _message(reply.body)
        what = f"{method} {path}: HTTP {status}" + (f": {said}" if said else "")
        error: DriverError
        if status in (401, 403):
            error = AuthFailed(self.target, what)
        elif status in (404, 405, 501):
            error = NotSupported(self.target, what)
        elif status in (429, 503) or (status >= 500 and method in IDEMPOTENT_METHODS):
            error = Busy(self.target, what, delay_s=_retry_after(reply.headers))
        else:
            error = OperationFailed(self.target, what)
        raise self._failed(http_class(status), error)

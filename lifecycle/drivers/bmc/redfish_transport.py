"""The one place the Redfish driver does I/O: sessions, retries and error translation.

Every request goes through ``RedfishTransport.request``, which uses DMTF's
python-redfish-library for the HTTP exchange and session headers, and owns:

* authentication: a Redfish session (POST to ``Links.Sessions``) or HTTP Basic,
  with one re-login when a session has expired (401) and never a second;
* no retries: each logical request is sent once (the library's own retry loop,
  which sleeps a fixed second, is turned off). Retrying is the workflow step
  layer's decision (``lifecycle/workflows/retry.py``), because only a step
  knows whether repeating it is safe;
* translation of library and HTTP errors into ``lifecycle.drivers.errors``, in
  ``_send`` (no answer) and ``_checked`` (an HTTP status): a connection refused
  or timed out is ``Unreachable``, 429 and 503 are ``Busy`` with the BMC's
  ``Retry-After``, another 5xx is ``Busy`` only for an idempotent method (a
  POST such as a reset may have been applied) — those are temporary; an
  untrusted certificate, 401/403, other 4xx are permanent;
* secrecy: the password and session token never reach a message or a log line
  (the library logs request headers at DEBUG; a filter masks the token).
"""

from __future__ import annotations

import base64
import logging
import os
import re
import time
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import urlsplit

import redfish
import requests
from redfish.rest.v1 import HttpClient, RestResponse, RetriesExhaustedError

from lifecycle.drivers.bmc.base import Credentials
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


def _retry_after(headers: dict[str, str]) -> float | None:
    value = headers.get("retry-after", "").strip()
    return float(value) if value.isdigit() else None


class _MaskToken(logging.Filter):
    """The library logs request headers at DEBUG; Authorization is masked there, tokens not."""

    pattern = re.compile(r"(X-Auth-Token:\s*)\S+", re.IGNORECASE)

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno <= logging.DEBUG:
            record.msg = self.pattern.sub(r"\1<REDACTED>", record.getMessage())
            record.args = ()
        return True


logging.getLogger("redfish.rest.v1").addFilter(_MaskToken())


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
                 timeout: float, auth: str, target: str) -> None:
        self.base_url = base_url
        self.target = target
        self._credentials = credentials
        self._auth = auth
        self._client: HttpClient = redfish.redfish_client(
            base_url=base_url, timeout=timeout, max_retry=0, check_connectivity=False,
            proxies=requests.utils.get_environ_proxies(base_url))
        # requests reads the environment (proxies, CA bundle, ~/.netrc) again on every request
        # when trust_env is on: a walk over os.environ that cost more CPU than the HTTP exchange
        # itself. Both are read once here instead; ~/.netrc never adds credentials to a BMC.
        self._client._session.trust_env = False
        # The library verifies TLS only when given a CA file; True makes requests verify
        # against its default bundle, or REQUESTS_CA_BUNDLE / CURL_CA_BUNDLE when set.
        bundle = os.environ.get("REQUESTS_CA_BUNDLE") or os.environ.get("CURL_CA_BUNDLE")
        self._client.cafile = (bundle or True) if verify_tls else None
        self._root: Json | None = None
        self._logged_in = False
        self.calls = 0  # HTTP requests sent, for tests that count (no retry storms)

    # --- public ---------------------------------------------------------------------------

    @property
    def root(self) -> Json:
        if self._root is None:
            self._root = self._checked("GET", "/redfish/v1/", self._send("GET", "/redfish/v1/"))
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
            self._client.set_session_key(None)
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
            self._client.set_authorization_key(
                "Basic " + base64.b64encode(pair.encode()).decode())
            self._logged_in = True
            return
        sessions = root.get("Links", {}).get("Sessions", {}).get(
            "@odata.id", "/redfish/v1/SessionService/Sessions")
        reply = self._send("POST", sessions, {"UserName": self._credentials.username,
                                              "Password": self._credentials.password})
        token = reply.headers.get("x-auth-token")
        if reply.status in (401, 403):
            raise AuthFailed(self.target, "the BMC refused the credentials (session login)")
        if reply.status not in (200, 201, 202, 204) or not token:
            detail = _message(reply.body) or f"HTTP {reply.status}"
            raise OperationFailed(self.target, f"session login failed: {detail}")
        self._client.set_session_key(token)
        self._client.set_session_location(
            reply.headers.get("location") or reply.body.get("@odata.id"))
        self._logged_in = True

    def close(self) -> None:
        """Delete the session (best effort) and close connections."""
        location = self._client.get_session_location()
        if self._logged_in and self._auth == "session" and location:
            try:
                self._send("DELETE", urlsplit(location).path)
            except DriverError as exc:
                LOG.info("%s: logout failed: %s", self.target, exc.message)
        self._client.set_session_key(None)
        self._client.set_session_location(None)
        self._logged_in = False
        self._client.logout()  # with no session left, this only closes the connections

    # --- internals --------------------------------------------------------------------------

    def _send(self, method: str, path: str, body: Body | None = None,
              headers: dict[str, str] | None = None) -> Reply:
        """One request, sent once; no answer becomes ``Unreachable`` (or ``Untrusted``)."""
        self.calls += 1
        try:
            resp = self._call(method, path, body, dict(headers or {}))
        except RetriesExhaustedError as exc:
            cause = exc.__cause__
            if isinstance(cause, requests.exceptions.SSLError):
                raise Untrusted(self.target, "TLS verification failed (the BMC's certificate "
                                "is not trusted; verify_tls=False to accept it)") from None
            kind = "timed out" if isinstance(cause, requests.exceptions.Timeout) \
                else "connection failed"
            raise Unreachable(self.target, f"{method} {path}: {kind}") from None
        except requests.exceptions.RequestException as exc:
            raise Unreachable(self.target, f"{method} {path}: {type(exc).__name__}") from None
        return self._reply(resp, method, path)

    def _call(self, method: str, path: str, body: Body | None,
              headers: dict[str, str]) -> RestResponse:
        client = self._client
        if method == "GET":
            return client.get(path, headers=headers)
        if method == "POST":
            return client.post(path, body=body if body is not None else {}, headers=headers)
        if method == "PATCH":
            return client.patch(path, body=body, headers=headers)
        if method == "DELETE":
            return client.delete(path, headers=headers)
        raise ValueError(f"unsupported HTTP method {method}")

    def _reply(self, resp: RestResponse, method: str, path: str) -> Reply:
        headers = {k.lower(): v for k, v in resp.getheaders()}
        body: Json = {}
        if resp.read:
            try:
                parsed = resp.dict
            except Exception:  # the library raises its JsonDecodingError or ValueError
                if resp.status < 400:
                    raise OperationFailed(self.target, f"{method} {path}: the BMC sent "
                                          "invalid JSON") from None
                parsed = {}
            body = parsed if isinstance(parsed, dict) else {}
        LOG.debug("%s: %s %s -> %s", self.target, method, path, resp.status)
        return Reply(int(resp.status), body, headers)

    def _checked(self, method: str, path: str, reply: Reply) -> Json:
        status = reply.status
        if status < 400:
            return reply.body
        said = _message(reply.body)
        what = f"{method} {path}: HTTP {status}" + (f": {said}" if said else "")
        if status in (401, 403):
            raise AuthFailed(self.target, what)
        if status in (404, 405, 501):
            raise NotSupported(self.target, what)
        if status in (429, 503) or (status >= 500 and method in IDEMPOTENT_METHODS):
            raise Busy(self.target, what, delay_s=_retry_after(reply.headers))
        raise OperationFailed(self.target, what)

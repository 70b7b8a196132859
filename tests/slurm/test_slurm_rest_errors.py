"""slurmrestd's HTTP errors at the driver's edge: temporary (5xx, 429 with Retry-After) or permanent.

A real HTTP exchange with the real client (``RestClient``) against a loopback server that
answers each path with the status it names.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from lifecycle.drivers.errors import AuthFailed, Busy, DriverError, NotSupported, OperationFailed, Unreachable
from lifecycle.drivers.slurm.runner import RestClient

# What slurmrestd 22.05.8 (the lab's, openapi v0.0.38) answers GET /nodes with a refused
# token: HTTP 500 and this body (captured from tests/slurm's lab cluster).
REFUSED_TOKEN_22_05 = (b'{"meta": {"plugin": {"type": "openapi/v0.0.38", "name": "Slurm OpenAPI v0.0.38"}, '
                       b'"Slurm": {"version": {"major": 22, "micro": 8, "minor": 5}, "release": "22.05.8"}}, '
                       b'"errors": [{"error": "Unspecified error", "errno": -1}], "nodes": []}')
NO_CONTROLLER = b'{"errors": [{"error": "Unable to contact slurm controller (connect failure)", "errno": 1007}]}'
BODIES = {"refused-token": REFUSED_TOKEN_22_05, "no-controller": NO_CONTROLLER}


class _Status(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        parts = self.path.rstrip("/").split("/")
        code, body = int(parts[-1]), BODIES.get(parts[-2], b"{}")
        self.send_response(code)
        if code in (429, 503):
            self.send_header("Retry-After", "5")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def rest() -> Iterator[RestClient]:
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Status)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield RestClient(f"http://127.0.0.1:{srv.server_address[1]}", "jwt-not-a-secret")
    srv.shutdown()
    srv.server_close()
    t.join(5)


@pytest.mark.parametrize(("code", "kind", "delay"), [
    (500, Busy, None),
    (502, Busy, None),
    (503, Busy, 5.0),
    (429, Busy, 5.0),
    (401, AuthFailed, None),
    (404, NotSupported, None),
    (400, OperationFailed, None),
])
def test_rest_status_says_whether_a_retry_can_help(rest: RestClient, code: int, kind: type[DriverError],
                                                   delay: float | None) -> None:
    with pytest.raises(kind) as caught:
        rest.get(f"status/{code}")
    assert type(caught.value) is kind
    assert caught.value.retryable is (kind is Busy)
    assert caught.value.delay_s == delay
    assert "jwt-not-a-secret" not in str(caught.value)


@pytest.mark.parametrize(("path", "kind"), [
    ("refused-token/500", OperationFailed),  # no retry can fix a refused token
    ("no-controller/500", Unreachable),
])
def test_slurmrestds_own_words_decide_a_500(rest: RestClient, path: str, kind: type[DriverError]) -> None:
    with pytest.raises(kind) as caught:
        rest.get(path)
    assert type(caught.value) is kind and "HTTP 500" in caught.value.message

"""The Redfish transport's own HTTP connection (redfish_http) against a real HTTP/1.1 server.

A BMC may close a keep-alive connection while it is idle without saying so
(no ``Connection: close``); the next request must go out on a new connection,
once, not fail and not be sent twice. A GET the BMC redirects within itself is
followed; a redirect to another host is not (the session token stays home).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from lifecycle.drivers.bmc.base import Credentials
from lifecycle.drivers.bmc.redfish_transport import RedfishTransport

ROOT = {"@odata.id": "/redfish/v1/", "Systems": {"@odata.id": "/redfish/v1/Systems"}}


class Bmc(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    seen: list[tuple[str, str, int]] = []  # (method, path, client port) per request served
    drop_idle = False

    def do_GET(self) -> None:
        self.seen.append(("GET", self.path, self.client_address[1]))
        if self.path == "/old":
            self._answer(301, {}, {"Location": "/redfish/v1/"})
        elif self.path == "/away":
            self._answer(302, {}, {"Location": "http://192.0.2.1/redfish/v1/"})
        else:
            self._answer(200, ROOT)
        # Keep-alive by the headers, closed by the BMC as soon as it is idle.
        self.close_connection = self.drop_idle

    def _answer(self, status: int, body: dict[str, object], headers: dict[str, str] | None = None) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:
        return


class Server(ThreadingHTTPServer):
    daemon_threads = True
    closed = threading.Semaphore(0)  # released each time the BMC has closed a connection

    def shutdown_request(self, request: object) -> None:
        super().shutdown_request(request)  # type: ignore[arg-type]
        self.closed.release()


@pytest.fixture
def server() -> Iterator[Server]:
    Bmc.seen = []
    Server.closed = threading.Semaphore(0)
    server = Server(("127.0.0.1", 0), Bmc)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        Bmc.drop_idle = False
        server.shutdown()
        server.server_close()


def transport(url: str) -> RedfishTransport:
    return RedfishTransport(url, Credentials("admin", "pw"), verify_tls=False, timeout=5, auth="basic", target=url)


@pytest.fixture
def bmc(server: Server) -> str:
    return f"http://127.0.0.1:{server.server_address[1]}"


@pytest.mark.parametrize("drop_idle", [False, True])
def test_a_connection_the_bmc_closed_while_idle_is_reopened_and_each_request_sent_once(
        bmc: str, server: Server, drop_idle: bool) -> None:
    Bmc.drop_idle = drop_idle
    t = transport(bmc)
    try:
        t.login()  # reads the service root
        if drop_idle:
            assert server.closed.acquire(timeout=10)
        for _ in range(3):
            assert t.get("/redfish/v1/Systems") == ROOT
            if drop_idle:  # idle until the BMC has closed it (a close racing a send is not this case)
                assert server.closed.acquire(timeout=10)
    finally:
        t.close()
    assert [p for _, p, _ in Bmc.seen] == ["/redfish/v1/"] + ["/redfish/v1/Systems"] * 3
    assert t.calls == 4
    ports = {port for _, _, port in Bmc.seen}
    assert len(ports) == (4 if drop_idle else 1)  # kept alive, or a new connection per request


def test_a_get_redirected_within_the_bmc_is_followed_and_elsewhere_not(bmc: str) -> None:
    t = transport(bmc)
    try:
        assert t.get("/old") == ROOT
        reply = t.request("GET", "/away")
    finally:
        t.close()
    assert reply.status == 302 and reply.body == {}
    assert [p for _, p, _ in Bmc.seen] == ["/redfish/v1/", "/old", "/redfish/v1/", "/away"]

"""The HTTP(S) side: one asyncio event loop serving every emulated BMC.

One aiohttp application listens on one socket per BMC (distinct ports on
127.0.0.1, or distinct 127.x addresses) and finds the BMC from the socket the
request arrived on. A thread or a process per BMC would not fit a thousand BMCs
on a two-core machine; one loop with a shared tree per vendor does (see
``bench/bmc.py`` for the measured cost). Faults are applied here, before any
Redfish handling, exactly as a broken BMC or network would show them.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import ipaddress
import json
import socket
import ssl
import tempfile
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from aiohttp import BodyPartReader, ClientError, ClientSession, ClientTimeout, web

from lifecycle.lab.redfish_emulator import actions, bios_settings, dispatch, update_service
from lifecycle.lab.redfish_emulator.bmc import BmcState, EraseHook, PowerHook, Reply, error
from lifecycle.lab.redfish_emulator.config import BmcConfig, Faults
from lifecycle.lab.redfish_emulator.tree import norm

_HANG_S = 3600.0
MAX_REQUEST_BYTES = 64 * 1024 * 1024  # a multipart firmware push carries the image
_FETCH_TIMEOUT_S = 60.0


def make_certificate(hosts: Sequence[str], directory: Path) -> tuple[Path, Path]:
    """A self-signed certificate for ``hosts`` (IP addresses and names); returns (cert, key)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "racklife redfish emulator")])
    alt: list[x509.GeneralName] = [x509.DNSName("localhost")]
    for host in sorted(set(hosts)):
        try:
            alt.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            alt.append(x509.DNSName(host))
    now = dt.datetime.now(dt.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=30))
            .add_extension(x509.SubjectAlternativeName(alt), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = directory / "emulator-cert.pem", directory / "emulator-key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    key_path.chmod(0o600)
    return cert_path, key_path


class RedfishEmulator:
    """Serve ``bmcs`` from one event loop, in a background thread (``start``) or the caller's."""

    def __init__(self, bmcs: Sequence[BmcConfig], *, tls: bool = False,
                 on_power: PowerHook | None = None, cert_dir: Path | None = None,
                 on_erase: EraseHook | None = None) -> None:
        names = [b.name for b in bmcs]
        if len(set(names)) != len(names):
            raise ValueError("BMC names must be unique")
        self.configs = list(bmcs)
        self.tls = tls
        self.on_power = on_power
        self.on_erase = on_erase
        """Called when a secure erase reaches a drive (the lab writes the node's drive state)."""
        self._cert_dir = cert_dir
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self.cert_path: Path | None = None
        self.states: dict[str, BmcState] = {}
        self.urls: dict[str, str] = {}
        self._by_addr: dict[tuple[str, int], BmcState] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None
        self._hanging: set[asyncio.Task[Any]] = set()
        self._downloads: set[asyncio.Task[None]] = set()
        self._transports: weakref.WeakSet[asyncio.Transport] = weakref.WeakSet()

    # --- lifecycle -------------------------------------------------------------------------

    async def start_async(self) -> None:
        self._loop = asyncio.get_running_loop()
        ssl_ctx = self._ssl_context() if self.tls else None
        app = web.Application(client_max_size=MAX_REQUEST_BYTES)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        scheme = "https" if self.tls else "http"
        for config in self.configs:
            state = BmcState(config, schedule=self._schedule, on_power=self._power_hook, on_erase=self.on_erase)
            state.fetch = self._fetch
            if not config.as_captured:  # as captured means no resources of the emulator's own
                update_service.install_inventory(state)
                bios_settings.install(state)
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((config.host, config.port))
            sock.listen(256)
            sock.setblocking(False)
            host, port = sock.getsockname()[:2]
            site = web.SockSite(self._runner, sock, ssl_context=ssl_ctx)
            await site.start()
            self.states[config.name] = state
            self._by_addr[(host, port)] = state
            self.urls[config.name] = f"{scheme}://{host}:{port}"

    async def stop_async(self) -> None:
        for task in list(self._hanging):
            task.cancel()
        # Clients may still hold keep-alive connections; a BMC going away drops them (and a
        # TLS transport left to the garbage collector would never be closed).
        for transport in list(self._transports):
            transport.abort()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def start(self) -> RedfishEmulator:
        """Run the loop in a daemon thread; return once every BMC is listening."""
        ready = threading.Event()
        failure: list[BaseException] = []

        def run() -> None:
            loop = asyncio.new_event_loop()
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(self.start_async())
            except BaseException as exc:  # surfaced to the caller of start()
                failure.append(exc)
                ready.set()
                loop.close()
                return
            ready.set()
            loop.run_forever()
            loop.run_until_complete(self.stop_async())
            loop.close()

        self._thread = threading.Thread(target=run, name="redfish-emulator", daemon=True)
        self._thread.start()
        ready.wait()
        if failure:
            raise failure[0]
        return self

    def stop(self) -> None:
        if self._loop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=30)
            self._thread = None

    def __enter__(self) -> RedfishEmulator:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def call(self, fn: Callable[[], Any]) -> Any:
        """Run ``fn`` in the emulator's loop (thread-safe access to BMC state) and return its value."""
        if self._loop is None or self._thread is None:
            return fn()

        async def run() -> Any:
            return fn()

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(timeout=30)

    def set_faults(self, name: str, faults: Faults) -> None:
        state = self.states[name]

        def apply() -> None:
            state.faults = faults

        self.call(apply)

    def set_fault(self, name: str, **changes: Any) -> None:
        self.set_faults(name, replace(Faults(), **changes))

    def requests(self, name: str) -> int:
        return int(self.call(lambda: sum(self.states[name].requests.values())))

    # --- internals -------------------------------------------------------------------------

    def _ssl_context(self) -> ssl.SSLContext:
        directory = self._cert_dir
        if directory is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="redfish-emulator-")
            directory = Path(self._tmp.name)
        cert, key = make_certificate([c.host for c in self.configs], directory)
        self.cert_path = cert
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(cert, key)
        return ctx

    def _schedule(self, delay: float, fn: Callable[[], None]) -> None:
        assert self._loop is not None
        self._loop.call_later(delay, fn)

    def _power_hook(self, bmc: str, system: str, state: str) -> None:
        if self.on_power is not None:
            self.on_power(bmc, system, state)

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        sockname = request.transport.get_extra_info("sockname") if request.transport else None
        state = self._by_addr.get((sockname[0], sockname[1])) if sockname else None
        if request.transport is not None:
            self._transports.add(request.transport)
        if state is None:
            return web.Response(status=500, text="unknown listener")
        path = request.path
        method = request.method
        if path.startswith("/_emulator/"):
            return await self._admin(state, method, path, request)
        state.requests[(method, path)] += 1
        faults = state.faults
        if faults.expire_sessions:
            state.expire_sessions()
            faults = state.faults = replace(faults, expire_sessions=False)
        if faults.active() and (faults.remaining is None or faults.remaining > 0):
            if faults.remaining is not None:
                state.faults = replace(faults, remaining=faults.remaining - 1)
            if faults.timeout:
                await self._hang()
            if faults.slow_s > 0:
                await asyncio.sleep(faults.slow_s)
            if faults.echo_request and (method != "GET" or "Authorization" in request.headers
                                        or "X-Auth-Token" in request.headers):
                said = (await request.read()).decode(errors="replace")
                return self._response(error(faults.status or 400, "Base.1.8.MalformedJSON",
                                            f"Cannot process {method} {path}: headers "
                                            f"{dict(request.headers)} body {said}"))
            if faults.status is not None:
                reply = error(faults.status, "Base.1.8.ServiceTemporarilyUnavailable"
                              if faults.status == 503 else "Base.1.8.InternalError",
                              "Injected fault.")
                if faults.retry_after is not None:
                    reply.headers["Retry-After"] = str(faults.retry_after)
                return self._response(reply)
        headers = {k.lower(): v for k, v in request.headers.items()}
        if not state.is_public(method, path) and not state.authorized(
                headers, time.monotonic()):
            reply = error(401, "Base.1.8.NoValidSession", "No valid session or credentials.")
            reply.headers["WWW-Authenticate"] = 'Basic realm="Redfish"'
            return self._response(reply)
        body: dict[str, Any] = {}
        if method == "POST" and request.content_type == "multipart/form-data":
            return self._response(await self._push(state, path, request))
        if method in {"POST", "PATCH", "PUT"}:
            raw = await request.read()
            if raw:
                try:
                    parsed = json.loads(raw)
                except ValueError:
                    return self._response(error(400, "Base.1.8.MalformedJSON", "Bad JSON."))
                if not isinstance(parsed, dict):
                    return self._response(error(400, "Base.1.8.MalformedJSON", "Not an object."))
                body = parsed
        return self._response(self._dispatch(state, method, path, body, headers,
                                             request.query_string))

    def _dispatch(self, state: BmcState, method: str, path: str, body: dict[str, Any],
                  headers: dict[str, str], query: str = "") -> Reply:
        if method in {"GET", "HEAD"}:
            return dispatch.get_expanded(state, path, query) if query else dispatch.get(state,
                                                                                        path)
        if method == "PATCH":
            return dispatch.patch(state, path, body, headers.get("if-match"))
        if method == "POST":
            return actions.post(state, path, body)
        if method == "DELETE":
            return dispatch.delete(state, path)
        return error(405, "Base.1.8.OperationNotAllowed", f"{method} is not allowed.")

    async def _push(self, state: BmcState, path: str, request: web.Request) -> Reply:
        """A multipart firmware push (``MultipartHttpPushUri``): UpdateParameters + UpdateFile."""
        if update_service.push_uri(state) != norm(path):
            return error(405, "Base.1.8.OperationNotAllowed", f"{path} takes no multipart body.")
        parts: dict[str, tuple[bytes, str]] = {}
        reader = await request.multipart()
        while (part := await reader.next()) is not None:
            if isinstance(part, BodyPartReader) and part.name:
                parts[part.name] = (bytes(await part.read()), part.filename or "")
        parameters = parts.get("UpdateParameters", (b"", ""))[0]
        image, filename = parts.get("UpdateFile", (b"", ""))
        return update_service.push(state, parameters, image, filename)

    def _fetch(self, url: str, done: Callable[[bytes | None, str], None]) -> None:
        """Download ``url`` on the loop without blocking the other BMCs; then ``done``."""
        assert self._loop is not None

        async def run() -> None:
            timeout = ClientTimeout(total=_FETCH_TIMEOUT_S)
            try:
                async with ClientSession(trust_env=False, timeout=timeout) as session, \
                        session.get(url) as reply:
                    if reply.status != 200:
                        done(None, f"HTTP {reply.status}")
                        return
                    done(await reply.read(), "")
            except (ClientError, TimeoutError) as exc:
                done(None, type(exc).__name__)

        task = self._loop.create_task(run())
        self._downloads.add(task)
        task.add_done_callback(self._downloads.discard)

    async def _hang(self) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._hanging.add(task)
        try:
            await asyncio.sleep(_HANG_S)
        finally:
            if task is not None:
                self._hanging.discard(task)

    async def _admin(self, state: BmcState, method: str, path: str,
                     request: web.Request) -> web.StreamResponse:
        """Lab controls for the subprocess form: faults and counters. Not part of Redfish."""
        if path == "/_emulator/faults" and method == "PUT":
            state.faults = Faults(**(await request.json()))
            return web.Response(status=204)
        if path == "/_emulator/stats" and method == "GET":
            stats = {"requests": sum(state.requests.values()), "sessions": len(state.sessions),
                     "booted_from": state.booted_from,
                     "power": {s: state.power_state(s) for s in state.systems}}
            return web.json_response(stats)
        return web.Response(status=404)

    @staticmethod
    def _response(reply: Reply) -> web.Response:
        headers = {"OData-Version": "4.0", **reply.headers}
        if reply.status == 204:
            return web.Response(status=204, headers=headers)
        return web.Response(status=reply.status, body=reply.payload(), headers=headers,
                            content_type=reply.content_type)

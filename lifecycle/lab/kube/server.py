"""The stand-in API server: kube-apiserver's HTTP API for the kinds the lab needs, over TLS, on aiohttp.

Why it exists: no kube-apiserver can be installed on the machines racklife is
built and tested on, yet the Kubernetes driver, and people with kubectl, must
meet the API's real rules in the lab: TLS and bearer tokens, discovery that
kubectl trusts, optimistic concurrency on every write, a ``status``
subresource separate from the object, validation with the API's field paths,
graceful deletion and finalizers, Eviction with budget arithmetic, watches
and Tables. The pieces live beside this module (``kinds``, ``rules``,
``patching``, ``budgets``, ``tables``, ``openapi``, ``kubelet``, ``store``);
this one routes requests and owns the write path. ``docs/kubernetes.md``
lists what differs from a real server.
"""

from __future__ import annotations

import asyncio
import copy
import json
import ssl
import uuid
from typing import Any

from aiohttp import web

from lifecycle.drivers.kube import selectors as sel
from lifecycle.lab.kube import kinds, openapi, tables
from lifecycle.lab.kube.answers import ApiError, answer
from lifecycle.lab.kube.kinds import NAMESPACES, Kind, Route
from lifecycle.lab.kube.kubelet import LabKubelet, now
from lifecycle.lab.kube.store import CLOSE, Event, Store
from lifecycle.lab.kube.writes import BUILT_IN_NAMESPACES, WritePath

GPU_RESOURCE = "nvidia.com/gpu"
Obj = dict[str, Any]
PUBLIC = frozenset({"/version", "/healthz", "/livez", "/readyz"})


class ApiServer(WritePath):
    """One cluster's API. ``token``: the bearer token every request but ``/version`` and health must carry."""

    def __init__(self, token: str | None = None, shutdown_s: float = 0.2, budget_lag_s: float = 0.0,
                 node_monitor_s: float = 1.0) -> None:
        self.token = token
        self.node_monitor_s = node_monitor_s
        self.budget_lag_s = budget_lag_s
        self._budget_seen_at = {}
        self.store = Store()
        self.kubelet = LabKubelet(self.store, self._write, self._delete_obj, shutdown_s)
        self.address = "127.0.0.1:0"
        self._seed()

    def _seed(self) -> None:
        for name in BUILT_IN_NAMESPACES:
            self.store.put(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {
                "name": name, "uid": str(uuid.uuid4()), "creationTimestamp": now(),
                "labels": {"kubernetes.io/metadata.name": name}}, "spec": {"finalizers": ["kubernetes"]},
                "status": {"phase": "Active"}}, None)

    def reset(self) -> None:
        """Forget every object (a fresh cluster); watches from before get 410 Gone."""
        self.kubelet.stop()
        self.store.clear()
        self._seed()
        self.start_controllers()

    def start_controllers(self) -> None:
        """Start the node lifecycle controller's periodic pass (needs the running loop)."""
        if self.node_monitor_s > 0:
            self.kubelet.monitor(self.node_monitor_s)

    def close_watches(self) -> None:
        self.store.close_watches()

    def app(self) -> web.Application:
        app = web.Application(client_max_size=4 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self.handle)
        return app

    # ------------------------------------------------------------ routing

    async def handle(self, request: web.Request) -> web.StreamResponse:
        try:
            if self.token is not None and request.path not in PUBLIC and \
                    request.headers.get("Authorization") != f"Bearer {self.token}":
                raise ApiError(401, "Unauthorized", "Unauthorized")
            return await self._route(request)
        except ApiError as e:
            retry = e.details.get("retryAfterSeconds")
            return answer(e.status(), e.code, {"Retry-After": str(retry)} if retry else None)

    async def _route(self, request: web.Request) -> web.StreamResponse:
        path = request.path.rstrip("/") or "/"
        parts = [p for p in path.split("/") if p]
        fixed = self._fixed(path, parts)
        if fixed is not None:
            if request.method != "GET":
                raise ApiError(405, "MethodNotAllowed", f"the server does not allow this method on {path}")
            return answer(fixed)
        where = kinds.route(parts)
        if where is None or where.extra:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if where.sub is not None and where.sub not in {s.name for s in where.kind.subresources}:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        return await self._resource(request, where)

    def _fixed(self, path: str, parts: list[str]) -> Obj | None:
        if path in ("/healthz", "/livez", "/readyz"):
            return {"status": "ok"}
        if path == "/version":
            return kinds.VERSION
        if path == "/api":
            return kinds.versions_doc(self.address)
        if path == "/apis":
            return kinds.groups_doc()
        if path == "/openapi/v3":
            return openapi.root()
        if parts[:2] == ["openapi", "v3"]:
            doc = openapi.group_version("/".join(parts[2:]))
            if doc is None:
                raise ApiError(404, "NotFound", "the server could not find the requested resource")
            return doc
        if parts == ["api", "v1"]:
            return kinds.resources_doc("", "v1")
        if len(parts) == 2 and parts[0] == "apis":
            return kinds.group_doc(parts[1])
        if len(parts) == 3 and parts[0] == "apis":
            return kinds.resources_doc(parts[1], parts[2])
        return None

    async def _resource(self, request: web.Request, at: Route) -> web.StreamResponse:
        method = request.method
        if at.name is None:
            if method == "GET":
                return await self._read_many(request, at)
            if method == "POST":
                return await self._create(request, at)
            raise ApiError(405, "MethodNotAllowed", f"{method} is not supported on a collection here")
        if at.sub == "scale":
            return await self._scale(request, at)
        if at.sub == "eviction":
            if method != "POST":
                raise ApiError(405, "MethodNotAllowed", "evictions are created with POST")
            return await self._evict(request, at)
        if method == "GET":
            shown = self._shown(at.kind, self._current(at))
            if at.sub is None and tables.wants_table(request.headers.get("Accept", "")):
                return answer(tables.table(at.kind.kind, [shown], version=shown["metadata"]["resourceVersion"],
                                          full=request.query.get("includeObject") == "Object"))
            return answer(shown)
        if method == "PUT":
            return await self._put(request, at)
        if method == "PATCH":
            return await self._patch(request, at)
        if method == "DELETE" and at.sub is None:
            return await self._delete(request, at)
        raise ApiError(405, "MethodNotAllowed", f"{method} is not supported on {request.path}")

    # ------------------------------------------------------------ reads

    def _selector(self, request: web.Request, kind: Kind) -> Any:
        try:
            labels = sel.parse_labels(request.query.get("labelSelector"))
            fields = sel.parse_fields(request.query.get("fieldSelector"), kind.plural)
        except sel.SelectorError as e:
            raise ApiError(400, "BadRequest", str(e)) from e

        def wanted(obj: Obj) -> bool:
            return sel.match_labels(labels, obj["metadata"].get("labels")) and sel.match_fields(fields, obj)
        return wanted

    async def _read_many(self, request: web.Request, at: Route) -> web.StreamResponse:
        wanted = self._selector(request, at.kind)
        as_table = tables.wants_table(request.headers.get("Accept", ""))
        full = request.query.get("includeObject") == "Object"
        if request.query.get("watch") in ("true", "1"):
            return await self._watch(request, at, wanted, as_table, full)
        items = [self._shown(at.kind, copy.deepcopy(o)) for o in self.store.items(at.kind, at.namespace) if wanted(o)]
        items.sort(key=lambda o: (o["metadata"].get("namespace") or "", o["metadata"]["name"]))
        version = str(self.store.version)
        if as_table:
            return answer(tables.table(at.kind.kind, items, version=version, full=full))
        return answer({"kind": f"{at.kind.kind}List", "apiVersion": at.kind.api_version,
                      "metadata": {"resourceVersion": version}, "items": items})

    async def _watch(self, request: web.Request, at: Route, wanted: Any, as_table: bool,
                     full: bool) -> web.StreamResponse:
        journal = self.store.journals[at.kind.key]
        since = request.query.get("resourceVersion") or "0"
        try:
            timeout = float(request.query.get("timeoutSeconds") or 1800)
            since_v = int(since)
        except ValueError as e:
            raise ApiError(400, "BadRequest", f"invalid watch parameter: {e}") from e
        queue = self.store.watch(at.kind)
        first: list[Event | Obj]
        if since_v == 0:
            first = [Event("ADDED", copy.deepcopy(o), None) for o in self.store.items(at.kind, at.namespace)]
        elif since_v < journal.floor:
            first = [{"type": "ERROR", "object": ApiError(410, "Expired",
                                                          f"too old resource version: {since}").status()}]
        else:
            first = [e for e in journal.events if e.version > since_v]
        last = self.store.version
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        response.force_close()  # a finished watch ends its connection: a stopping server waits on no client
        try:
            await response.prepare(request)
            deadline = asyncio.get_running_loop().time() + timeout
            for item in first:
                if not await self._send(response, at, item, wanted, as_table, full):
                    return response
            while (left := deadline - asyncio.get_running_loop().time()) > 0:
                try:
                    got = await asyncio.wait_for(queue.get(), left)
                except TimeoutError:
                    break
                if got == CLOSE:
                    await response.write_eof()
                    # The server is stopping: end the connection now, without waiting for the client's TLS goodbye.
                    if request.transport is not None:
                        request.transport.abort()
                    return response
                assert isinstance(got, Event)
                if got.version > last and not await self._send(response, at, got, wanted, as_table, full):
                    break
            await response.write_eof()
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            self.store.unwatch(at.kind, queue)
        return response

    async def _send(self, response: web.StreamResponse, at: Route, item: Event | Obj, wanted: Any,
                    as_table: bool, full: bool) -> bool:
        """Write one watch event (False: the stream ends after it)."""
        if isinstance(item, dict):
            await response.write(json.dumps(item).encode() + b"\n")
            return False
        obj, prev = item.obj, item.prev
        if at.namespace is not None and obj["metadata"].get("namespace") != at.namespace:
            return True
        # As from the API: an object entering a watch's selection is ADDED, one leaving it is DELETED.
        now_in = item.type != "DELETED" and wanted(obj)
        before = prev is not None and wanted(prev)
        if item.type == "DELETED":
            now_in, before = False, wanted(obj) or before
        if not (now_in or before):
            return True
        kind = "MODIFIED" if now_in and before else "ADDED" if now_in else "DELETED"
        shown = self._shown(at.kind, copy.deepcopy(obj))
        if as_table:
            shown = tables.table(at.kind.kind, [shown], version=shown["metadata"]["resourceVersion"], full=full)
        await response.write(json.dumps({"type": kind, "object": shown}).encode() + b"\n")
        return True

async def serve(api: ApiServer, host: str, port: int, context: ssl.SSLContext | None) -> web.AppRunner:
    """Start serving ``api``; the caller stops it with ``await runner.cleanup()``."""
    runner = web.AppRunner(api.app(), access_log=None, handle_signals=False, shutdown_timeout=1)
    await runner.setup()
    site = web.TCPSite(runner, host, port, ssl_context=context)
    await site.start()
    server = getattr(site, "_server", None)
    sockets = getattr(server, "sockets", None) or []
    bound = sockets[0].getsockname()[1] if sockets else port
    api.address = f"{host}:{bound}"
    return runner

"""The stand-in API server: kmock's Kubernetes emulator plus the API behaviours racklife relies on.

Why it exists: no kube-apiserver can be installed on the machines racklife is
built and tested on, yet the Kubernetes driver must be tested over real HTTP.
kmock (nolar's Kubernetes mock server) gives the HTTP server, request parsing,
discovery, Status-shaped errors, an object store with history and event buses.
This module adds, as kmock reactions, what racklife relies on and kmock leaves
out: resourceVersions and optimistic concurrency, JSON merge / strategic merge
/ JSON patch, label and field selectors on lists and watches, ``?watch=true``
with ``resourceVersion`` replay, selector-aware ADDED/DELETED and
``timeoutSeconds``, PodDisruptionBudget status, the Eviction subresource (429
when a budget forbids it) and bearer-token auth. ``docs/kubernetes.md`` lists
exactly what is and is not emulated.
"""

from __future__ import annotations

import asyncio
import collections
import copy
import datetime
import secrets
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import attrs
import jsonpatch
import kmock

from lifecycle.drivers.kube import selectors as sel

GPU_RESOURCE = "nvidia.com/gpu"
JOURNAL_SIZE = 2000
KEEP_VERSIONS = 8
NODES = kmock.resource("", "v1", "nodes")
PODS = kmock.resource("", "v1", "pods")
PDBS = kmock.resource("policy", "v1", "poddisruptionbudgets")
NAMESPACES = kmock.resource("", "v1", "namespaces")
SERVED = frozenset({NODES, PODS, PDBS, NAMESPACES})
PATCH_TYPES = frozenset({
    "application/merge-patch+json", "application/strategic-merge-patch+json", "application/json-patch+json",
})
Obj = dict[str, Any]
_CLOSE = "racklife:close"  # tells open watch streams that the server is stopping


# Exported by kmock at runtime but missing from its ``__all__``, which mypy --strict honours.
_Response: Any = kmock.Response  # type: ignore[attr-defined]
_Bus: Any = kmock.Bus  # type: ignore[attr-defined]


def _status(code: int, reason: str, message: str, **details: Any) -> Any:
    body = {"apiVersion": "v1", "kind": "Status", "metadata": {}, "status": "Failure" if code >= 400 else "Success",
            "code": code, "reason": reason, "message": message, "details": details}
    return _Response(status=code, payload=body)


class _Refused(Exception):
    """Ends a request with a Kubernetes Status answer (no traceback in ``details``)."""

    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.response = _status(code, reason, message)


class _JournalBus(_Bus):  # type: ignore[misc]
    """A kmock event bus that also keeps the last events, so watches can resume from a resourceVersion."""

    def __init__(self) -> None:
        super().__init__()
        self.journal: collections.deque[Obj] = collections.deque(maxlen=JOURNAL_SIZE)
        self.floor = 0  # resourceVersion of the newest event that fell out of the journal

    async def put(self, *items: Obj) -> None:
        for item in items:
            if item["type"] == _CLOSE:
                continue
            if len(self.journal) == self.journal.maxlen:
                self.floor = _rv(self.journal[0]["object"])
            self.journal.append(item)
        await super().put(*items)


def _rv(obj: Mapping[str, Any]) -> int:
    return int((obj.get("metadata") or {}).get("resourceVersion") or 0)


class ApiServer(kmock.KubernetesEmulator):
    """kmock's Kubernetes emulator with the writes, reads and subresources racklife needs."""

    token: str | None

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        self.token = None
        self._last_rv = 0
        self._buses = collections.defaultdict(_JournalBus)
        for res, kind, namespaced, subs in (
            (NODES, "Node", False, {"status"}),
            (PODS, "Pod", True, {"status", "eviction"}),
            (PDBS, "PodDisruptionBudget", True, {"status"}),
            (NAMESPACES, "Namespace", False, set()),
        ):
            self.resources[res] = kmock.ResourceInfo(
                kind=kind, singular=kind.lower(), namespaced=namespaced, subresources=subs,
                verbs={"get", "list", "watch", "create", "patch", "delete"})
        self[kmock.method.POST][PODS, kmock.subresource("eviction")] << self._evict
        self[kmock.method.POST] << self._create
        self["patch"] << self._patch
        self["delete"] << self._delete
        self["put"] << (lambda _: _status(405, "MethodNotAllowed", "the lab stand-in has no PUT; use PATCH"))
        # Discovery (/api/v1, /apis/policy/v1, …) has no resource plural: leave it to kmock's scaffold.
        self[kmock.action.LIST, _names_objects] << self._list
        self[kmock.action.WATCH, _names_objects] << self._watch
        self[kmock.action.FETCH, _names_objects] << self._fetch

    async def close_watches(self) -> None:
        """End every open watch stream, so that stopping the server does not wait on them."""
        for bus in list(self._buses.values()):
            await bus.put({"type": _CLOSE, "object": {}})

    async def reset(self) -> None:
        """Forget every object (a fresh cluster for the next test); watches from before get 410 Gone."""
        await self.close_watches()
        async with self._lock:
            for key in list(self._objects.keys()):
                del self._objects[key]
            journals: list[Any] = list(self._buses.values())
            for bus in journals:
                bus.journal.clear()
                bus.floor = self._last_rv

    # ------------------------------------------------------------ plumbing

    async def _handle(self, request: kmock.Request) -> Any:
        if self.token is not None and request.headers.get("Authorization") != f"Bearer {self.token}":
            return _plain_json(await _status(401, "Unauthorized", "Unauthorized")(request))
        if request.resource is not None and request.method.value in ("POST", "PATCH", "DELETE"):
            # Writes are ours (reactions below); keep kmock's built-in write path out of the way.
            evolved = _evolve(request, action=None)
            # kmock's views match a request by identity among the recorded ones: record the evolved one.
            self._requests[:] = [evolved if r is request else r for r in self._requests]
            request = evolved
        try:
            response = await super()._handle(request)
        except _Refused as e:
            response = await e.response(request)
        finally:
            # kmock records every request for assertions and matches reactions by scanning that record, so
            # a long-running lab would slow down and grow: keep only the requests still being served.
            self._requests[:] = [r for r in self._requests if r is not request]
        return _plain_json(response)

    async def _render_error(self, exc: Exception) -> Any:
        return _plain_json(await super()._render_error(exc))

    def _known(self, request: kmock.Request) -> kmock.resource:
        if request.resource not in SERVED:
            raise _Refused(404, "NotFound", f"the server could not find the requested resource ({request.resource})")
        return request.resource

    def _named(self, request: kmock.Request) -> tuple[kmock.resource, str]:
        res = self._known(request)
        if request.name is None:
            raise _Refused(405, "MethodNotAllowed", f"{request.method.value} needs an object name")
        return res, request.name

    def _items(self, res: Any, namespace: str | None = None) -> list[Obj]:
        return [obj.raw for (r, ns, _), obj in self._objects.items()
                if r == res and not obj.deleted and (namespace is None or ns == namespace)]

    def _get(self, res: Any, namespace: str | None, name: str) -> Obj | None:
        key = (res, namespace, name)
        if key not in self._objects:
            return None
        obj = self._objects[key]
        return None if obj is None or obj.deleted else copy.deepcopy(obj.raw)

    async def _commit(self, res: Any, namespace: str | None, name: str, new: Obj | None, event: str) -> Obj:
        """Store a new version (or delete), stamp its resourceVersion, announce it to watches. Lock held."""
        key = (res, namespace, name)
        self._last_rv += 1
        prev = self._get(res, namespace, name)
        if new is None:
            assert prev is not None
            gone = copy.deepcopy(prev)
            gone["metadata"]["resourceVersion"] = str(self._last_rv)
            del self._objects[key]  # not kmock's soft delete: a lab churns pods for hours
            await self._buses[res].put({"type": "DELETED", "object": gone, "prev": prev})
            return gone
        new.setdefault("metadata", {})["resourceVersion"] = str(self._last_rv)
        if key in self._objects:
            history = self._objects[key].history
            history.append(new)
            if len(history) > 2 * KEEP_VERSIONS:
                del history[:-KEEP_VERSIONS]
        else:
            self._objects[key] = new
        # Like the API server's watch cache, keep the previous state: selector watches need it.
        await self._buses[res].put({"type": event, "object": copy.deepcopy(new), "prev": prev})
        return new

    # ------------------------------------------------------------ writes

    async def _create(self, request: kmock.Request) -> Any:
        res = self._known(request)
        if request.name is not None:
            raise _Refused(405, "MethodNotAllowed", f"the lab stand-in cannot POST to {request.url.path}")
        obj = copy.deepcopy(request.data) if isinstance(request.data, dict) else None
        if obj is None:
            raise _Refused(400, "BadRequest", "the request body is not a JSON object")
        meta = obj.setdefault("metadata", {})
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = f"{meta['generateName']}{secrets.token_hex(3)[:5]}"
        if not meta.get("name"):
            raise _Refused(422, "Invalid", "metadata.name: Required value: name or generateName is required")
        namespace = (request.namespace or meta.get("namespace") or "default") if self._namespaced(res) else None
        if namespace is not None:
            meta["namespace"] = namespace
        meta.setdefault("uid", str(uuid.uuid4()))
        meta.setdefault("creationTimestamp", now())
        meta.setdefault("generation", 1)
        if res == PODS:
            obj.setdefault("status", {}).setdefault("phase", "Running")  # no kubelet: pods start at once
        async with self._lock:
            if self._get(res, namespace, meta["name"]) is not None:
                raise _Refused(409, "AlreadyExists", f'{res.plural} "{meta["name"]}" already exists')
            created = await self._commit(res, namespace, meta["name"], obj, "ADDED")
        return _Response(status=201, payload=created)

    async def _patch(self, request: kmock.Request) -> Any:
        res, name = self._named(request)
        kind = (request.headers.get("Content-Type") or "").split(";")[0].strip()
        if kind not in PATCH_TYPES:
            raise _Refused(415, "UnsupportedMediaType", f"the lab stand-in does not accept patch type {kind!r}")
        async with self._lock:
            current = self._get(res, request.namespace, name)
            if current is None:
                raise _Refused(404, "NotFound", f'{res.plural} "{name}" not found')
            if kind == "application/json-patch+json":
                try:
                    new = jsonpatch.apply_patch(current, request.data or [], in_place=False)
                except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as e:
                    raise _Refused(422, "Invalid", f"the JSON patch does not apply: {e}") from e
            else:
                asked = ((request.data or {}).get("metadata") or {}).get("resourceVersion")
                if asked is not None and str(asked) != current["metadata"].get("resourceVersion"):
                    raise _Refused(409, "Conflict", f'Operation cannot be fulfilled on {res.plural} "{name}": the '
                                   "object has been modified; please apply your changes to the latest version "
                                   "and try again")
                new = sel.merge_patch(current, request.data or {})
            new["metadata"]["name"] = name
            return await self._commit(res, request.namespace, name, new, "MODIFIED")

    async def _delete(self, request: kmock.Request) -> Any:
        res, name = self._named(request)
        async with self._lock:
            if self._get(res, request.namespace, name) is None:
                raise _Refused(404, "NotFound", f'{res.plural} "{name}" not found')
            return await self._commit(res, request.namespace, name, None, "DELETED")

    async def _evict(self, request: kmock.Request) -> Any:
        """``pods/{name}/eviction``: delete the pod unless its one PodDisruptionBudget forbids it (429)."""
        _, name = self._named(request)
        if request.method.value != "POST":
            raise _Refused(405, "MethodNotAllowed", "evictions are created with POST")
        async with self._lock:
            pod = self._get(PODS, request.namespace, name)
            if pod is None:
                raise _Refused(404, "NotFound", f'pods "{name}" not found')
            terminal = (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")
            labels = pod["metadata"].get("labels") or {}
            budgets = [b for b in self._items(PDBS, request.namespace)
                       if sel.match_labels(sel.from_label_selector((b.get("spec") or {}).get("selector")), labels)]
            if not terminal and len(budgets) > 1:
                raise _Refused(500, "InternalError", "This pod has more than one PodDisruptionBudget, "
                               "which the eviction subresource does not support.")
            if not terminal and budgets:
                status = self._budget(budgets[0])
                if status.disruptions_allowed < 1:
                    return _status(429, "TooManyRequests",
                                   "Cannot evict pod as it would violate the pod's disruption budget.",
                                   causes=[{"reason": "DisruptionBudget", "message":
                                            sel.budget_violation(budgets[0]["metadata"]["name"], status)}])
            await self._commit(PODS, request.namespace, name, None, "DELETED")
        return _status(201, "", "")

    # ------------------------------------------------------------ reads

    def _budget(self, pdb: Obj) -> sel.BudgetStatus:
        wanted = sel.from_label_selector((pdb.get("spec") or {}).get("selector"))
        ns = pdb["metadata"].get("namespace")
        pods: list[Mapping[str, Any]] = [
            p for p in self._items(PODS, ns) if sel.match_labels(wanted, p["metadata"].get("labels"))]
        return sel.budget_status(pdb, pods)

    def _shown(self, obj: Obj, res: Any) -> Obj:
        if res == PDBS:
            obj = dict(obj, status=self._budget(obj).as_status(obj["metadata"].get("generation", 1)))
        return obj

    def _selectors(self, request: kmock.Request, res: kmock.resource) -> Callable[[Obj], bool]:
        try:
            labels = sel.parse_labels(request.params.get("labelSelector"))
            fields = sel.parse_fields(request.params.get("fieldSelector"), str(res.plural))
        except sel.SelectorError as e:
            raise _Refused(400, "BadRequest", str(e)) from e
        name = request.name

        def wanted(obj: Obj) -> bool:
            meta = obj["metadata"]
            return (name is None or meta["name"] == name) and sel.match_labels(labels, meta.get("labels")) \
                and sel.match_fields(fields, obj)

        return wanted

    def _namespaced(self, res: kmock.resource) -> bool:
        return bool(self.resources[res].namespaced)

    async def _fetch(self, request: kmock.Request) -> Any:
        res, name = self._named(request)
        async with self._lock:
            obj = self._get(res, request.namespace, name)
            if obj is None:
                raise _Refused(404, "NotFound", f'{res.plural} "{name}" not found')
            return self._shown(obj, res)

    async def _list(self, request: kmock.Request) -> Any:
        res = self._known(request)
        wanted = self._selectors(request, res)
        async with self._lock:
            items = [self._shown(o, res) for o in self._items(res, request.namespace) if wanted(o)]
            version = str(self._last_rv)
        return {"apiVersion": f"{res.group}/{res.version}".lstrip("/"), "kind": f"{self.resources[res].kind}List",
                "metadata": {"resourceVersion": version}, "items": items}

    async def _watch(self, request: kmock.Request) -> AsyncIterator[Any]:
        res = self._known(request)
        wanted = self._selectors(request, res)
        bus: Any = self._buses[res]
        since = request.params.get("resourceVersion") or "0"
        timeout = float(request.params.get("timeoutSeconds") or 1800)
        async with self._lock:
            mark = await bus.mark()
            first: list[Obj]
            if since == "0":
                first = [{"type": "ADDED", "object": o} for o in self._items(res, request.namespace)]
            elif int(since) < bus.floor:
                first = [{"type": "ERROR", "object": _status(410, "Expired", f"too old resource version: {since}")
                          .payload}]
            else:
                first = [e for e in bus.journal if _rv(e["object"]) > int(since)]
            last = max([int(since)] + [_rv(e["object"]) for e in first if e["type"] != "ERROR"])
        return self._stream(request, res, wanted, first, bus.stream(since=mark), last, timeout)

    async def _stream(self, request: kmock.Request, res: kmock.resource, wanted: Callable[[Obj], bool],
                      first: list[Obj], live: AsyncIterator[Obj], last: int, timeout: float) -> AsyncIterator[Any]:
        yield b""  # send the headers now, even if nothing happens for a while
        deadline = asyncio.get_running_loop().time() + timeout

        def shown(event: Obj) -> Obj | None:
            # As from the API: an object entering a watch's selection is ADDED, one leaving it is DELETED.
            if event["type"] == "ERROR":
                return event
            obj, prev = event["object"], event.get("prev")
            if request.namespace is not None and obj["metadata"].get("namespace") != request.namespace:
                return None
            now = event["type"] != "DELETED" and wanted(obj)
            before = prev is not None and wanted(prev)
            if not (now or before):
                return None
            kind = "MODIFIED" if now and before else "ADDED" if now else "DELETED"
            return {"type": kind, "object": self._shown(obj, res)}

        for event in first:
            if (out := shown(event)) is not None:
                yield out
            if event["type"] == "ERROR":
                return  # as the API server does: the client must list again
        while (left := deadline - asyncio.get_running_loop().time()) > 0:
            try:
                event = await asyncio.wait_for(anext(live), left)
            except TimeoutError:
                return
            if event["type"] == _CLOSE:
                return
            if _rv(event["object"]) > last and (out := shown(event)) is not None:
                yield out


def _names_objects(request: kmock.Request) -> bool:
    return request.resource is not None and request.resource.plural is not None


def _plain_json(response: Any) -> Any:
    """kube-apiserver says ``application/json`` without a charset, and clients compare it exactly."""
    if not response.prepared and response.content_type == "application/json":
        response.headers["Content-Type"] = "application/json"
    return response


def _evolve(request: kmock.Request, **changes: Any) -> kmock.Request:
    return attrs.evolve(request, **changes)


def now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

"""The lab's Kubernetes API: a kmock stand-in, because no kube-apiserver can be installed here.

racklife's Kubernetes driver must be tested over real HTTP against something
that answers like kube-apiserver for the calls racklife makes. kmock (nolar's
Kubernetes mock server) gives the HTTP server, request parsing, discovery,
Status-shaped errors, an object store with history and event buses; this
module adds, as kmock reactions, what racklife relies on and kmock leaves out:
resourceVersions and optimistic concurrency, JSON merge / strategic merge /
JSON patch, label and field selectors on lists and watches, ``?watch=true``
with ``resourceVersion`` replay and ``timeoutSeconds``, PodDisruptionBudget
status, the Eviction subresource (429 when a budget forbids it), and bearer
token auth. ``docs/kubernetes.md`` lists exactly what is and is not emulated.

Run it in-process (``KubeStandIn().start()``, a thread with its own event
loop) or as a process (``python -m lifecycle.lab.kube --kubeconfig PATH``).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import copy
import datetime
import http.client
import json
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonpatch
import kmock
import yaml

from lifecycle.drivers.kube import selectors as sel

GPU_RESOURCE = "nvidia.com/gpu"
JOURNAL_SIZE = 2000
NODES = kmock.resource("", "v1", "nodes")
PODS = kmock.resource("", "v1", "pods")
PDBS = kmock.resource("policy", "v1", "poddisruptionbudgets")
NAMESPACES = kmock.resource("", "v1", "namespaces")
PATCH_TYPES = frozenset({
    "application/merge-patch+json", "application/strategic-merge-patch+json", "application/json-patch+json",
})
Obj = dict[str, Any]


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
                kind=kind, namespaced=namespaced, subresources=subs,
                verbs={"get", "list", "watch", "create", "patch", "delete"})
        self[kmock.method.POST][PODS, kmock.subresource("eviction")] << self._evict
        self[kmock.method.POST] << self._create
        self["patch"] << self._patch
        self["delete"] << self._delete
        self["put"] << (lambda _: _status(405, "MethodNotAllowed", "the lab stand-in has no PUT; use PATCH"))
        self[kmock.action.LIST] << self._list
        self[kmock.action.WATCH] << self._watch
        self[kmock.action.FETCH] << self._fetch

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
        return _plain_json(response)

    async def _render_error(self, exc: Exception) -> Any:
        return _plain_json(await super()._render_error(exc))

    def _known(self, request: kmock.Request) -> kmock.resource:
        if request.resource is None or request.resource not in set(self._get_resources()):
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
            self._objects[key].delete()
            await self._buses[res].put({"type": "DELETED", "object": gone, "prev": prev})
            return gone
        new.setdefault("metadata", {})["resourceVersion"] = str(self._last_rv)
        if key in self._objects:
            self._objects[key].history.append(new)
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
        meta.setdefault("creationTimestamp", _now())
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
        while (left := deadline - asyncio.get_running_loop().time()) > 0:
            try:
                event = await asyncio.wait_for(anext(live), left)
            except TimeoutError:
                return
            if _rv(event["object"]) > last and (out := shown(event)) is not None:
                yield out


def _plain_json(response: Any) -> Any:
    """kube-apiserver says ``application/json`` without a charset, and clients compare it exactly."""
    if not response.prepared and response.content_type == "application/json":
        response.headers["Content-Type"] = "application/json"
    return response


def _evolve(request: kmock.Request, **changes: Any) -> kmock.Request:
    import attrs

    return attrs.evolve(request, **changes)


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def node_object(name: str, *, labels: Mapping[str, str] | None = None, taints: list[Obj] | None = None,
                gpus: int = 8, ready: bool = True) -> Obj:
    """The Node object a kubelet would register for a lab node."""
    capacity = {"cpu": "64", "memory": "1056Gi", "pods": "110", GPU_RESOURCE: str(gpus)}
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                                              **(labels or {})}},
        "spec": {"taints": list(taints or [])},
        "status": {"capacity": capacity, "allocatable": dict(capacity),
                   "conditions": [{"type": "Ready", "status": "True" if ready else "False",
                                   "reason": "KubeletReady" if ready else "KubeletNotReady",
                                   "lastTransitionTime": _now()}],
                   "nodeInfo": {"architecture": "amd64", "bootID": str(uuid.uuid4()), "machineID": uuid.uuid4().hex,
                                "systemUUID": str(uuid.uuid4()), "containerRuntimeVersion": "containerd://1.7.0",
                                "kernelVersion": os.uname().release, "kubeProxyVersion": "",
                                "kubeletVersion": "v1.30.0-racklife-lab", "operatingSystem": "linux",
                                "osImage": "racklife lab node"}},
    }


# ---------------------------------------------------------------- running it


@dataclass
class _Admin:
    """Lab-side writes over the stand-in's own HTTP API (the same path every client takes)."""

    url: str = ""
    token: str = field(default_factory=lambda: secrets.token_urlsafe(24), repr=False)

    def request(self, method: str, path: str, body: Any = None, content_type: str = "application/json") -> Any:
        host, port = self.url.removeprefix("http://").split(":")
        conn = http.client.HTTPConnection(host, int(port), timeout=10)
        try:
            conn.request(method, path, body=None if body is None else json.dumps(body),
                         headers={"Authorization": f"Bearer {self.token}", "Content-Type": content_type})
            resp = conn.getresponse()
            data = json.loads(resp.read() or b"null")
        finally:
            conn.close()
        if resp.status >= 400:
            raise RuntimeError(f"{method} {path}: {resp.status} {data.get('message') if data else ''}")
        return data

    def write_kubeconfig(self, path: Path, namespace: str = "default") -> Path:
        """A kubeconfig for clients (kubectl, lightkube); it holds the lab token, so it is mode 0600."""
        config = {
            "apiVersion": "v1", "kind": "Config", "current-context": "racklife-lab", "preferences": {},
            "clusters": [{"name": "racklife-lab", "cluster": {"server": self.url}}],
            "users": [{"name": "racklife-lab", "user": {"token": self.token}}],
            "contexts": [{"name": "racklife-lab",
                          "context": {"cluster": "racklife-lab", "user": "racklife-lab", "namespace": namespace}}],
        }
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(yaml.safe_dump(config, sort_keys=False))
        tmp.chmod(0o600)
        tmp.replace(path)
        return path

    def join(self, name: str, *, labels: Mapping[str, str] | None = None, taints: list[Obj] | None = None,
             gpus: int = 8, ready: bool = True) -> Obj:
        """A node "boots" into Kubernetes: its Node object appears (idempotent: an existing one is kept)."""
        try:
            return dict(self.request("GET", f"/api/v1/nodes/{name}"))
        except RuntimeError:
            obj = node_object(name, labels=labels, taints=taints, gpus=gpus, ready=ready)
            return dict(self.request("POST", "/api/v1/nodes", obj))

    def leave(self, name: str) -> None:
        """The node's Node object goes away (powered off, or moved to the Slurm pool)."""
        try:
            self.request("DELETE", f"/api/v1/nodes/{name}")
        except RuntimeError as e:
            if " 404 " not in str(e):
                raise

    def set_ready(self, name: str, ready: bool) -> None:
        cond = {"type": "Ready", "status": "True" if ready else "False", "lastTransitionTime": _now()}
        self.request("PATCH", f"/api/v1/nodes/{name}/status", [{"op": "replace", "path": "/status/conditions",
                                                                "value": [cond]}], "application/json-patch+json")

    def create_pod(self, name: str, node: str, *, namespace: str = "default", labels: Mapping[str, str] | None = None,
                   owner_kind: str | None = None, mirror: bool = False, phase: str = "Running") -> Obj:
        meta: Obj = {"name": name, "namespace": namespace, "labels": dict(labels or {})}
        if owner_kind:
            meta["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": owner_kind, "name": f"{name}-owner",
                                        "uid": str(uuid.uuid4()), "controller": True}]
        if mirror:
            meta["annotations"] = {"kubernetes.io/config.mirror": secrets.token_hex(8)}
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
               "spec": {"nodeName": node, "containers": [{"name": "main", "image": "registry.invalid/app:1"}]},
               "status": {"phase": phase}}
        return dict(self.request("POST", f"/api/v1/namespaces/{namespace}/pods", pod))

    def delete_pod(self, name: str, namespace: str = "default") -> None:
        self.request("DELETE", f"/api/v1/namespaces/{namespace}/pods/{name}")

    def create_pdb(self, name: str, match_labels: Mapping[str, str], *, namespace: str = "default",
                   min_available: int | str | None = None, max_unavailable: int | str | None = None) -> Obj:
        spec: Obj = {"selector": {"matchLabels": dict(match_labels)}}
        if min_available is not None:
            spec["minAvailable"] = min_available
        if max_unavailable is not None:
            spec["maxUnavailable"] = max_unavailable
        pdb = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
               "metadata": {"name": name, "namespace": namespace}, "spec": spec}
        return dict(self.request("POST", f"/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets", pdb))


@dataclass
class KubeStandIn(_Admin):
    """The stand-in served from a thread of this process, on 127.0.0.1."""

    port: int = 0
    api: ApiServer | None = field(default=None, init=False, repr=False)
    _loop: asyncio.AbstractEventLoop | None = field(default=None, init=False, repr=False)
    _stopped: asyncio.Event | None = field(default=None, init=False, repr=False)
    _thread: threading.Thread | None = field(default=None, init=False, repr=False)

    def start(self, timeout_s: float = 10.0) -> KubeStandIn:
        ready = threading.Event()
        failure: list[BaseException] = []

        async def serve() -> None:
            self._loop = asyncio.get_running_loop()
            self._stopped = asyncio.Event()
            try:
                self.api = ApiServer()
                self.api.token = self.token
                async with self.api, kmock.Server(self.api, host="127.0.0.1", port=self.port or None) as server:
                    self.port = server.port
                    self.url = f"http://127.0.0.1:{server.port}"
                    ready.set()
                    await self._stopped.wait()
            except BaseException as e:
                failure.append(e)
                raise
            finally:
                ready.set()

        self._thread = threading.Thread(target=asyncio.run, args=(serve(),), name="kube-stand-in", daemon=True)
        self._thread.start()
        if not ready.wait(timeout_s) or failure:
            raise RuntimeError(f"the Kubernetes stand-in did not start: {failure[0] if failure else 'timeout'}")
        return self

    def stop(self) -> None:
        if self._loop is not None and self._stopped is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._stopped.set)
            self._thread.join(10)
            self._thread = None

    def __enter__(self) -> KubeStandIn:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()


@dataclass
class KubeProcess(_Admin):
    """The stand-in as a child process (what ``racklife lab up`` runs); ``kubeconfig`` is how to reach it."""

    kubeconfig: Path = Path("kubeconfig")
    proc: subprocess.Popen[bytes] | None = field(default=None, init=False, repr=False)

    def start(self, timeout_s: float = 20.0, log: Path | None = None) -> KubeProcess:
        self.kubeconfig.unlink(missing_ok=True)
        env = dict(os.environ, RACKLIFE_KUBE_TOKEN=self.token)
        out = log.open("ab") if log is not None else subprocess.DEVNULL
        self.proc = subprocess.Popen([sys.executable, "-m", "lifecycle.lab.kube", "--kubeconfig", str(self.kubeconfig)],
                                     env=env, stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout_s
        while not self.kubeconfig.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("the Kubernetes stand-in process did not start")
            time.sleep(0.05)
        self.url = yaml.safe_load(self.kubeconfig.read_text())["clusters"][0]["cluster"]["server"]
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None


def main(argv: list[str] | None = None) -> int:
    """Serve until SIGTERM/SIGINT; the kubeconfig appears once the port is bound (readiness signal)."""
    args = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args.add_argument("--kubeconfig", type=Path, required=True)
    args.add_argument("--port", type=int, default=0)
    opts = args.parse_args(argv)
    stand_in = KubeStandIn(port=opts.port, token=os.environ.get("RACKLIFE_KUBE_TOKEN") or secrets.token_urlsafe(24))
    done = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: done.set())
    stand_in.start()
    stand_in.write_kubeconfig(opts.kubeconfig)
    print(f"kube stand-in serving on {stand_in.url}", flush=True)
    done.wait()
    stand_in.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The write path: create, replace, patch, delete and evict, with the API server's rules in its order.

Why it exists: every guarantee a client relies on when it writes lives here —
fields validated before anything is stored, a stale ``resourceVersion``
refused whatever the verb or patch type, ``status`` written only through its
subresource, deletion that is graceful for a pod on a node and held by
finalizers, an eviction that asks the budget first. ``ApiServer`` (in
``server``) routes requests to these methods.
"""

from __future__ import annotations

import copy
import json
import secrets
import time
import uuid
from collections.abc import Mapping
from typing import Any

from aiohttp import web

from lifecycle.lab.kube import budgets, kinds, patching, protobuf, rules
from lifecycle.lab.kube.answers import ApiError, answer, conflict, invalid, later, not_found
from lifecycle.lab.kube.kinds import NAMESPACES, NODES, PDBS, PODS, Kind, Route
from lifecycle.lab.kube.kubelet import LabKubelet, now
from lifecycle.lab.kube.store import Store

Obj = dict[str, Any]
BUILT_IN_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
DEFAULT_GRACE_S = 30
PROTOBUF = "application/vnd.kubernetes.protobuf"


class WritePath:
    """The writes of one cluster's API, over its ``store``, with its ``kubelet`` told of what it must act on."""

    store: Store
    kubelet: LabKubelet
    budget_lag_s: float = 0.0
    """How long the disruption controller takes to observe a budget's new spec (0: at once)."""
    _budget_seen_at: dict[str, float]

    def _observed(self, pdb: Mapping[str, Any]) -> bool:
        at = self._budget_seen_at.get(str(pdb["metadata"].get("uid")))
        return at is None or time.monotonic() >= at

    def _budget_changed(self, pdb: Mapping[str, Any]) -> None:
        if self.budget_lag_s > 0:
            self._budget_seen_at[str(pdb["metadata"]["uid"])] = time.monotonic() + self.budget_lag_s

    # ------------------------------------------------------------ shared with reads

    def _current(self, at: Route) -> Obj:
        assert at.name is not None
        obj = self.store.get(at.kind, at.namespace, at.name)
        if obj is None:
            raise not_found(at.kind, at.name)
        return obj

    def _shown(self, kind: Kind, obj: Obj) -> Obj:
        """The object as clients see it: controllers' status (budgets, replica sets) computed now."""
        if kind is PDBS:
            obj = dict(obj, status=budgets.status_object(self.store, obj, self._observed(obj)))
        elif kind in (kinds.REPLICASETS, kinds.DAEMONSETS):
            obj = dict(obj, status=budgets.owned_status(self.store, obj, kind is kinds.DAEMONSETS))
        return obj

    async def _body(self, request: web.Request) -> Any:
        media = (request.headers.get("Content-Type") or "").split(";")[0].strip()
        if request.method in ("POST", "PUT") and media == PROTOBUF:
            try:
                return protobuf.decode(await request.read())
            except protobuf.Undecodable as e:
                raise ApiError(415, "UnsupportedMediaType", str(e)) from e
        if request.method in ("POST", "PUT") and media not in ("", "application/json", "*/*"):
            raise ApiError(415, "UnsupportedMediaType", "the body of the request was in an unknown format - "
                           "accepted media types include: application/json")
        raw = await request.read()
        try:
            return json.loads(raw) if raw else None
        except ValueError as e:
            raise ApiError(400, "BadRequest", f"the body of the request could not be decoded as JSON: {e}") from e

    def _fields(self, request: web.Request, kind_name: str, obj: Obj) -> tuple[Obj, dict[str, str]]:
        """Unknown fields: refused (Strict), warned about (Warn, the default) or dropped (Ignore)."""
        mode = request.query.get("fieldValidation", "Warn")
        schema = rules.KNOWN.get(kind_name)
        unknown = rules.unknown_fields(obj, schema)
        if unknown and mode == "Strict":
            text = ", ".join(f'unknown field "{u}"' for u in unknown)
            raise ApiError(400, "BadRequest", f"strict decoding error: {text}")
        headers = {"Warning": ", ".join(f'299 - "unknown field \\"{u}\\""' for u in unknown)} \
            if unknown and mode == "Warn" else {}
        return rules.prune(obj, schema), headers

    # ------------------------------------------------------------ create, replace, patch

    async def _create(self, request: web.Request, at: Route) -> web.StreamResponse:
        body = await self._body(request)
        if not isinstance(body, dict):
            raise ApiError(400, "BadRequest", "the body of the request is not a JSON object")
        kind = at.kind
        for key, want in (("apiVersion", kind.api_version), ("kind", kind.kind)):
            if body.get(key) not in (None, "", want):
                raise ApiError(400, "BadRequest", f"the {key} in the data ({body[key]}) does not match the "
                               f"expected {key} ({want})")
        obj, warnings = self._fields(request, kind.kind, body)
        obj.update(apiVersion=kind.api_version, kind=kind.kind)
        meta = obj.setdefault("metadata", {})
        if not isinstance(meta, dict):
            raise ApiError(400, "BadRequest", "metadata must be an object")
        if kind.namespaced:
            ns = at.namespace or meta.get("namespace") or "default"
            if meta.get("namespace") not in (None, "", ns):
                raise ApiError(400, "BadRequest", "the namespace of the provided object does not match the "
                               "namespace sent on the request")
            meta["namespace"] = ns
            self._namespace_open(kind, ns, str(meta.get("name") or meta.get("generateName") or ""))
        else:
            meta.pop("namespace", None)
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = f"{meta['generateName']}{secrets.token_hex(3)[:5]}"
        name = str(meta.get("name") or "")
        if not name:
            raise invalid(kind, "", [rules.Cause("FieldValueRequired", "metadata.name",
                                                  "Required value: name or generateName is required")])
        found = rules.causes(kind, obj)
        if kind is PODS and not (obj.get("spec") or {}).get("containers"):
            found.append(rules.Cause("FieldValueRequired", "spec.containers", "Required value"))
        if found:
            raise invalid(kind, name, found)
        for key in ("uid", "resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds", "generation"):
            meta.pop(key, None)
        meta.update(uid=str(uuid.uuid4()), creationTimestamp=now())
        if kind.generation:
            meta["generation"] = 1
        self._defaults(kind, obj)
        if self.store.get(kind, meta.get("namespace"), name) is not None:
            raise ApiError(409, "AlreadyExists", f'{kind.plural} "{name}" already exists', name=name,
                           group=kind.group, kind=kind.plural)
        if request.query.get("dryRun") == "All":
            return answer(obj, 201, warnings)
        stored = self.store.put(kind, obj, None)
        if kind is PDBS:
            self._budget_changed(stored)
        if kind is PODS:
            self.kubelet.pod_created(stored)
        elif kind is NODES:
            self.kubelet.node_changed(stored)
        return answer(stored, 201, warnings)

    def _namespace_open(self, kind: Kind, ns: str, name: str) -> None:
        namespace = self.store.get(NAMESPACES, None, ns)
        if namespace is None:
            raise not_found(NAMESPACES, ns)
        if namespace["metadata"].get("deletionTimestamp"):
            raise ApiError(403, "Forbidden", f'{kind.plural} "{name}" is forbidden: unable to create new content in '
                           f"namespace {ns} because it is being terminated", name=name, kind=kind.plural)

    def _defaults(self, kind: Kind, obj: Obj) -> None:
        if kind.status_on_create == "reset":
            obj["status"] = {}
        if kind is PODS:
            spec = obj.setdefault("spec", {})
            for key, value in (("terminationGracePeriodSeconds", DEFAULT_GRACE_S), ("restartPolicy", "Always"),
                               ("dnsPolicy", "ClusterFirst"), ("schedulerName", "default-scheduler")):
                spec.setdefault(key, value)
            obj["status"] = {"phase": "Pending", "qosClass": "BestEffort"}
        elif kind is NAMESPACES:
            obj.setdefault("spec", {})["finalizers"] = ["kubernetes"]
            obj["status"] = {"phase": "Active"}
            obj["metadata"].setdefault("labels", {})["kubernetes.io/metadata.name"] = obj["metadata"]["name"]

    async def _put(self, request: web.Request, at: Route) -> web.StreamResponse:
        body = await self._body(request)
        if not isinstance(body, dict):
            raise ApiError(400, "BadRequest", "the body of the request is not a JSON object")
        current = self._current(at)
        meta = body.get("metadata") or {}
        if meta.get("name") not in (None, at.name):
            raise ApiError(400, "BadRequest", f"the name of the object ({meta.get('name')}) does not match the name "
                           f"on the URL ({at.name})")
        asked = meta.get("resourceVersion")
        if asked not in (None, "") and str(asked) != current["metadata"]["resourceVersion"]:
            raise conflict(at.kind, current["metadata"]["name"])
        obj, warnings = self._fields(request, at.kind.kind, body)
        return self._update(request, at, current, obj, warnings)

    async def _patch(self, request: web.Request, at: Route) -> web.StreamResponse:
        media = (request.headers.get("Content-Type") or "").split(";")[0].strip()
        if media == patching.APPLY:
            raise ApiError(415, "UnsupportedMediaType", "the lab stand-in does not implement server-side apply "
                           "(application/apply-patch+yaml); use kubectl apply without --server-side")
        if media not in patching.TYPES:
            raise ApiError(415, "UnsupportedMediaType", f"the body of the request was in an unknown format - "
                           f"accepted media types include: {', '.join(patching.TYPES)}")
        current = self._current(at)
        try:
            patched = patching.apply(media, current, await self._body(request))
        except patching.PatchError as e:
            raise ApiError(e.code, "Invalid" if e.code == 422 else "BadRequest", str(e)) from e
        asked = (patched.get("metadata") or {}).get("resourceVersion")
        if asked not in (None, "") and str(asked) != current["metadata"]["resourceVersion"]:
            raise conflict(at.kind, current["metadata"]["name"])
        if (patched.get("metadata") or {}).get("name") not in (None, at.name):
            raise ApiError(400, "BadRequest", "the name of the object does not match the name on the URL")
        obj, warnings = self._fields(request, at.kind.kind, patched)
        return self._update(request, at, current, obj, warnings)

    def _update(self, request: web.Request, at: Route, old: Obj, new: Obj, warnings: dict[str, str]) -> web.Response:
        """An update of the object (or of its ``status``): the API's rules, then the write."""
        kind = at.kind
        if at.sub == "status":
            merged = copy.deepcopy(old)
            merged["status"] = new.get("status") or {}
            new = merged
        else:
            if kind.has_status:
                new["status"] = copy.deepcopy(old.get("status") or {})
            new.setdefault("metadata", {})
        meta, before = new["metadata"], old["metadata"]
        for key in ("name", "namespace", "uid", "creationTimestamp", "deletionTimestamp",
                    "deletionGracePeriodSeconds", "generation"):
            if key in before:
                meta[key] = before[key]
            else:
                meta.pop(key, None)
        new.update(apiVersion=kind.api_version, kind=kind.kind)
        if before.get("deletionTimestamp") and set(meta.get("finalizers") or []) - set(before.get("finalizers") or []):
            raise invalid(kind, before["name"], [rules.Cause("FieldValueForbidden", "metadata.finalizers",
                           "Forbidden: no new finalizers can be added if the object is being deleted")])
        if kind is PODS and at.sub is None:
            self._pod_spec_immutable(old, new)
        found = rules.causes(kind, new)
        if found:
            raise invalid(kind, before["name"], found)
        if kind.generation and (new.get("spec") != old.get("spec")):
            meta["generation"] = int(before.get("generation", 1)) + 1
        meta["resourceVersion"] = before["resourceVersion"]
        if new == old:
            return answer(self._shown(kind, old), 200, warnings)  # a no-op write changes nothing, not even the version
        if request.query.get("dryRun") == "All":
            return answer(self._shown(kind, new), 200, warnings)
        if meta.get("deletionTimestamp") and not meta.get("finalizers") and \
                (kind is not PODS or meta.get("deletionGracePeriodSeconds") == 0):
            return answer(self.store.remove(kind, meta.get("namespace"), meta["name"]), 200, warnings)
        stored = self._write(kind, new, old)
        if kind is PDBS and meta.get("generation") != before.get("generation"):
            self._budget_changed(stored)
        return answer(self._shown(kind, stored), 200, warnings)

    def _write(self, kind: Kind, new: Obj, old: Obj | None) -> Obj:
        stored = self.store.put(kind, new, old)
        if kind is NODES:
            self.kubelet.node_changed(stored)
        return stored

    @staticmethod
    def _pod_spec_immutable(old: Obj, new: Obj) -> None:
        def frozen(spec: Any) -> Any:
            spec = copy.deepcopy(spec or {})
            for key in ("activeDeadlineSeconds", "tolerations", "terminationGracePeriodSeconds", "schedulingGates"):
                spec.pop(key, None)
            for c in spec.get("containers") or []:
                c.pop("image", None)
            return spec
        if frozen(old.get("spec")) != frozen(new.get("spec")):
            raise invalid(PODS, old["metadata"]["name"], [rules.Cause(
                "FieldValueForbidden", "spec", "Forbidden: pod updates may not change fields other than "
                "`spec.containers[*].image`, `spec.initContainers[*].image`, `spec.activeDeadlineSeconds`, "
                "`spec.tolerations` (only additions to existing tolerations), "
                "`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)")])

    # ------------------------------------------------------------ deletion

    async def _delete(self, request: web.Request, at: Route) -> web.StreamResponse:
        body = await self._body(request) or {}
        current = self._current(at)
        grace = body.get("gracePeriodSeconds", request.query.get("gracePeriodSeconds"))
        pre = body.get("preconditions") or {}
        for key in ("uid", "resourceVersion"):
            if pre.get(key) and pre[key] != current["metadata"].get(key):
                raise ApiError(409, "Conflict", f"Precondition failed: {key.upper() if key == 'uid' else key} in "
                               f"precondition: {pre[key]}, {key} in object meta: {current['metadata'].get(key)}")
        if at.kind is NAMESPACES and current["metadata"]["name"] in BUILT_IN_NAMESPACES:
            raise ApiError(403, "Forbidden", f'namespaces "{at.name}" is forbidden: this namespace may not be deleted',
                           name=at.name, kind="namespaces")
        if request.query.get("dryRun") == "All" or body.get("dryRun") == ["All"]:
            return answer(current)
        return answer(self._delete_obj(at.kind, current, None if grace is None else int(grace)))

    def _delete_obj(self, kind: Kind, obj: Obj, grace: int | None) -> Obj:
        """Delete as the API does: gracefully for a pod on a node, Terminating for a namespace, held by finalizers."""
        meta = obj["metadata"]
        ns, name = meta.get("namespace"), meta["name"]
        if self.store.get(kind, ns, name) is None:
            return obj
        if kind is NAMESPACES:
            if meta.get("deletionTimestamp") and grace == 0:
                return self.store.remove(kind, None, name)
            if meta.get("deletionTimestamp"):
                return obj
            new = copy.deepcopy(obj)
            new["metadata"].update(deletionTimestamp=now(), deletionGracePeriodSeconds=0)
            new["status"] = {"phase": "Terminating"}
            stored = self.store.put(kind, new, obj)
            self.kubelet.namespace_deleting(stored)
            return stored
        if kind is PODS:
            spec, phase = obj.get("spec") or {}, (obj.get("status") or {}).get("phase")
            if grace is None:
                grace = int(spec.get("terminationGracePeriodSeconds", DEFAULT_GRACE_S))
            if not spec.get("nodeName") or phase in ("Succeeded", "Failed"):
                grace = 0
            held = meta.get("deletionGracePeriodSeconds")
            if held is not None and grace >= int(held):
                return obj  # already terminating, and sooner than asked
            if grace > 0:
                new = copy.deepcopy(obj)
                new["metadata"].update(deletionTimestamp=later(grace), deletionGracePeriodSeconds=grace)
                stored = self.store.put(kind, new, obj)
                self.kubelet.pod_deleting(stored, grace)
                return stored
        if meta.get("finalizers"):
            new = copy.deepcopy(obj)
            new["metadata"].setdefault("deletionTimestamp", now())
            new["metadata"]["deletionGracePeriodSeconds"] = 0
            return self.store.put(kind, new, obj) if new != obj else obj
        return self.store.remove(kind, ns, name)

    async def _scale(self, request: web.Request, at: Route) -> web.StreamResponse:
        """``replicasets/{name}/scale`` (autoscaling/v1 Scale): read or change ``spec.replicas``."""
        current = self._current(at)
        meta = current["metadata"]
        shown = self._shown(at.kind, current)
        scale: Obj = {"kind": "Scale", "apiVersion": "autoscaling/v1",
                      "metadata": {k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion",
                                                        "creationTimestamp") if k in meta},
                      "spec": {"replicas": int((current.get("spec") or {}).get("replicas", 1))},
                      "status": {"replicas": int(shown["status"].get("replicas", 0)), "selector": ",".join(
                          f"{k}={v}" for k, v in ((current.get("spec") or {}).get("selector") or {})
                          .get("matchLabels", {}).items())}}
        if request.method == "GET":
            return answer(scale)
        if request.method not in ("PATCH", "PUT"):
            raise ApiError(405, "MethodNotAllowed", f"{request.method} is not supported on a scale")
        body = await self._body(request)
        if request.method == "PATCH":
            media = (request.headers.get("Content-Type") or "").split(";")[0].strip()
            try:
                body = patching.apply(media, scale, body)
            except patching.PatchError as e:
                raise ApiError(e.code, "BadRequest", str(e)) from e
        replicas = ((body or {}).get("spec") or {}).get("replicas")
        if not isinstance(replicas, int) or replicas < 0:
            raise invalid(at.kind, meta["name"], [rules.Cause("FieldValueInvalid", "spec.replicas",
                          f"Invalid value: {replicas!r}: must be greater than or equal to 0")])
        asked = ((body or {}).get("metadata") or {}).get("resourceVersion")
        if asked not in (None, "") and str(asked) != meta["resourceVersion"]:
            raise conflict(at.kind, meta["name"])
        new = copy.deepcopy(current)
        new["spec"]["replicas"] = replicas
        sub = Route(at.kind, at.namespace, at.name)
        self._update(request, sub, current, new, {})
        scale["spec"]["replicas"] = replicas
        scale["metadata"]["resourceVersion"] = str(self.store.version)
        return answer(scale)

    async def _evict(self, request: web.Request, at: Route) -> web.StreamResponse:
        body = await self._body(request) or {}
        if not isinstance(body, dict):
            raise ApiError(400, "BadRequest", "the body of the request is not a JSON object")
        body, _ = self._fields(request, "Eviction", body)
        named = (body.get("metadata") or {}).get("name")
        if named not in (None, at.name):
            raise ApiError(400, "BadRequest", "name in URL does not match name in Eviction object")
        pod = self._current(at)
        verdict = budgets.evict(self.store, pod, self._observed)
        if not verdict.allowed:
            details: Obj = {"causes": [{"reason": "DisruptionBudget", "message": verdict.cause}]} if verdict.cause \
                else {}
            if verdict.retry_after_s:
                details["retryAfterSeconds"] = verdict.retry_after_s
            raise ApiError(verdict.code, "TooManyRequests" if verdict.code == 429 else "InternalError",
                           verdict.message, **details)
        options = body.get("deleteOptions") or {}
        if options.get("dryRun") != ["All"]:
            grace = options.get("gracePeriodSeconds")
            self._delete_obj(PODS, pod, None if grace is None else int(grace))
        return answer({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}, 201)

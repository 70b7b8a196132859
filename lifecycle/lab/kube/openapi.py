"""A minimal ``/openapi/v3``: enough for kubectl to choose server-side field validation.

Why it exists: before ``kubectl apply`` (and ``create``) sends an object it
asks the server's OpenAPI v3 document whether the kind's PATCH operation takes
a ``fieldValidation`` parameter; if it does, kubectl sends
``fieldValidation=Strict`` and leaves unknown fields to the server (which
``rules`` then refuses); if the document is missing, kubectl fails with
"failed to download openapi". The documents carry paths and
``x-kubernetes-group-version-kind`` only — no schemas: kubectl then computes
strategic merge patches from its compiled-in types, as it does for any
built-in kind it cannot find in the spec.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from lifecycle.lab.kube.kinds import KINDS, VERSION, Kind

Obj = dict[str, Any]


def _gv_path(group: str, version: str) -> str:
    return f"apis/{group}/{version}" if group else "api/v1"


def _operation(kind: Kind, verb: str) -> Obj:
    params = [{"name": "fieldValidation", "in": "query", "schema": {"type": "string", "uniqueItems": True}},
              {"name": "fieldManager", "in": "query", "schema": {"type": "string", "uniqueItems": True}},
              {"name": "dryRun", "in": "query", "schema": {"type": "string", "uniqueItems": True}}]
    return {"operationId": f"{verb}{kind.kind}", "parameters": params,
            "x-kubernetes-action": verb, "responses": {"200": {"description": "OK"}},
            "x-kubernetes-group-version-kind": {"group": kind.group, "version": kind.version, "kind": kind.kind}}


def group_version(path: str) -> Obj | None:
    """``/openapi/v3/api/v1``, ``/openapi/v3/apis/policy/v1``, …"""
    kinds = [k for k in KINDS if _gv_path(k.group, k.version) == path]
    if not kinds:
        return None
    paths: Obj = {}
    for k in kinds:
        root = f"/{path}/namespaces/{{namespace}}/{k.plural}" if k.namespaced else f"/{path}/{k.plural}"
        paths[root] = {"post": _operation(k, "post")}
        paths[f"{root}/{{name}}"] = {"get": _operation(k, "get"), "put": _operation(k, "put"),
                                     "patch": _operation(k, "patch"), "delete": _operation(k, "delete")}
    return {"openapi": "3.0.0", "info": {"title": "Kubernetes", "version": VERSION["gitVersion"]},
            "paths": paths, "components": {"schemas": {}}}


def root() -> Obj:
    """``/openapi/v3``: where each group version's document is (with a content hash, as clients cache by it)."""
    out: Obj = {}
    for gv in dict.fromkeys(_gv_path(k.group, k.version) for k in KINDS):
        digest = hashlib.sha512(json.dumps(group_version(gv), sort_keys=True).encode()).hexdigest()[:32].upper()
        out[gv] = {"serverRelativeURL": f"/openapi/v3/{gv}?hash={digest}"}
    return {"paths": out}

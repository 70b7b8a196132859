"""The resource kinds the stand-in serves, as one table, and the discovery documents built from it.

Why it exists: clients learn what a server offers from discovery, and they
trust it completely — kubectl resolves ``no`` to nodes from the short names,
decides that ``drain`` may evict (rather than delete) from the
``pods/eviction`` entry's group, version and kind, and falls back from
aggregated discovery to these plain documents. One table row per kind keeps
discovery, routing, status handling and generation bumps in agreement.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

Obj = dict[str, Any]
VERSION = {"major": "1", "minor": "32", "gitVersion": "v1.32.4", "gitCommit": "racklife-lab-stand-in",
           "gitTreeState": "clean", "buildDate": "2025-04-22T16:03:14Z", "goVersion": "go1.23.6", "compiler": "gc",
           "platform": "linux/amd64"}
ALL_VERBS = ("create", "delete", "get", "list", "patch", "update", "watch")


@dataclass(frozen=True)
class Subresource:
    name: str
    kind: str
    verbs: tuple[str, ...]
    group: str | None = None
    """Set when the subresource's kind lives in another group (``pods/eviction`` → policy/v1 Eviction)."""
    version: str | None = None


@dataclass(frozen=True)
class Kind:
    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    subresources: tuple[Subresource, ...] = ()
    name_rule: str = "subdomain"
    """``subdomain`` (RFC 1123 subdomain) or ``label`` (RFC 1123 label), as kube-apiserver validates names."""
    status_on_create: str = "keep"
    """``keep`` (a kubelet registers a Node with its status) or ``reset`` (the API drops a client's status)."""
    generation: bool = False
    """Whether ``metadata.generation`` counts spec changes (controllers compare it with observedGeneration)."""

    @property
    def key(self) -> tuple[str, str]:
        return (self.group, self.plural)

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def singular(self) -> str:
        return self.kind.lower()

    @property
    def has_status(self) -> bool:
        return any(s.name == "status" for s in self.subresources)

    def base_path(self, namespace: str | None) -> str:
        root = f"/apis/{self.group}/{self.version}" if self.group else "/api/v1"
        return f"{root}/namespaces/{namespace}/{self.plural}" if self.namespaced and namespace else \
            f"{root}/{self.plural}"


def _status(kind: str) -> Subresource:
    return Subresource("status", kind, ("get", "patch", "update"))


KINDS: tuple[Kind, ...] = (
    Kind("", "v1", "nodes", "Node", False, ("no",), subresources=(_status("Node"),)),
    Kind("", "v1", "pods", "Pod", True, ("po",), ("all",), subresources=(
        _status("Pod"), Subresource("eviction", "Eviction", ("create",), "policy", "v1"),
    ), status_on_create="reset"),
    Kind("", "v1", "namespaces", "Namespace", False, ("ns",), subresources=(_status("Namespace"),),
         name_rule="label", status_on_create="reset"),
    Kind("", "v1", "events", "Event", True, ("ev",)),
    Kind("coordination.k8s.io", "v1", "leases", "Lease", True),
    Kind("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", True, ("pdb",),
         subresources=(_status("PodDisruptionBudget"),), status_on_create="reset", generation=True),
    Kind("apps", "v1", "daemonsets", "DaemonSet", True, ("ds",), ("all",),
         subresources=(_status("DaemonSet"),), status_on_create="reset", generation=True),
    Kind("apps", "v1", "replicasets", "ReplicaSet", True, ("rs",), ("all",),
         subresources=(_status("ReplicaSet"), Subresource("scale", "Scale", ("get", "patch", "update"),
                                                           "autoscaling", "v1")),
         status_on_create="reset", generation=True),
)
BY_PATH: dict[tuple[str, str, str], Kind] = {(k.group, k.version, k.plural): k for k in KINDS}
BY_KEY: dict[tuple[str, str], Kind] = {k.key: k for k in KINDS}
NODES, PODS, NAMESPACES, EVENTS, LEASES, PDBS, DAEMONSETS, REPLICASETS = KINDS
GROUPS: tuple[str, ...] = tuple(dict.fromkeys(k.group for k in KINDS if k.group))


def _hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def versions_doc(address: str) -> Obj:
    """``GET /api``."""
    return {"kind": "APIVersions", "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": address}]}


def _group(name: str) -> Obj:
    gv = {"groupVersion": f"{name}/v1", "version": "v1"}
    return {"name": name, "versions": [gv], "preferredVersion": gv}


def groups_doc() -> Obj:
    """``GET /apis`` (plain discovery: clients asking for the aggregated form fall back to it)."""
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": [_group(g) for g in GROUPS]}


def group_doc(name: str) -> Obj | None:
    """``GET /apis/{group}``."""
    return {"kind": "APIGroup", "apiVersion": "v1", **_group(name)} if name in GROUPS else None


def resources_doc(group: str, version: str) -> Obj | None:
    """``GET /api/v1`` or ``GET /apis/{group}/{version}``: every resource and subresource with its verbs."""
    kinds = [k for k in KINDS if (k.group, k.version) == (group, version)]
    if not kinds:
        return None
    out: list[Obj] = []
    for k in kinds:
        entry: Obj = {"name": k.plural, "singularName": k.singular, "namespaced": k.namespaced, "kind": k.kind,
                      "verbs": list(ALL_VERBS), "storageVersionHash": _hash(k.api_version + k.kind)}
        if k.short_names:
            entry["shortNames"] = list(k.short_names)
        if k.categories:
            entry["categories"] = list(k.categories)
        out.append(entry)
        for sub in k.subresources:
            item: Obj = {"name": f"{k.plural}/{sub.name}", "singularName": "", "namespaced": k.namespaced,
                         "kind": sub.kind, "verbs": list(sub.verbs)}
            if sub.group is not None:
                item["group"], item["version"] = sub.group, sub.version
            out.append(item)
    return {"kind": "APIResourceList", "apiVersion": "v1",
            "groupVersion": f"{group}/{version}" if group else version, "resources": out}


@dataclass
class Route:
    """A request path taken apart: which kind, namespace, object and subresource it names."""

    kind: Kind
    namespace: str | None = None
    name: str | None = None
    sub: str | None = None
    extra: list[str] = field(default_factory=list)


def route(parts: list[str]) -> Route | None:
    """``['api','v1','namespaces','ns','pods','a','eviction']`` → pods, ns, a, eviction; None if not a resource."""
    if parts[:2] == ["api", "v1"]:
        group, version, rest = "", "v1", parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        return None
    namespace = None
    if len(rest) >= 3 and rest[0] == "namespaces" and (group, version, rest[2]) in BY_PATH:
        namespace, rest = rest[1], rest[2:]
    if not rest or (group, version, rest[0]) not in BY_PATH:
        return None
    kind = BY_PATH[(group, version, rest[0])]
    if kind.namespaced is False and namespace is not None:
        return None
    return Route(kind, namespace, rest[1] if len(rest) > 1 else None, rest[2] if len(rest) > 2 else None,
                 rest[3:])

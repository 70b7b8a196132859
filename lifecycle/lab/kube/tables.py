"""``meta.k8s.io/v1`` Table answers: the columns ``kubectl get`` prints, computed server-side.

Why it exists: kubectl asks the server for a Table and prints its columns;
without one it shows only NAME and AGE, and a person reading ``kubectl get
nodes`` in the lab would not see ``SchedulingDisabled`` or a pod's
``Terminating``. The columns and cell values follow kube-apiserver's printers
for these kinds.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Mapping
from typing import Any

Obj = dict[str, Any]
Column = tuple[str, str, int]  # name, type, priority (1 = shown with -o wide)
_NAME: Column = ("Name", "string", 0)
_AGE: Column = ("Age", "string", 0)


def age(stamp: str | None, now: datetime.datetime | None = None) -> str:
    """kubectl's ``HumanDuration`` of the time since ``stamp``."""
    if not stamp:
        return "<unknown>"
    then = datetime.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.UTC)
    s = max(0, int(((now or datetime.datetime.now(datetime.UTC)) - then).total_seconds()))
    if s < 120:
        return f"{s}s"
    m = s // 60
    if m < 10:
        return f"{m}m{s % 60}s" if s % 60 else f"{m}m"
    if m < 180:
        return f"{m}m"
    h = m // 60
    if h < 8:
        return f"{h}h{m % 60}m" if m % 60 else f"{h}h"
    if h < 48:
        return f"{h}h"
    d = h // 24
    if d < 8:
        return f"{d}d{h % 24}h" if h % 24 else f"{d}d"
    return f"{d}d" if d < 730 else f"{d // 365}y"


def _meta(obj: Obj) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def _created(obj: Obj) -> str:
    return age(_meta(obj).get("creationTimestamp"))


def _node(obj: Obj) -> list[Any]:
    status = obj.get("status") or {}
    ready = next((c.get("status") for c in status.get("conditions") or [] if c.get("type") == "Ready"), None)
    text = {"True": "Ready", "False": "NotReady"}.get(str(ready), "Unknown")
    if (obj.get("spec") or {}).get("unschedulable"):
        text += ",SchedulingDisabled"
    labels = _meta(obj).get("labels") or {}
    roles = sorted(k.split("/", 1)[1] for k in labels if k.startswith("node-role.kubernetes.io/") and "/" in k)
    info = status.get("nodeInfo") or {}
    addrs = {a.get("type"): a.get("address") for a in status.get("addresses") or []}
    return [_meta(obj).get("name"), text, ",".join(roles) or "<none>", _created(obj), info.get("kubeletVersion", ""),
            addrs.get("InternalIP", "<none>"), addrs.get("ExternalIP", "<none>"), info.get("osImage", ""),
            info.get("kernelVersion", ""), info.get("containerRuntimeVersion", "")]


def pod_status_word(obj: Obj) -> str:
    status = obj.get("status") or {}
    if _meta(obj).get("deletionTimestamp"):
        return "Terminating"
    return str(status.get("reason") or status.get("phase") or "Pending")


def _pod(obj: Obj) -> list[Any]:
    status, spec = obj.get("status") or {}, obj.get("spec") or {}
    containers = spec.get("containers") or []
    statuses = status.get("containerStatuses") or []
    ready = sum(1 for c in statuses if c.get("ready"))
    restarts = sum(int(c.get("restartCount") or 0) for c in statuses)
    return [_meta(obj).get("name"), f"{ready}/{len(containers)}", pod_status_word(obj), restarts, _created(obj),
            status.get("podIP") or "<none>", spec.get("nodeName") or "<none>",
            status.get("nominatedNodeName") or "<none>", "<none>"]


def _pdb(obj: Obj) -> list[Any]:
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    return [_meta(obj).get("name"), str(spec.get("minAvailable", "N/A")), str(spec.get("maxUnavailable", "N/A")),
            int(status.get("disruptionsAllowed") or 0), _created(obj)]


def _namespace(obj: Obj) -> list[Any]:
    return [_meta(obj).get("name"), (obj.get("status") or {}).get("phase", "Active"), _created(obj)]


def _event(obj: Obj) -> list[Any]:
    inv = obj.get("involvedObject") or {}
    last = obj.get("lastTimestamp") or obj.get("eventTime") or _meta(obj).get("creationTimestamp")
    return [age(str(last)[:19] + "Z" if last else None), obj.get("type", ""), obj.get("reason", ""),
            f"{str(inv.get('kind', '')).lower()}/{inv.get('name', '')}", obj.get("message", "")]


def _lease(obj: Obj) -> list[Any]:
    return [_meta(obj).get("name"), (obj.get("spec") or {}).get("holderIdentity") or "", _created(obj)]


def _daemonset(obj: Obj) -> list[Any]:
    s = obj.get("status") or {}
    selector = (obj.get("spec") or {}).get("template", {}).get("spec", {}).get("nodeSelector") or {}
    return [_meta(obj).get("name"), s.get("desiredNumberScheduled", 0), s.get("currentNumberScheduled", 0),
            s.get("numberReady", 0), s.get("updatedNumberScheduled", 0), s.get("numberAvailable", 0),
            ",".join(f"{k}={v}" for k, v in selector.items()) or "<none>", _created(obj)]


def _replicaset(obj: Obj) -> list[Any]:
    s = obj.get("status") or {}
    return [_meta(obj).get("name"), (obj.get("spec") or {}).get("replicas", 1), s.get("replicas", 0),
            s.get("readyReplicas", 0), _created(obj)]


PRINTERS: dict[str, tuple[tuple[Column, ...], Callable[[Obj], list[Any]]]] = {
    "Node": ((_NAME, ("Status", "string", 0), ("Roles", "string", 0), _AGE, ("Version", "string", 0),
              ("Internal-IP", "string", 1), ("External-IP", "string", 1), ("OS-Image", "string", 1),
              ("Kernel-Version", "string", 1), ("Container-Runtime", "string", 1)), _node),
    "Pod": ((_NAME, ("Ready", "string", 0), ("Status", "string", 0), ("Restarts", "string", 0), _AGE,
             ("IP", "string", 1), ("Node", "string", 1), ("Nominated Node", "string", 1),
             ("Readiness Gates", "string", 1)), _pod),
    "PodDisruptionBudget": ((_NAME, ("Min Available", "string", 0), ("Max Unavailable", "string", 0),
                             ("Allowed Disruptions", "integer", 0), _AGE), _pdb),
    "Namespace": ((_NAME, ("Status", "string", 0), _AGE), _namespace),
    "Event": ((("Last Seen", "string", 0), ("Type", "string", 0), ("Reason", "string", 0),
               ("Object", "string", 0), ("Message", "string", 0)), _event),
    "Lease": ((_NAME, ("Holder", "string", 0), _AGE), _lease),
    "DaemonSet": ((_NAME, ("Desired", "integer", 0), ("Current", "integer", 0), ("Ready", "integer", 0),
                   ("Up-to-date", "integer", 0), ("Available", "integer", 0), ("Node Selector", "string", 0),
                   _AGE), _daemonset),
    "ReplicaSet": ((_NAME, ("Desired", "integer", 0), ("Current", "integer", 0), ("Ready", "integer", 0),
                    _AGE), _replicaset),
}


def wants_table(accept: str) -> bool:
    return any("as=Table" in part and "g=meta.k8s.io" in part for part in accept.split(","))


def table(kind: str, objects: list[Obj], *, version: str, full: bool) -> Obj:
    """A Table of ``objects``; each row carries the object (``includeObject=Object``) or its metadata."""
    columns, cells = PRINTERS[kind]
    rows = []
    for obj in objects:
        shown = obj if full else {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                                  "metadata": obj.get("metadata") or {}}
        rows.append({"cells": cells(obj), "object": shown})
    return {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": {"resourceVersion": version},
            "columnDefinitions": [{"name": n, "type": t, "format": "name" if n == "Name" else "", "description": n,
                                   "priority": p} for n, t, p in columns],
            "rows": rows}

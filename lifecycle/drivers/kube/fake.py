"""An in-memory Kubernetes for workflow tests, with the API's own rules and injectable faults.

Why it exists: role-swap and upgrade workflows need a cluster that answers
instantly yet does not lie. Objects are stored in API shape and changed with
the same merge-patch, optimistic-concurrency (409), selector and
PodDisruptionBudget rules as the lab's stand-in (``selectors``); the ownership
and drain logic is the shared one in ``base``. An evicted pod, as on a real
kubelet, lingers ``grace_s`` (on the injected clock) before it is gone. Faults:
``unreachable`` and ``auth`` refuse every call. Every primitive call is
counted in ``calls``.
"""

from __future__ import annotations

import copy
import time
import uuid
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from lifecycle.drivers.errors import AuthFailed, OperationFailed, Unreachable
from lifecycle.drivers.kube import selectors as sel
from lifecycle.drivers.kube.base import Conflict, KubeDriver
from lifecycle.drivers.kube.types import (
    GPU_RESOURCE,
    MIRROR_ANNOTATION,
    Budget,
    KubeNode,
    KubePod,
    Refusal,
    Taint,
)

Fault = Literal["unreachable", "auth"]
Obj = dict[str, Any]


def _node(obj: Obj) -> KubeNode:
    meta, spec, status = obj["metadata"], obj.get("spec") or {}, obj.get("status") or {}
    gpus = str((status.get("allocatable") or {}).get(GPU_RESOURCE, "0"))
    return KubeNode(
        name=meta["name"],
        ready=any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or []),
        unschedulable=bool(spec.get("unschedulable")),
        labels=dict(meta.get("labels") or {}),
        annotations=dict(meta.get("annotations") or {}),
        taints=tuple(Taint.from_api(t) for t in spec.get("taints") or []),
        gpus=int(gpus) if gpus.isdigit() else 0,
        resource_version=str(meta["resourceVersion"]),
        boot_id=str((status.get("nodeInfo") or {}).get("bootID") or ""),
    )


def _pod(obj: Obj) -> KubePod:
    meta = obj["metadata"]
    owner = next((o["kind"] for o in meta.get("ownerReferences") or [] if o.get("controller")), None)
    return KubePod(
        namespace=meta["namespace"], name=meta["name"], node=(obj.get("spec") or {}).get("nodeName") or "",
        phase=(obj.get("status") or {}).get("phase") or "Unknown", labels=dict(meta.get("labels") or {}),
        owner_kind=owner, mirror=MIRROR_ANNOTATION in (meta.get("annotations") or {}),
        terminating=bool(meta.get("deletionTimestamp")),
    )


@dataclass
class FakeKubeDriver(KubeDriver):
    clock: Callable[[], float] = field(default=time.monotonic)
    sleep: Callable[[float], None] = field(default=time.sleep)
    grace_s: float = 0.0
    """How long an evicted pod stays Terminating before it is gone."""
    fault: Fault | None = None
    calls: Counter[str] = field(default_factory=Counter)
    _nodes: dict[str, Obj] = field(default_factory=dict)
    _pods: dict[tuple[str, str], Obj] = field(default_factory=dict)
    _pdbs: dict[tuple[str, str], Obj] = field(default_factory=dict)
    _gone_at: dict[tuple[str, str], float] = field(default_factory=dict)
    _version: int = 0

    # ------------------------------------------------------------ setting the scene

    def _stamp(self, obj: Obj) -> Obj:
        self._version += 1
        obj.setdefault("metadata", {})["resourceVersion"] = str(self._version)
        return obj

    def add_node(self, name: str, *, labels: Mapping[str, str] | None = None, taints: tuple[Taint, ...] = (),
                 gpus: int = 8, ready: bool = True) -> KubeNode:
        obj = {"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **dict(labels or {})}},
               "spec": {"taints": [t.to_api() for t in taints]},
               "status": {"allocatable": {GPU_RESOURCE: str(gpus)},
                          "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
                          "nodeInfo": {"bootID": str(uuid.uuid4())}}}  # a kubelet's boot: a new id each time
        self._nodes[name] = self._stamp(obj)
        return _node(obj)

    def remove_node(self, name: str) -> None:
        self._nodes.pop(name, None)

    def delete_node(self, name: str) -> bool:
        self._enter("delete_node", name)
        return self._nodes.pop(name, None) is not None

    def set_ready(self, name: str, ready: bool) -> None:
        """The kubelet reports (or stops reporting) Ready."""
        status = self._stamp(self._nodes[name]).setdefault("status", {})
        status["conditions"] = [{"type": "Ready", "status": "True" if ready else "False"}]

    def admin_cordon(self, name: str) -> None:
        """What ``kubectl cordon`` does: unschedulable, with no racklife mark."""
        self._stamp(self._nodes[name]).setdefault("spec", {})["unschedulable"] = True

    def add_pod(self, name: str, node: str, *, namespace: str = "default", labels: Mapping[str, str] | None = None,
                owner_kind: str | None = None, mirror: bool = False, phase: str = "Running") -> KubePod:
        meta: Obj = {"name": name, "namespace": namespace, "labels": dict(labels or {})}
        if owner_kind:
            meta["ownerReferences"] = [{"kind": owner_kind, "name": f"{name}-owner", "controller": True}]
        if mirror:
            meta["annotations"] = {MIRROR_ANNOTATION: "mirror"}
        ready = "True" if phase == "Running" else "False"
        obj = {"metadata": meta, "spec": {"nodeName": node},
               "status": {"phase": phase, "conditions": [{"type": "Ready", "status": ready}]}}
        self._pods[(namespace, name)] = self._stamp(obj)
        return _pod(obj)

    def delete_pod(self, name: str, namespace: str = "default") -> None:
        self._pods.pop((namespace, name), None)

    def add_pdb(self, name: str, match_labels: Mapping[str, str], *, namespace: str = "default",
                min_available: int | str | None = None, max_unavailable: int | str | None = None) -> None:
        spec: Obj = {"selector": {"matchLabels": dict(match_labels)}}
        if min_available is not None:
            spec["minAvailable"] = min_available
        if max_unavailable is not None:
            spec["maxUnavailable"] = max_unavailable
        self._pdbs[(namespace, name)] = self._stamp({"metadata": {"name": name, "namespace": namespace},
                                                     "spec": spec})

    def budget(self, name: str, namespace: str = "default") -> sel.BudgetStatus:
        pdb = self._pdbs[(namespace, name)]
        wanted = sel.from_label_selector(pdb["spec"].get("selector"))
        pods: list[Mapping[str, Any]] = [p for (ns, _), p in self._live_pods() if ns == namespace
                                         and sel.match_labels(wanted, p["metadata"].get("labels"))]
        return sel.budget_status(pdb, pods)

    # ------------------------------------------------------------ primitives

    def _enter(self, op: str, target: str) -> None:
        self.calls[op] += 1
        if self.fault == "unreachable":
            raise Unreachable(target, "no answer from the Kubernetes API (ConnectError)")
        if self.fault == "auth":
            raise AuthFailed(target, "HTTP 401: Unauthorized")

    def _live_pods(self) -> list[tuple[tuple[str, str], Obj]]:
        now = self.clock()
        for key, at in list(self._gone_at.items()):
            if now >= at:
                self._pods.pop(key, None)
                del self._gone_at[key]
        return list(self._pods.items())

    def node(self, name: str) -> KubeNode:
        self._enter("node", name)
        if name not in self._nodes:
            raise OperationFailed(name, "no such node in Kubernetes")
        return _node(self._nodes[name])

    def nodes(self, labels: Mapping[str, str] | None = None) -> list[KubeNode]:
        self._enter("nodes", "nodes")
        want = dict(labels or {})
        return [_node(o) for o in self._nodes.values()
                if all((o["metadata"].get("labels") or {}).get(k) == v for k, v in want.items())]

    def pods_on(self, node: str, labels: Mapping[str, str] | None = None) -> list[KubePod]:
        self._enter("pods_on", node)
        want = dict(labels or {})
        return [_pod(p) for _, p in self._live_pods() if p["spec"].get("nodeName") == node
                and all((p["metadata"].get("labels") or {}).get(k) == v for k, v in want.items())]

    def _patch_node(self, name: str, patch: Mapping[str, Any]) -> KubeNode:
        self._enter("patch_node", name)
        current = self._nodes.get(name)
        if current is None:
            raise OperationFailed(name, "HTTP 404: no such node")
        asked = (patch.get("metadata") or {}).get("resourceVersion")
        if asked is not None and str(asked) != current["metadata"]["resourceVersion"]:
            raise Conflict(name, "HTTP 409: the object has been modified; please apply your changes to the latest "
                           "version and try again")
        self._nodes[name] = self._stamp(sel.merge_patch(copy.deepcopy(current), patch))
        return _node(self._nodes[name])

    def budgets(self, namespace: str) -> list[Budget]:
        self._enter("budgets", namespace)
        out = []
        for (ns, name), pdb in self._pdbs.items():
            if ns != namespace:
                continue
            spec, status = pdb["spec"], self.budget(name, ns)
            out.append(Budget(ns, name, dict(spec.get("selector") or {}), spec.get("minAvailable"),
                              spec.get("maxUnavailable"), status.expected_pods, status.current_healthy,
                              status.desired_healthy, status.disruptions_allowed))
        return out

    def _evict(self, pod: KubePod) -> Refusal | None:
        self._enter("evict", pod.key)
        key = (pod.namespace, pod.name)
        live = dict(self._live_pods())
        if key not in live or key in self._gone_at:
            return None
        obj = live[key]
        labels = obj["metadata"].get("labels") or {}
        if obj["status"].get("phase") not in ("Succeeded", "Failed"):
            budgets = [(ns, n) for (ns, n), b in self._pdbs.items() if ns == pod.namespace
                       and sel.match_labels(sel.from_label_selector(b["spec"].get("selector")), labels)]
            if len(budgets) > 1:
                raise OperationFailed(pod.key, "HTTP 500: This pod has more than one PodDisruptionBudget, which "
                                      "the eviction subresource does not support.")
            if budgets:
                status = self.budget(budgets[0][1], pod.namespace)
                if status.disruptions_allowed < 1:
                    return Refusal(sel.budget_violation(budgets[0][1], status))
        if self.grace_s > 0:
            obj["metadata"]["deletionTimestamp"] = str(self.clock())
            self._gone_at[key] = self.clock() + self.grace_s
        else:
            del self._pods[key]
        return None

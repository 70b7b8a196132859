"""What the kubelets and the namespace controller would do, so pods and namespaces move through their phases.

Why it exists: the API only records intent. A pod created with a node name is
``Pending`` until that node's kubelet starts it; a deleted pod is
``Terminating`` until the kubelet has stopped it and deletes it for good; a
deleted namespace is ``Terminating`` until its contents are gone. Without
these, ``kubectl drain`` would never see an evicted pod leave and a budget
would never count a pod healthy. The lab runs no containers, so the
"kubelet" of a Node that exists and reports Ready moves its pods at once:
to ``Running`` and Ready (or to the phase a lab test asks for with the
``lab.racklife.io/phase`` annotation, unready with ``lab.racklife.io/ready:
"false"``), and a terminating pod is gone after ``shutdown_s`` or its grace
period, whichever is shorter. A pod on a missing or NotReady node stays as
it is, as on a real cluster whose kubelet is down.
"""

from __future__ import annotations

import asyncio
import copy
import datetime
from collections.abc import Callable
from typing import Any

from lifecycle.lab.kube.kinds import KINDS, LEASES, NAMESPACES, NODES, PODS, Kind
from lifecycle.lab.kube.store import Store

Obj = dict[str, Any]
PHASE_ANNOTATION = "lab.racklife.io/phase"
READY_ANNOTATION = "lab.racklife.io/ready"
AGENT_ANNOTATION = "lab.racklife.io/agent"
"""On a Node whose own agent (``agent.NodeAgent``) runs its pods: this built-in kubelet leaves them alone."""


UNREACHABLE = "node.kubernetes.io/unreachable"


def _parse(stamp: Any) -> datetime.datetime | None:
    if not isinstance(stamp, str) or not stamp:
        return None
    try:
        return datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return None


def _ready(node: Obj) -> str | None:
    return next((c.get("status") for c in (node.get("status") or {}).get("conditions") or []
                 if c.get("type") == "Ready"), None)


def now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _node_ready(store: Store, name: str) -> bool:
    """Whether this built-in kubelet runs the node's pods: the Node is Ready and has no agent of its own."""
    node = store.get(NODES, None, name) if name else None
    if AGENT_ANNOTATION in ((node or {}).get("metadata") or {}).get("annotations", {}):
        return False
    conditions = ((node or {}).get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def running_status(pod: Obj) -> Obj:
    """The status a kubelet reports for a started pod."""
    annotations = pod["metadata"].get("annotations") or {}
    phase = annotations.get(PHASE_ANNOTATION, "Running")
    ready = phase == "Running" and annotations.get(READY_ANNOTATION, "true") != "false"
    stamp = now()
    word = "True" if ready else "False"
    names = [c.get("name", "") for c in (pod.get("spec") or {}).get("containers") or []]
    state: Obj = {"running": {"startedAt": stamp}} if phase == "Running" else \
        {"terminated": {"exitCode": 0 if phase == "Succeeded" else 1, "reason": "Completed" if phase == "Succeeded"
                        else "Error", "startedAt": stamp, "finishedAt": stamp}} if phase in ("Succeeded", "Failed") \
        else {"waiting": {"reason": "ContainerCreating"}}
    ip = f"10.244.{int(pod['metadata']['uid'][:2], 16)}.{int(pod['metadata']['uid'][2:4], 16) % 254 + 1}"
    return {"phase": phase, "podIP": ip, "podIPs": [{"ip": ip}], "startTime": stamp, "qosClass": "BestEffort",
            "conditions": [{"type": t, "status": word if t in ("Ready", "ContainersReady") else "True",
                            "lastTransitionTime": stamp}
                           for t in ("PodScheduled", "Initialized", "ContainersReady", "Ready")],
            "containerStatuses": [{"name": n, "ready": ready, "restartCount": 0, "image": "", "imageID": "",
                                   "started": phase == "Running", "state": state} for n in names]}


class LabKubelet:
    """Moves pods and namespaces on through the server's own write path.

    ``write(kind, new, old)`` stores a new version; ``delete(kind, obj, grace)``
    deletes as a client would (``grace`` None: the object's default).
    """

    def __init__(self, store: Store, write: Callable[[Kind, Obj, Obj], object],
                 delete: Callable[[Kind, Obj, int | None], object], shutdown_s: float = 0.2) -> None:
        self.store, self._write, self._delete, self.shutdown_s = store, write, delete, shutdown_s
        self._tasks: set[asyncio.TimerHandle] = set()

    def _later(self, delay: float, fn: Callable[[], None]) -> None:
        def run() -> None:
            self._tasks.discard(handle)
            fn()
        handle = asyncio.get_running_loop().call_later(delay, run)
        self._tasks.add(handle)

    def stop(self) -> None:
        for handle in self._tasks:
            handle.cancel()
        self._tasks.clear()

    # ------------------------------------------------------------ pods

    def pod_created(self, pod: Obj) -> None:
        self._later(0, lambda: self._start(pod["metadata"].get("namespace"), pod["metadata"]["name"],
                                           pod["metadata"]["uid"]))

    def node_changed(self, node: Obj) -> None:
        """A node became Ready: its kubelet starts the pods waiting for it."""
        name = node["metadata"]["name"]
        if _node_ready(self.store, name):
            for pod in list(self.store.items(PODS)):
                if (pod.get("spec") or {}).get("nodeName") == name and not (pod.get("status") or {}).get("startTime"):
                    self.pod_created(pod)

    def _start(self, namespace: str | None, name: str, uid: str) -> None:
        pod = self.store.get(PODS, namespace, name)
        if pod is None or pod["metadata"]["uid"] != uid or pod["metadata"].get("deletionTimestamp"):
            return
        if (pod.get("status") or {}).get("startTime") or not _node_ready(self.store, pod["spec"].get("nodeName", "")):
            return
        new = copy.deepcopy(pod)
        new["status"] = running_status(pod)
        self._write(PODS, new, pod)

    def pod_deleting(self, pod: Obj, grace_s: float) -> None:
        """A graceful delete: the kubelet stops the pod, then deletes it with grace 0."""
        meta = pod["metadata"]
        self._later(min(grace_s, self.shutdown_s), lambda: self._stopped(meta.get("namespace"), meta["name"],
                                                                         meta["uid"]))

    def _stopped(self, namespace: str | None, name: str, uid: str) -> None:
        pod = self.store.get(PODS, namespace, name)
        if pod is None or pod["metadata"]["uid"] != uid or not _node_ready(self.store, pod["spec"].get("nodeName", "")):
            return
        self._delete(PODS, pod, 0)

    # ------------------------------------------------------------ node lifecycle controller

    def monitor(self, period_s: float) -> None:
        """Every ``period_s``: a node whose kubelet let its Lease expire is marked as the node controller does."""
        def tick() -> None:
            self.check_leases()
            self.monitor(period_s)
        self._later(period_s, tick)

    def check_leases(self) -> None:
        """Ready ``Unknown`` and the ``unreachable`` taints once a Lease has expired; both gone once it is renewed.

        Only nodes with a Lease are watched (those an agent runs): a Node the
        lab registered without a kubelet has none to expire.
        """
        leases = {lease["metadata"]["name"]: lease for lease in self.store.items(LEASES, "kube-node-lease")}
        for node in list(self.store.items(NODES)):
            lease = leases.get(node["metadata"]["name"])
            if lease is None:
                continue
            spec = lease.get("spec") or {}
            renewed = _parse(spec.get("renewTime"))
            expired = renewed is None or (datetime.datetime.now(datetime.UTC) - renewed).total_seconds() > \
                float(spec.get("leaseDurationSeconds") or 40)
            new = copy.deepcopy(node)
            taints = [t for t in (new.get("spec") or {}).get("taints") or [] if t.get("key") != UNREACHABLE]
            if expired:
                taints += [{"key": UNREACHABLE, "effect": "NoSchedule", "timeAdded": now()},
                           {"key": UNREACHABLE, "effect": "NoExecute", "timeAdded": now()}]
                status = new.setdefault("status", {})
                status["conditions"] = [c for c in status.get("conditions") or [] if c.get("type") != "Ready"] + [
                    {"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown",
                     "message": "Kubelet stopped posting node status.", "lastTransitionTime": now()}]
                if _ready(node) == "Unknown":
                    continue  # already marked
            elif not any(t.get("key") == UNREACHABLE for t in (node.get("spec") or {}).get("taints") or []):
                continue
            new.setdefault("spec", {})["taints"] = taints
            self._write(NODES, new, node)

    # ------------------------------------------------------------ namespaces

    def namespace_deleting(self, ns: Obj) -> None:
        self._later(0, lambda: self._empty(ns["metadata"]["name"]))

    def _empty(self, name: str) -> None:
        left = 0
        for kind in KINDS:
            if not kind.namespaced:
                continue
            for obj in list(self.store.items(kind, name)):
                left += 1
                if not obj["metadata"].get("deletionTimestamp"):
                    self._delete(kind, copy.deepcopy(obj), None)
        ns = self.store.get(NAMESPACES, None, name)
        if ns is None:
            return
        if left:
            self._later(self.shutdown_s, lambda: self._empty(name))
            return
        self._delete(NAMESPACES, ns, 0)

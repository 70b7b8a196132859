"""A lab node's kubelet: it registers the Node, keeps its Lease renewed, reports Ready and runs its pods.

Why it exists: an inference node is in service only once Kubernetes says so —
its Node Ready with ``nvidia.com/gpu`` allocatable equal to what the SKU has —
and racklife must wait for exactly that, from the API, as it would on a real
cluster. The agent does over HTTPS, through the same API as everyone else,
what a kubelet does when a node boots: create the Node (capacity from the
SKU, NotReady while the runtime starts), post Ready, renew its Lease in
``kube-node-lease`` every ``renew_s``, and move the pods bound to it (to
Running, and a deleted pod through its termination). The stand-in's built-in
lab kubelet leaves the pods of a node whose agent runs alone
(``AGENT_ANNOTATION``). Stopping the agent is a kubelet going away: it
writes nothing more, and once the Lease expires the stand-in's node
lifecycle controller marks the node Ready ``Unknown`` with the
``node.kubernetes.io/unreachable`` taints, as on a real cluster.
"""

from __future__ import annotations

import datetime
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from lifecycle.lab.kube.kubelet import AGENT_ANNOTATION, running_status
from lifecycle.lab.kube.run import AdminError, KubeAdmin, node_object
from lifecycle.model.skus import SKUS

Obj = dict[str, Any]
LEASE_S = 40


def _micro_now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass
class NodeAgent:
    """The kubelet of one lab node. ``start()`` returns once the Node is registered Ready."""

    api: KubeAdmin
    node: str
    sku: str
    labels: Mapping[str, str] = field(default_factory=dict)
    renew_s: float = 10.0
    lease_s: int = LEASE_S
    """The Lease's duration: past it without a renewal, the node controller marks the node unreachable."""
    shutdown_s: float = 0.2
    renewals: int = 0
    _stop: threading.Event = field(default_factory=threading.Event, init=False, repr=False)
    _thread: threading.Thread | None = field(default=None, init=False, repr=False)
    _stopping: set[str] = field(default_factory=set, init=False, repr=False)

    @property
    def gpus(self) -> int:
        if self.sku not in SKUS:
            raise ValueError(f"unknown SKU {self.sku!r}: the agent cannot say how many GPUs the node has")
        return SKUS[self.sku].gpu_count

    def start(self) -> NodeAgent:
        self.register()
        self.report_ready()
        self.renew()
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name=f"kubelet-{self.node}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
            self._thread = None

    # ------------------------------------------------------------ the node

    def register(self) -> Obj:
        """Create the Node (NotReady until the runtime is up), or take over the one left by an earlier boot."""
        obj = node_object(self.node, labels=self.labels, gpus=self.gpus, ready=False)
        obj["metadata"]["annotations"] = {AGENT_ANNOTATION: "true"}
        try:
            return dict(self.api.request("POST", "/api/v1/nodes", obj))
        except AdminError as e:
            if e.status != 409:
                raise
        path = f"/api/v1/nodes/{quote(self.node, safe='')}"
        self.api.request("PATCH", path, {"metadata": {"labels": dict(self.labels),
                                                      "annotations": {AGENT_ANNOTATION: "true"}}},
                         "application/merge-patch+json")
        status = {"status": {"capacity": obj["status"]["capacity"], "allocatable": obj["status"]["allocatable"],
                             "nodeInfo": obj["status"]["nodeInfo"]}}
        return dict(self.api.request("PATCH", f"{path}/status", status, "application/merge-patch+json"))

    def report_ready(self, ready: bool = True) -> None:
        cond = {"type": "Ready", "status": "True" if ready else "False",
                "reason": "KubeletReady" if ready else "KubeletNotReady",
                "message": "kubelet is posting ready status" if ready else "container runtime is down",
                "lastHeartbeatTime": _micro_now()[:19] + "Z", "lastTransitionTime": _micro_now()[:19] + "Z"}
        self.api.request("PATCH", f"/api/v1/nodes/{quote(self.node, safe='')}/status",
                         {"status": {"conditions": [cond]}}, "application/strategic-merge-patch+json")

    def renew(self) -> None:
        """Renew the node's Lease in ``kube-node-lease`` (create it on the first renewal)."""
        path = f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{quote(self.node, safe='')}"
        spec = {"holderIdentity": self.node, "leaseDurationSeconds": self.lease_s, "renewTime": _micro_now()}
        try:
            self.api.request("PATCH", path, {"spec": spec}, "application/merge-patch+json")
        except AdminError as e:
            if e.status != 404:
                raise
            self.api.request("POST", "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases", {
                "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": self.node, "namespace": "kube-node-lease"}, "spec": spec})
        self.renewals += 1

    def _resync_status(self) -> None:
        """A kubelet's status sync: posts Ready again if anyone (the node controller) says otherwise."""
        node = self.api.request("GET", f"/api/v1/nodes/{quote(self.node, safe='')}")
        ready = next((c.get("status") for c in (node.get("status") or {}).get("conditions") or []
                      if c.get("type") == "Ready"), None)
        if ready != "True":
            self.report_ready()

    # ------------------------------------------------------------ pods

    def sync_pods(self) -> None:
        """One pass of the kubelet's pod loop: start new pods, finish the ones being deleted."""
        listed = self.api.request("GET", f"/api/v1/pods?fieldSelector=spec.nodeName%3D{quote(self.node, safe='')}")
        for pod in listed["items"]:
            meta = pod["metadata"]
            path = f"/api/v1/namespaces/{quote(meta['namespace'], safe='')}/pods/{quote(meta['name'], safe='')}"
            try:
                if meta.get("deletionTimestamp"):
                    self._finish(pod, path)
                elif not (pod.get("status") or {}).get("startTime"):
                    self.api.request("PATCH", f"{path}/status", {"status": running_status(pod)},
                                     "application/merge-patch+json")
            except AdminError as e:
                if e.status not in (404, 409):
                    raise

    def _finish(self, pod: Obj, path: str) -> None:
        uid = pod["metadata"]["uid"]
        if uid in self._stopping:
            self._stopping.discard(uid)
            self.api.request("DELETE", path, {"gracePeriodSeconds": 0, "preconditions": {"uid": uid}})
        else:
            self._stopping.add(uid)  # containers get one pass to stop; the next pass deletes the pod

    def _loop(self) -> None:
        next_renew = time.monotonic() + self.renew_s
        while not self._stop.wait(self.shutdown_s):
            try:
                self.sync_pods()
                if time.monotonic() >= next_renew:
                    self.renew()
                    self._resync_status()
                    next_renew = time.monotonic() + self.renew_s
            except (AdminError, OSError):
                continue  # the API is away: a kubelet keeps trying

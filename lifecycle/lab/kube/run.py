"""Running the stand-in: in a thread of this process, or as a child process with a kubeconfig.

Why it exists: tests want the API in-process and fresh per test (it starts in
milliseconds); ``racklife lab up`` wants it as a process that outlives the
command and is found through a kubeconfig. Both offer the same lab-side
operations — a node joining (its Node object, with GPU capacity, appears) and
leaving, pods (with real owner objects) and PodDisruptionBudgets for tests —
and perform them through the API's own HTTPS path, so watches see them like
any other change. The serving certificate is made at start; its CA goes into
every kubeconfig written.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import http.client
import json
import os
import secrets
import signal
import ssl
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import yaml

from lifecycle.lab.kube import tls
from lifecycle.lab.kube.kubelet import PHASE_ANNOTATION, READY_ANNOTATION, now
from lifecycle.lab.kube.server import GPU_RESOURCE, ApiServer, Obj
from lifecycle.lab.kube.server import serve as serve_api


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
                                   "lastTransitionTime": now()}],
                   "nodeInfo": {"architecture": "amd64", "bootID": str(uuid.uuid4()), "machineID": uuid.uuid4().hex,
                                "systemUUID": str(uuid.uuid4()), "containerRuntimeVersion": "containerd://1.7.0",
                                "kernelVersion": os.uname().release, "kubeProxyVersion": "",
                                "kubeletVersion": "v1.32.4", "operatingSystem": "linux",
                                "osImage": "racklife lab node"}},
    }


# ---------------------------------------------------------------- running it


class AdminError(RuntimeError):
    """The stand-in refused a lab-side request; ``status`` is the HTTP status."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status} {message}")
        self.status = status


def _q(name: str) -> str:
    return quote(name, safe="")


@dataclass
class KubeAdmin:
    """Lab-side writes over the stand-in's own HTTPS API (the same path every client takes)."""

    url: str = ""
    token: str = field(default_factory=lambda: secrets.token_urlsafe(24), repr=False)
    ca_pem: bytes = field(default=b"", repr=False)

    @classmethod
    def from_kubeconfig(cls, path: Path) -> KubeAdmin:
        """Reach a running stand-in from another process (``lab up`` wrote the kubeconfig)."""
        config = yaml.safe_load(path.read_text())
        cluster = config["clusters"][0]["cluster"]
        return cls(url=cluster["server"], token=config["users"][0]["user"]["token"],
                   ca_pem=base64.b64decode(cluster.get("certificate-authority-data") or ""))

    def request(self, method: str, path: str, body: Any = None, content_type: str = "application/json") -> Any:
        host, port = self.url.removeprefix("https://").split(":")
        context = ssl.create_default_context(cadata=self.ca_pem.decode())
        conn = http.client.HTTPSConnection(host, int(port), timeout=10, context=context)
        try:
            conn.request(method, path, body=None if body is None else json.dumps(body),
                         headers={"Authorization": f"Bearer {self.token}", "Content-Type": content_type})
            resp = conn.getresponse()
            data = json.loads(resp.read() or b"null")
        finally:
            conn.close()
        if resp.status >= 400:
            message = data.get("message") if isinstance(data, dict) else ""
            raise AdminError(resp.status, f"{method} {path}: {message}")
        return data

    def write_kubeconfig(self, path: Path, namespace: str = "default") -> Path:
        """A kubeconfig for clients (kubectl, lightkube); it holds the lab token, so it is mode 0600."""
        config = {
            "apiVersion": "v1", "kind": "Config", "current-context": "racklife-lab", "preferences": {},
            "clusters": [{"name": "racklife-lab", "cluster": {
                "server": self.url, "certificate-authority-data": base64.b64encode(self.ca_pem).decode()}}],
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
            return dict(self.request("GET", f"/api/v1/nodes/{_q(name)}"))
        except AdminError as e:
            if e.status != 404:
                raise
        obj = node_object(name, labels=labels, taints=taints, gpus=gpus, ready=ready)
        return dict(self.request("POST", "/api/v1/nodes", obj))

    def leave(self, name: str) -> None:
        """The node's Node object goes away (powered off, or moved to the Slurm pool)."""
        try:
            self.request("DELETE", f"/api/v1/nodes/{_q(name)}")
        except AdminError as e:
            if e.status != 404:
                raise

    def set_ready(self, name: str, ready: bool) -> None:
        cond = {"type": "Ready", "status": "True" if ready else "False", "lastTransitionTime": now(),
                "reason": "KubeletReady" if ready else "KubeletNotReady"}
        self.request("PATCH", f"/api/v1/nodes/{_q(name)}/status", [{"op": "replace", "path": "/status/conditions",
                                                                "value": [cond]}], "application/json-patch+json")

    def ensure_namespace(self, namespace: str) -> None:
        try:
            self.request("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                        "metadata": {"name": namespace}})
        except AdminError as e:
            if e.status != 409:
                raise

    def _owner(self, kind: str, name: str, namespace: str, labels: Mapping[str, str]) -> Obj:
        plural = {"ReplicaSet": "replicasets", "DaemonSet": "daemonsets"}.get(kind)
        if plural is None:
            return {"apiVersion": "apps/v1", "kind": kind, "name": name, "uid": str(uuid.uuid4()), "controller": True}
        base = f"/apis/apps/v1/namespaces/{_q(namespace)}/{plural}"
        try:
            owner = self.request("GET", f"{base}/{_q(name)}")
        except AdminError as e:
            if e.status != 404:
                raise
            template = {"metadata": {"labels": dict(labels)},
                        "spec": {"containers": [{"name": "main", "image": "registry.invalid/app:1"}]}}
            spec: Obj = {"selector": {"matchLabels": dict(labels)}, "template": template}
            if kind == "ReplicaSet":
                spec["replicas"] = 1
            owner = self.request("POST", base, {"apiVersion": "apps/v1", "kind": kind, "metadata": {"name": name},
                                                "spec": spec})
        return {"apiVersion": "apps/v1", "kind": kind, "name": name, "uid": owner["metadata"]["uid"],
                "controller": True, "blockOwnerDeletion": True}

    def create_pod(self, name: str, node: str, *, namespace: str = "default", labels: Mapping[str, str] | None = None,
                   owner_kind: str | None = None, owner_name: str | None = None, mirror: bool = False,
                   phase: str = "Running", ready: bool = True, wait_s: float = 5.0) -> Obj:
        """A pod bound to ``node``; the lab's kubelet takes it to ``phase`` (waited for, when the node is Ready)."""
        self.ensure_namespace(namespace)
        annotations = {PHASE_ANNOTATION: phase}
        if not ready:
            annotations[READY_ANNOTATION] = "false"
        meta: Obj = {"name": name, "namespace": namespace, "labels": dict(labels or {}), "annotations": annotations}
        if owner_kind:
            meta["ownerReferences"] = [self._owner(owner_kind, owner_name or f"{name}-owner", namespace,
                                                   labels or {"app": name})]
        if mirror:
            annotations["kubernetes.io/config.mirror"] = secrets.token_hex(8)
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
               "spec": {"nodeName": node, "containers": [{"name": "main", "image": "registry.invalid/app:1"}]}}
        created = dict(self.request("POST", f"/api/v1/namespaces/{_q(namespace)}/pods", pod))
        path = f"/api/v1/namespaces/{_q(namespace)}/pods/{_q(name)}"
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            seen = dict(self.request("GET", path))
            if seen["status"].get("phase") == phase and (phase != "Pending" or seen["status"].get("startTime")):
                return seen
            node_obj = self.request("GET", f"/api/v1/nodes/{_q(node)}") if node else None
            if node_obj is None or not any(c.get("type") == "Ready" and c.get("status") == "True"
                                           for c in node_obj["status"].get("conditions") or []):
                return seen  # no kubelet will start it now
            time.sleep(0.01)
        return created

    def delete_pod(self, name: str, namespace: str = "default", grace_s: int | None = None) -> None:
        path = f"/api/v1/namespaces/{_q(namespace)}/pods/{_q(name)}"
        self.request("DELETE", path, None if grace_s is None else {"gracePeriodSeconds": grace_s})

    def create_pdb(self, name: str, match_labels: Mapping[str, str], *, namespace: str = "default",
                   min_available: int | str | None = None, max_unavailable: int | str | None = None) -> Obj:
        self.ensure_namespace(namespace)
        spec: Obj = {"selector": {"matchLabels": dict(match_labels)}}
        if min_available is not None:
            spec["minAvailable"] = min_available
        if max_unavailable is not None:
            spec["maxUnavailable"] = max_unavailable
        pdb = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
               "metadata": {"name": name, "namespace": namespace}, "spec": spec}
        return dict(self.request("POST", f"/apis/policy/v1/namespaces/{_q(namespace)}/poddisruptionbudgets", pdb))


@dataclass
class KubeStandIn(KubeAdmin):
    """The stand-in served from a thread of this process, over TLS on 127.0.0.1."""

    port: int = 0
    shutdown_s: float = 0.2
    """How long the lab's kubelet takes to stop a deleted pod (at most its grace period)."""
    budget_lag_s: float = 0.0
    """How long the disruption controller takes to see a budget's change (evictions meanwhile: 429)."""
    node_monitor_s: float = 1.0
    """How often the node lifecycle controller looks for expired kubelet Leases."""
    api: ApiServer | None = field(default=None, init=False, repr=False)
    _loop: asyncio.AbstractEventLoop | None = field(default=None, init=False, repr=False)
    _stopped: asyncio.Event | None = field(default=None, init=False, repr=False)
    _thread: threading.Thread | None = field(default=None, init=False, repr=False)

    def start(self, timeout_s: float = 10.0) -> KubeStandIn:
        ready = threading.Event()
        failure: list[BaseException] = []
        cert = tls.make()
        self.ca_pem = cert.ca_pem

        async def serve() -> None:
            self._loop = asyncio.get_running_loop()
            self._stopped = asyncio.Event()
            try:
                self.api = ApiServer(token=self.token, shutdown_s=self.shutdown_s, budget_lag_s=self.budget_lag_s,
                                     node_monitor_s=self.node_monitor_s)
                self.api.start_controllers()
                runner = await serve_api(self.api, "127.0.0.1", self.port, cert.server_context())
                try:
                    self.port = int(self.api.address.rsplit(":", 1)[1])
                    self.url = f"https://127.0.0.1:{self.port}"
                    ready.set()
                    await self._stopped.wait()
                    self.api.close_watches()
                    self.api.kubelet.stop()
                finally:
                    await runner.cleanup()
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

    def _call(self, fn: Any) -> Any:
        if self.api is None or self._loop is None:
            raise RuntimeError("the Kubernetes stand-in is not running")

        async def run() -> Any:
            return fn()
        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(10)

    def reset(self) -> None:
        """Empty the cluster without restarting the server (kubeconfigs and clients stay valid)."""
        self._call(lambda: self.api.reset() if self.api else None)

    def stop(self) -> None:
        if self._loop is not None and self._stopped is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._stopped.set)
            self._thread.join(10)
            stuck, self._thread = self._thread.is_alive(), None
            if stuck:
                raise RuntimeError("the Kubernetes stand-in did not stop within 10 s")

    def __enter__(self) -> KubeStandIn:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()


@dataclass
class KubeProcess(KubeAdmin):
    """The stand-in as a child process (what ``racklife lab up`` runs); ``kubeconfig`` is how to reach it."""

    kubeconfig: Path = Path("kubeconfig")
    proc: subprocess.Popen[bytes] | None = field(default=None, init=False, repr=False)

    def start(self, timeout_s: float = 20.0, log: Path | None = None) -> KubeProcess:
        self.kubeconfig.unlink(missing_ok=True)
        env = dict(os.environ, RACKLIFE_KUBE_TOKEN=self.token)
        argv = [sys.executable, "-m", "lifecycle.lab.kube", "--kubeconfig", str(self.kubeconfig)]
        if log is None:
            self.proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        else:
            with log.open("ab") as out:  # the child keeps its own copy of the descriptor
                self.proc = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout_s
        while not self.kubeconfig.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("the Kubernetes stand-in process did not start")
            time.sleep(0.05)
        found = KubeAdmin.from_kubeconfig(self.kubeconfig)
        self.url, self.ca_pem = found.url, found.ca_pem
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
    args = argparse.ArgumentParser(description="Serve the lab's Kubernetes API stand-in.")
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

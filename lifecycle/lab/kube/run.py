"""Running the stand-in: in a thread of this process, or as a child process with a kubeconfig.

Why it exists: tests want the API in-process and fresh per test (it starts in
milliseconds); ``racklife lab up`` wants it as a process that outlives the
command and is found through a kubeconfig. Both offer the same lab-side
operations — a node joining (its Node object, with GPU capacity, appears) and
leaving, pods and PodDisruptionBudgets for tests — and perform them through
the API's own HTTP path, so watches see them like any other change.
"""

from __future__ import annotations

import argparse
import asyncio
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
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import kmock
import yaml

from lifecycle.lab.kube.server import GPU_RESOURCE, ApiServer, Obj, now


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
                                "kubeletVersion": "v1.30.0-racklife-lab", "operatingSystem": "linux",
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
    """Lab-side writes over the stand-in's own HTTP API (the same path every client takes)."""

    url: str = ""
    token: str = field(default_factory=lambda: secrets.token_urlsafe(24), repr=False)

    @classmethod
    def from_kubeconfig(cls, path: Path) -> KubeAdmin:
        """Reach a running stand-in from another process (``lab up`` wrote the kubeconfig)."""
        config = yaml.safe_load(path.read_text())
        return cls(url=config["clusters"][0]["cluster"]["server"], token=config["users"][0]["user"]["token"])

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
            message = data.get("message") if isinstance(data, dict) else ""
            raise AdminError(resp.status, f"{method} {path}: {message}")
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
        cond = {"type": "Ready", "status": "True" if ready else "False", "lastTransitionTime": now()}
        self.request("PATCH", f"/api/v1/nodes/{_q(name)}/status", [{"op": "replace", "path": "/status/conditions",
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
        return dict(self.request("POST", f"/api/v1/namespaces/{_q(namespace)}/pods", pod))

    def delete_pod(self, name: str, namespace: str = "default") -> None:
        self.request("DELETE", f"/api/v1/namespaces/{_q(namespace)}/pods/{_q(name)}")

    def create_pdb(self, name: str, match_labels: Mapping[str, str], *, namespace: str = "default",
                   min_available: int | str | None = None, max_unavailable: int | str | None = None) -> Obj:
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
                    await self.api.close_watches()
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

    def reset(self) -> None:
        """Empty the cluster without restarting the server (kubeconfigs and clients stay valid)."""
        if self.api is None or self._loop is None:
            raise RuntimeError("the Kubernetes stand-in is not running")
        asyncio.run_coroutine_threadsafe(self.api.reset(), self._loop).result(10)

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

"""The real Kubernetes driver: nodes, pods and evictions over the Kubernetes API, with lightkube.

Why lightkube and not the official ``kubernetes`` client or kr8s: racklife is
typed end to end (``mypy --strict``) and lightkube ships typed resource models
(``py.typed``, generated per Kubernetes minor), where the official client's
generated code has no annotations; it is synchronous like the rest of the
drivers, where kr8s is async-first; and it is small (httpx2 + msgspec) yet
covers exactly what racklife calls — merge patches, field and label
selectors, watches with resourceVersion resume, and the Eviction subresource
as a typed ``PodEviction``. It is maintained and released steadily.

Only this module imports lightkube. Its errors are translated here, once,
through one status table into ``lifecycle.drivers.errors``.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2
from lightkube import ApiError, Client, ConfigError
from lightkube.config.kubeconfig import KubeConfig
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Node, Pod, PodEviction
from lightkube.resources.policy_v1 import PodDisruptionBudget
from lightkube.types import PatchType

from lifecycle.drivers.errors import AuthFailed, Busy, DriverError, NotSupported, OperationFailed, Unreachable
from lifecycle.drivers.kube.base import Conflict, KubeDriver
from lifecycle.drivers.kube.types import (
    GPU_RESOURCE,
    MIRROR_ANNOTATION,
    Budget,
    KubeNode,
    KubePod,
    Refusal,
    Taint,
    WatchEvent,
)
from lifecycle.model.redact import register

# HTTP status → error class. A 5xx not listed is Busy on an idempotent request (one the API
# server applies at most once however often it is sent) and OperationFailed otherwise.
_STATUS_ERRORS: dict[int, type[DriverError]] = {
    400: OperationFailed, 401: AuthFailed, 403: AuthFailed, 404: OperationFailed, 405: NotSupported,
    409: Conflict, 415: NotSupported, 422: OperationFailed, 429: Busy,
    501: NotSupported, 502: Busy, 503: Busy, 504: Busy,
}
_IDEMPOTENT = frozenset({"GET", "HEAD", "PUT", "DELETE", "OPTIONS"})
# 500s that no retry can fix, in the API server's own words.
_PERMANENT_500 = ("more than one PodDisruptionBudget",)


def _method(exc: httpx2.HTTPStatusError) -> str:
    try:
        return exc.request.method
    except RuntimeError:  # an error built without its request: assume the worst
        return ""


def _retry_after(response: httpx2.Response) -> float | None:
    value = response.headers.get("retry-after", "")
    return float(value) if value.isdigit() else None


def translate(target: str, exc: Exception) -> DriverError:
    """One lightkube/httpx2 error as a racklife driver error (messages carry no credentials)."""
    if isinstance(exc, httpx2.HTTPStatusError):
        code = exc.response.status_code
        message = exc.status.message if isinstance(exc, ApiError) and exc.status.message else exc.response.reason_phrase
        text = f"HTTP {code}: {message}"
        cls = _STATUS_ERRORS.get(code)
        if cls is None and code >= 500:
            permanent = any(words in text for words in _PERMANENT_500)
            cls = Busy if _method(exc) in _IDEMPOTENT and not permanent else OperationFailed
        cls = cls or OperationFailed
        if issubclass(cls, Busy):
            return cls(target, text, delay_s=_retry_after(exc.response))
        return cls(target, text)
    if isinstance(exc, httpx2.TransportError):
        return Unreachable(target, f"no answer from the Kubernetes API ({type(exc).__name__})")
    if isinstance(exc, ConfigError):
        return AuthFailed(target, f"unusable kubeconfig: {exc}")
    return OperationFailed(target, f"{type(exc).__name__}: {exc}")


@contextlib.contextmanager
def _edge(target: str) -> Iterator[None]:
    try:
        yield
    except (httpx2.HTTPError, ConfigError) as e:
        raise translate(target, e) from e


def node_from_api(node: Node) -> KubeNode:
    meta = node.metadata or ObjectMeta()
    spec, status = node.spec, node.status
    ready = any(c.type == "Ready" and c.status == "True" for c in (status.conditions or [])) if status else False
    allocatable = (status.allocatable or {}) if status else {}
    gpus = str(allocatable.get(GPU_RESOURCE, "0"))
    taints = (spec.taints if spec else None) or []
    return KubeNode(
        name=meta.name or "",
        ready=ready,
        unschedulable=bool(spec and spec.unschedulable),
        labels=dict(meta.labels or {}),
        annotations=dict(meta.annotations or {}),
        taints=tuple(Taint.from_api({"key": t.key, "effect": t.effect, "value": t.value}) for t in taints),
        gpus=int(gpus) if gpus.isdigit() else 0,
        resource_version=meta.resourceVersion or "",
        boot_id=(status.nodeInfo.bootID if status and status.nodeInfo else None) or "",
    )


def pod_from_api(pod: Pod) -> KubePod:
    meta = pod.metadata or ObjectMeta()
    owner = next((o.kind for o in (meta.ownerReferences or []) if o.controller), None)
    return KubePod(
        namespace=meta.namespace or "default",
        name=meta.name or "",
        node=(pod.spec.nodeName if pod.spec else None) or "",
        phase=(pod.status.phase if pod.status else None) or "Unknown",
        labels=dict(meta.labels or {}),
        owner_kind=owner,
        mirror=MIRROR_ANNOTATION in (meta.annotations or {}),
        terminating=meta.deletionTimestamp is not None,
    )


def budget_from_api(pdb: PodDisruptionBudget) -> Budget:
    meta = pdb.metadata or ObjectMeta()
    spec, status = pdb.spec, pdb.status
    selector: dict[str, Any] = {}
    if spec and spec.selector:
        selector["matchLabels"] = dict(spec.selector.matchLabels or {})
        selector["matchExpressions"] = [{"key": e.key, "operator": e.operator, "values": list(e.values or [])}
                                        for e in spec.selector.matchExpressions or []]
    return Budget(
        namespace=meta.namespace or "default", name=meta.name or "", selector=selector,
        min_available=spec.minAvailable if spec else None, max_unavailable=spec.maxUnavailable if spec else None,
        expected_pods=(status.expectedPods or 0) if status else 0,
        current_healthy=(status.currentHealthy or 0) if status else 0,
        desired_healthy=(status.desiredHealthy or 0) if status else 0,
        disruptions_allowed=(status.disruptionsAllowed or 0) if status else 0,
    )


@dataclass
class KubeApiDriver(KubeDriver):
    client: Client
    target: str = "kubernetes"
    """How errors name the cluster (the API server URL); never a credential."""
    clock: Callable[[], float] = field(default=time.monotonic)
    sleep: Callable[[float], None] = field(default=time.sleep)

    @classmethod
    def from_kubeconfig(cls, path: Path, *, context: str | None = None, timeout_s: float = 10.0,
                        **kwargs: Any) -> KubeApiDriver:
        """A driver for the cluster a kubeconfig file names (its current context unless ``context``)."""
        target = str(path)
        with _edge(target):
            config = KubeConfig.from_file(path).get(context_name=context)
            if config is None:
                raise ConfigError(f"no context {context!r} in {path}")
            user = config.user
            register(getattr(user, "token", None))  # the redaction filter masks them from now on
            register(getattr(user, "password", None), username=getattr(user, "username", None))
            client = Client(config, timeout=httpx2.Timeout(timeout_s), trust_env=False)
        return cls(client, target=config.cluster.server, **kwargs)

    def close(self) -> None:
        self.client.close()

    # ------------------------------------------------------------ primitives

    def node(self, name: str) -> KubeNode:
        with _edge(f"{self.target} node/{name}"):
            try:
                return node_from_api(self.client.get(Node, name))
            except ApiError as e:
                if e.response.status_code == 404:
                    raise OperationFailed(name, "no such node in Kubernetes") from e
                raise

    def nodes(self, labels: Mapping[str, str] | None = None) -> list[KubeNode]:
        with _edge(f"{self.target} nodes"):
            return [node_from_api(n) for n in self.client.list(Node, labels=dict(labels) if labels else None)]

    def pods_on(self, node: str, labels: Mapping[str, str] | None = None) -> list[KubePod]:
        with _edge(f"{self.target} pods on {node}"):
            found = self.client.list(Pod, namespace="*", fields={"spec.nodeName": node},
                                     labels=dict(labels) if labels else None)
            return [pod_from_api(p) for p in found]

    def _patch_node(self, name: str, patch: Mapping[str, Any]) -> KubeNode:
        with _edge(f"{self.target} node/{name}"):
            return node_from_api(self.client.patch(Node, name, dict(patch), patch_type=PatchType.MERGE))

    def _evict(self, pod: KubePod) -> Refusal | None:
        eviction = PodEviction(metadata=ObjectMeta(name=pod.name, namespace=pod.namespace))
        with _edge(f"{self.target} pod/{pod.key}"):
            try:
                self.client.create(eviction, name=pod.name, namespace=pod.namespace)
            except ApiError as e:
                if e.response.status_code == 404:
                    return None  # already gone: that is what we wanted
                if e.response.status_code == 429:
                    causes = (e.status.details.causes if e.status.details else None) or []
                    words = [c.message for c in causes if c.message] or [e.status.message or "too many requests"]
                    after = e.response.headers.get("Retry-After", "")
                    return Refusal("; ".join(words), float(after) if after.isdigit() else 0.0)
                raise
        return None

    def delete_node(self, name: str) -> bool:
        with _edge(f"{self.target} node/{name}"):
            try:
                self.client.delete(Node, name)
            except ApiError as e:
                if e.response.status_code == 404:
                    return False  # already gone: that is what we wanted
                raise
        return True

    def budgets(self, namespace: str) -> list[Budget]:
        with _edge(f"{self.target} poddisruptionbudgets in {namespace}"):
            return [budget_from_api(b) for b in self.client.list(PodDisruptionBudget, namespace=namespace)]

    # ------------------------------------------------------------ watch

    def list_version(self) -> str:
        """The current resourceVersion of the node list: watch from here to see only what happens next."""
        with _edge(f"{self.target} nodes"):
            listed = self.client.list(Node, chunk_size=1)
            next(iter(listed), None)
            return str(listed.resourceVersion or "")

    def watch_nodes(self, *, since: str | None = None, labels: Mapping[str, str] | None = None,
                    server_timeout_s: int = 300) -> Iterator[WatchEvent]:
        """Node events as they happen, until the caller stops iterating.

        Without ``since`` it starts with an ADDED event per existing node, as
        ``kubectl get -w`` does; with it, it replays what happened after that
        resourceVersion. The server closes a watch every ``server_timeout_s``;
        it is reopened from the last version seen.
        """
        with _edge(f"{self.target} watch nodes"):
            stream = self.client.watch(Node, labels=dict(labels) if labels else None, resource_version=since,
                                       server_timeout=server_timeout_s)
            for kind, obj in stream:
                node = node_from_api(obj)
                yield WatchEvent(kind, node.name, None, node.resource_version, node=node)  # type: ignore[arg-type]

    def watch_pods(self, node: str, *, since: str | None = None,
                   server_timeout_s: int = 300) -> Iterator[WatchEvent]:
        """Pod events for pods bound to ``node``, in every namespace (same rules as ``watch_nodes``)."""
        with _edge(f"{self.target} watch pods on {node}"):
            stream = self.client.watch(Pod, namespace="*", fields={"spec.nodeName": node}, resource_version=since,
                                       server_timeout=server_timeout_s)
            for kind, obj in stream:
                pod = pod_from_api(obj)
                version = (obj.metadata.resourceVersion if obj.metadata else None) or ""
                yield WatchEvent(kind, pod.name, pod.namespace, version, pod=pod)  # type: ignore[arg-type]

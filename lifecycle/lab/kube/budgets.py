"""PodDisruptionBudgets as the disruption controller computes them, and the Eviction subresource's verdict.

Why it exists: a drain is only as safe as the budget arithmetic behind the
429. The controller takes ``expectedPods`` from the owners' scale (a
ReplicaSet's ``spec.replicas``), so a ``maxUnavailable: 1`` budget over a
3-replica set whose third pod is already gone allows nothing; it counts only
Ready, non-terminating pods as healthy; and when a pod has no scalable owner
it cannot compute the budget at all and allows no disruption (``SyncFailed``).
The eviction rules — pods that may go regardless (Pending, Succeeded, Failed,
already terminating), two budgets on one pod (500), an unready pod under
``unhealthyPodEvictionPolicy`` — are kube-apiserver's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from lifecycle.drivers.kube import selectors as sel
from lifecycle.lab.kube.kinds import PDBS, PODS, REPLICASETS
from lifecycle.lab.kube.store import Store

Obj = dict[str, Any]
SCALABLE = {"ReplicaSet": REPLICASETS}
"""Owner kinds whose scale the stand-in can read (a Deployment's pods are owned by its ReplicaSet)."""


class NoScale(Exception):
    """A selected pod has no owner whose scale is known: the controller cannot compute the budget."""


def selected(store: Store, pdb: Mapping[str, Any]) -> list[Obj]:
    wanted = sel.from_label_selector((pdb.get("spec") or {}).get("selector"))
    ns = pdb["metadata"].get("namespace")
    return [p for p in store.items(PODS, ns) if sel.match_labels(wanted, p["metadata"].get("labels"))]


def _scale(store: Store, namespace: str | None, pods: list[Obj]) -> int:
    owners: dict[tuple[str, str], int] = {}
    for pod in pods:
        ref = next((o for o in pod["metadata"].get("ownerReferences") or [] if o.get("controller")), None)
        if ref is None:
            raise NoScale(f"found no controllers for pod {pod['metadata']['name']!r}")
        kind = SCALABLE.get(str(ref.get("kind")))
        owner = store.get(kind, namespace, str(ref.get("name"))) if kind else None
        if owner is None or owner["metadata"].get("uid") != ref.get("uid"):
            raise NoScale(f"{ref.get('kind')} {ref.get('name')!r} of pod {pod['metadata']['name']!r} has no scale")
        owners[(str(ref.get("kind")), str(ref.get("name")))] = int((owner.get("spec") or {}).get("replicas", 1))
    return sum(owners.values())


def needs_scale(pdb: Mapping[str, Any]) -> bool:
    spec = pdb.get("spec") or {}
    return spec.get("maxUnavailable") is not None or isinstance(spec.get("minAvailable"), str)


def status(store: Store, pdb: Mapping[str, Any]) -> tuple[sel.BudgetStatus, str | None]:
    """The budget's status now, and why it could not be computed (then nothing is allowed)."""
    pods = selected(store, pdb)
    try:
        scale = _scale(store, pdb["metadata"].get("namespace"), pods) if needs_scale(pdb) else None
    except NoScale as e:
        return sel.BudgetStatus(0, 0, 0, 0), str(e)
    return sel.budget_status(pdb, pods, scale), None


def status_object(store: Store, pdb: Mapping[str, Any], observed: bool = True) -> Obj:
    """``PodDisruptionBudget.status`` as the controller writes it, conditions included.

    ``observed`` False: the controller has not yet seen the budget's latest
    spec (``observedGeneration`` one behind), as for a moment after a change.
    """
    computed, failure = status(store, pdb)
    allowed = computed.disruptions_allowed > 0
    reason = "SyncFailed" if failure else "SufficientPods" if allowed else "InsufficientPods"
    generation = int(pdb["metadata"].get("generation", 1))
    out: Obj = dict(computed.as_status(generation if observed else generation - 1))
    out["conditions"] = [{"type": "DisruptionAllowed", "status": "True" if allowed else "False", "reason": reason,
                          "message": failure or "", "observedGeneration": out["observedGeneration"],
                          "lastTransitionTime": pdb["metadata"].get("creationTimestamp")}]
    return out


@dataclass(frozen=True)
class Verdict:
    allowed: bool
    code: int = 201
    message: str = ""
    cause: str = ""
    retry_after_s: int = 0
    """Sent as ``Retry-After`` (kube-apiserver suggests 10 s while a budget's change is being processed)."""


IGNORE_BUDGET_PHASES = frozenset({"Pending", "Succeeded", "Failed"})


VIOLATION = "Cannot evict pod as it would violate the pod's disruption budget."


def evict(store: Store, pod: Mapping[str, Any],
          observed: Callable[[Mapping[str, Any]], bool] = lambda _: True) -> Verdict:
    """May this pod be evicted now? (kube-apiserver's ``pods/eviction`` rules)."""
    phase = (pod.get("status") or {}).get("phase")
    if phase in IGNORE_BUDGET_PHASES or pod["metadata"].get("deletionTimestamp"):
        return Verdict(True)
    labels = pod["metadata"].get("labels") or {}
    budgets = [b for b in store.items(PDBS, pod["metadata"].get("namespace"))
               if sel.match_labels(sel.from_label_selector((b.get("spec") or {}).get("selector")), labels)]
    if len(budgets) > 1:
        return Verdict(False, 500, "This pod has more than one PodDisruptionBudget, which the eviction "
                       "subresource does not support.")
    if not budgets:
        return Verdict(True)
    pdb = budgets[0]
    if not observed(pdb):
        return Verdict(False, 429, VIOLATION, f"The disruption budget {pdb['metadata']['name']} is still being "
                       "processed by the server.", retry_after_s=10)
    computed, _ = status(store, pdb)
    ready = sel.pod_is_healthy(pod)
    policy = (pdb.get("spec") or {}).get("unhealthyPodEvictionPolicy")
    if not ready and (policy == "AlwaysAllow" or (
            computed.current_healthy >= computed.desired_healthy and computed.desired_healthy > 0)):
        return Verdict(True)
    if computed.disruptions_allowed > 0:
        return Verdict(True)
    return Verdict(False, 429, VIOLATION, sel.budget_violation(pdb["metadata"]["name"], computed))


def owned_status(store: Store, owner: Mapping[str, Any], daemon: bool) -> Obj:
    """A ReplicaSet's or DaemonSet's status from the pods it owns (what its controller would write)."""
    uid = owner["metadata"].get("uid")
    pods = [p for p in store.items(PODS, owner["metadata"].get("namespace"))
            if any(o.get("uid") == uid and o.get("controller") for o in p["metadata"].get("ownerReferences") or [])
            and not p["metadata"].get("deletionTimestamp")]
    ready = sum(1 for p in pods if sel.pod_is_healthy(p))
    generation = int(owner["metadata"].get("generation", 1))
    if daemon:
        return {"currentNumberScheduled": len(pods), "desiredNumberScheduled": len(pods), "numberReady": ready,
                "numberAvailable": ready, "updatedNumberScheduled": len(pods), "numberMisscheduled": 0,
                "observedGeneration": generation}
    return {"replicas": len(pods), "readyReplicas": ready, "availableReplicas": ready,
            "fullyLabeledReplicas": len(pods), "observedGeneration": generation}

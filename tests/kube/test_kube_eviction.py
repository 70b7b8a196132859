"""The Eviction subresource over HTTPS: kube-apiserver's budget rules, not a count of pods.

Each case fails on a stand-in that lets a ``maxUnavailable: 1`` budget over
three pods lose all three, counts unready pods as healthy, or takes
``expectedPods`` from the pods that happen to exist rather than the owner's
scale.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from lifecycle.lab.kube import KubeStandIn
from tests.kube.helpers import call, connect

EVICT = "/api/v1/namespaces/default/pods/{}/eviction"


def evict(api: KubeStandIn, pod: str) -> tuple[int, Any]:
    body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": pod, "namespace": "default"}}
    status, answer, _ = call(api, "POST", EVICT.format(pod), body)
    return status, answer


def budget(api: KubeStandIn, name: str = "web") -> dict[str, Any]:
    status, pdb, _ = call(api, "GET", f"/apis/policy/v1/namespaces/default/poddisruptionbudgets/{name}")
    assert status == 200
    return dict(pdb["status"])


def web(api: KubeStandIn, count: int, replicas: int | None = None, *, unready: tuple[int, ...] = ()) -> None:
    api.join("gpu-01")
    for i in range(count):
        api.create_pod(f"web-{i}", "gpu-01", labels={"app": "web"}, owner_kind="ReplicaSet", owner_name="web",
                       ready=i not in unready)
    call(api, "PATCH", "/apis/apps/v1/namespaces/default/replicasets/web",
         {"spec": {"replicas": count if replicas is None else replicas}}, "application/merge-patch+json")


def test_max_unavailable_one_over_three_pods_lets_one_go(stand_in: KubeStandIn) -> None:
    web(stand_in, 3)
    stand_in.create_pdb("web", {"app": "web"}, max_unavailable=1)
    assert budget(stand_in)["disruptionsAllowed"] == 1
    assert evict(stand_in, "web-0")[0] == 201
    status, answer = evict(stand_in, "web-1")
    assert (status, answer["reason"]) == (429, "TooManyRequests")
    assert answer["message"] == "Cannot evict pod as it would violate the pod's disruption budget."
    assert answer["details"]["causes"] == [{"reason": "DisruptionBudget", "message":
                                            "The disruption budget web needs 2 healthy pods and has 2 currently"}]
    assert evict(stand_in, "web-2")[0] == 429
    assert call(stand_in, "GET", "/api/v1/namespaces/default/pods/web-1")[0] == 200


def test_expected_pods_come_from_the_owners_scale(stand_in: KubeStandIn) -> None:
    web(stand_in, 3, replicas=4)  # one replica is missing (not yet replaced): the budget is already spent
    stand_in.create_pdb("web", {"app": "web"}, max_unavailable=1)
    assert budget(stand_in) | {"conditions": None} == {
        "observedGeneration": 1, "expectedPods": 4, "currentHealthy": 3, "desiredHealthy": 3,
        "disruptionsAllowed": 0, "conditions": None}
    assert evict(stand_in, "web-0")[0] == 429


@pytest.mark.parametrize(("figure", "allowed"), [
    ({"min_available": "50%"}, 2),  # 50% of 4 → 2 must stay
    ({"min_available": "51%"}, 1),  # 2.04 rounds up to 3
    ({"max_unavailable": "25%"}, 1),
    ({"max_unavailable": "26%"}, 2),  # 1.04 rounds up to 2
    ({"min_available": 4}, 0),
    ({"min_available": 1}, 3),
])
def test_percentages_round_up(stand_in: KubeStandIn, figure: dict[str, Any], allowed: int) -> None:
    web(stand_in, 4)
    stand_in.create_pdb("web", {"app": "web"}, **figure)
    assert budget(stand_in)["disruptionsAllowed"] == allowed


def test_unready_pods_are_not_healthy(stand_in: KubeStandIn) -> None:
    web(stand_in, 3, unready=(2,))
    stand_in.create_pdb("web", {"app": "web"}, max_unavailable=1)
    status = budget(stand_in)
    assert (status["currentHealthy"], status["desiredHealthy"], status["disruptionsAllowed"]) == (2, 2, 0)
    assert evict(stand_in, "web-0")[0] == 429  # a Ready pod is protected
    assert evict(stand_in, "web-2")[0] == 201  # the unready one may go: the healthy ones still suffice


def test_a_budget_over_pods_without_a_controller_allows_nothing(stand_in: KubeStandIn) -> None:
    stand_in.join("gpu-01")
    stand_in.create_pod("bare", "gpu-01", labels={"app": "bare"})
    stand_in.create_pdb("bare", {"app": "bare"}, max_unavailable=1)
    status = budget(stand_in, "bare")
    assert status["disruptionsAllowed"] == 0
    assert status["conditions"][0]["reason"] == "SyncFailed"
    assert evict(stand_in, "bare")[0] == 429


def test_pending_and_finished_pods_ignore_budgets(stand_in: KubeStandIn) -> None:
    web(stand_in, 2)
    stand_in.create_pdb("web", {"app": "web"}, min_available=2)
    stand_in.create_pod("done", "gpu-01", labels={"app": "web"}, phase="Succeeded")
    assert evict(stand_in, "web-0")[0] == 429
    assert evict(stand_in, "done")[0] == 201


def test_eviction_is_a_graceful_delete(stand_in: KubeStandIn) -> None:
    web(stand_in, 1)
    stand_in.set_ready("gpu-01", False)  # its kubelet is down: the pod stays Terminating
    assert evict(stand_in, "web-0")[0] == 201
    status, pod, _ = call(stand_in, "GET", "/api/v1/namespaces/default/pods/web-0")
    assert status == 200 and pod["metadata"]["deletionGracePeriodSeconds"] == 30


def test_eviction_answers_for_missing_and_mismatched_pods(stand_in: KubeStandIn) -> None:
    assert evict(stand_in, "nobody")[0] == 404
    web(stand_in, 1)
    body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "other"}}
    status, answer, _ = call(stand_in, "POST", EVICT.format("web-0"), body)
    assert (status, answer["reason"]) == (400, "BadRequest")
    status, _, _ = call(stand_in, "GET", EVICT.format("web-0"))
    assert status == 405


def test_a_budget_the_controller_has_not_seen_yet_answers_429_with_retry_after() -> None:
    with KubeStandIn(shutdown_s=0, budget_lag_s=0.5) as api:
        web(api, 3)
        api.create_pdb("web", {"app": "web"}, max_unavailable=1)
        status = budget(api)
        assert (status["observedGeneration"], status["disruptionsAllowed"]) == (0, 1)
        conn = connect(api)
        try:
            body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "web-0"}}
            conn.request("POST", EVICT.format("web-0"), body=json.dumps(body),
                         headers={"Authorization": f"Bearer {api.token}", "Content-Type": "application/json"})
            resp = conn.getresponse()
            answer = json.loads(resp.read())
        finally:
            conn.close()
        assert (resp.status, resp.getheader("Retry-After")) == (429, "10")
        assert answer["details"]["retryAfterSeconds"] == 10
        assert answer["details"]["causes"][0]["message"] == \
            "The disruption budget web is still being processed by the server."
        time.sleep(0.6)
        assert budget(api)["observedGeneration"] == 1
        assert evict(api, "web-0")[0] == 201


def test_a_budget_at_zero_answers_429_without_retry_after(stand_in: KubeStandIn) -> None:
    web(stand_in, 1)
    stand_in.create_pdb("web", {"app": "web"}, min_available=1)
    conn = connect(stand_in)
    try:
        body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "web-0"}}
        conn.request("POST", EVICT.format("web-0"), body=json.dumps(body),
                     headers={"Authorization": f"Bearer {stand_in.token}", "Content-Type": "application/json"})
        resp = conn.getresponse()
        resp.read()
    finally:
        conn.close()
    # As kube-apiserver: a spent budget suggests no delay (NewTooManyRequests(..., 0)); clients back off themselves.
    assert (resp.status, resp.getheader("Retry-After")) == (429, None)

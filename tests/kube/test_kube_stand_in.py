"""The stand-in API itself, over raw HTTP: what it emulates must answer as kube-apiserver does."""

from __future__ import annotations

import http.client
import json
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from lifecycle.drivers.kube.api import KubeApiDriver
from lifecycle.lab.kube import AdminError, KubeAdmin, KubeProcess, KubeStandIn


def call(api: KubeStandIn, method: str, path: str, body: Any = None, content_type: str = "application/json",
         token: str | None = "ours") -> tuple[int, Any, str]:
    host, port = api.url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    headers = {"Content-Type": content_type}
    if token is not None:
        headers["Authorization"] = f"Bearer {api.token if token == 'ours' else token}"
    try:
        conn.request(method, path, body=None if body is None else json.dumps(body), headers=headers)
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read() or b"null"), resp.getheader("Content-Type") or ""
    finally:
        conn.close()


def names(api: KubeStandIn, path: str) -> set[str]:
    status, body, _ = call(api, "GET", path)
    assert status == 200, body
    return {item["metadata"]["name"] for item in body["items"]}


def test_label_selectors_equality_and_set_based(stand_in: KubeStandIn) -> None:
    stand_in.join("gpu-01")
    stand_in.create_pod("a", "gpu-01", labels={"app": "web", "env": "prod"})
    stand_in.create_pod("b", "gpu-01", labels={"app": "web", "env": "dev", "canary": "yes"})
    stand_in.create_pod("c", "gpu-01", labels={"app": "db", "env": "prod"}, namespace="data")
    pods = "/api/v1/pods?labelSelector="
    assert names(stand_in, pods + quote("app=web")) == {"a", "b"}
    assert names(stand_in, pods + quote("app!=web")) == {"c"}
    assert names(stand_in, pods + quote("env in (prod,staging),!canary")) == {"a", "c"}
    assert names(stand_in, pods + quote("env notin (prod),canary")) == {"b"}
    assert names(stand_in, "/api/v1/namespaces/data/pods") == {"c"}


def test_field_selectors_and_the_fields_the_api_refuses(stand_in: KubeStandIn) -> None:
    stand_in.join("gpu-01")
    stand_in.join("gpu-02")
    stand_in.create_pod("a", "gpu-01")
    stand_in.create_pod("b", "gpu-02", phase="Succeeded")
    assert names(stand_in, "/api/v1/pods?fieldSelector=" + quote("spec.nodeName=gpu-01")) == {"a"}
    assert names(stand_in, "/api/v1/pods?fieldSelector=" + quote("status.phase!=Succeeded")) == {"a"}
    call(stand_in, "PATCH", "/api/v1/nodes/gpu-02", {"spec": {"unschedulable": True}},
         "application/merge-patch+json")
    assert names(stand_in, "/api/v1/nodes?fieldSelector=" + quote("spec.unschedulable=true")) == {"gpu-02"}
    assert names(stand_in, "/api/v1/nodes?fieldSelector=" + quote("spec.unschedulable=false")) == {"gpu-01"}
    status, body, _ = call(stand_in, "GET", "/api/v1/pods?fieldSelector=" + quote("spec.hostname=x"))
    assert (status, body["reason"]) == (400, "BadRequest")
    assert "field label not supported: spec.hostname" in body["message"]


def test_patch_types_and_optimistic_concurrency(stand_in: KubeStandIn) -> None:
    node = stand_in.join("gpu-01")
    version = node["metadata"]["resourceVersion"]
    status, body, ctype = call(stand_in, "PATCH", "/api/v1/nodes/gpu-01",
                               {"metadata": {"labels": {"kubernetes.io/os": None, "x": "1"}}},
                               "application/strategic-merge-patch+json")
    assert status == 200 and ctype == "application/json"
    assert "kubernetes.io/os" not in body["metadata"]["labels"] and body["metadata"]["labels"]["x"] == "1"
    assert int(body["metadata"]["resourceVersion"]) > int(version)

    stale = {"metadata": {"resourceVersion": version, "labels": {"y": "2"}}}
    status, body, _ = call(stand_in, "PATCH", "/api/v1/nodes/gpu-01", stale, "application/merge-patch+json")
    assert (status, body["reason"]) == (409, "Conflict")

    ops = [{"op": "add", "path": "/spec/taints/-", "value": {"key": "k", "effect": "NoSchedule"}}]
    status, body, _ = call(stand_in, "PATCH", "/api/v1/nodes/gpu-01", ops, "application/json-patch+json")
    assert status == 200 and body["spec"]["taints"] == [{"key": "k", "effect": "NoSchedule"}]
    failing = [{"op": "test", "path": "/spec/unschedulable", "value": True}]
    status, body, _ = call(stand_in, "PATCH", "/api/v1/nodes/gpu-01", failing, "application/json-patch+json")
    assert (status, body["reason"]) == (422, "Invalid")

    status, body, _ = call(stand_in, "PATCH", "/api/v1/nodes/gpu-01", {}, "application/apply-patch+yaml")
    assert status == 415
    status, body, _ = call(stand_in, "PUT", "/api/v1/nodes/gpu-01", {"metadata": {"name": "gpu-01"}})
    assert status == 405


def test_create_conflicts_unknown_resources_and_auth(stand_in: KubeStandIn) -> None:
    stand_in.join("gpu-01")
    status, body, _ = call(stand_in, "POST", "/api/v1/nodes", {"metadata": {"name": "gpu-01"}})
    assert (status, body["reason"]) == (409, "AlreadyExists")
    status, body, _ = call(stand_in, "POST", "/api/v1/namespaces/default/pods",
                           {"metadata": {"generateName": "job-"}, "spec": {"nodeName": "gpu-01"}})
    assert status == 201 and body["metadata"]["name"].startswith("job-")
    assert body["status"]["phase"] == "Running"
    status, body, _ = call(stand_in, "GET", "/api/v1/nodes/gpu-99")
    assert (status, body["reason"]) == (404, "NotFound")
    status, body, _ = call(stand_in, "GET", "/apis/example.com/v1/widgets")
    assert status == 404
    assert call(stand_in, "GET", "/api/v1/nodes", token=None)[0] == 401
    assert call(stand_in, "GET", "/api/v1/nodes", token="stolen")[0] == 401


def test_budget_status_and_eviction_answers(stand_in: KubeStandIn) -> None:
    stand_in.join("gpu-01")
    for name in ("a", "b", "c"):
        stand_in.create_pod(name, "gpu-01", labels={"app": "web"})
    stand_in.create_pdb("web", {"app": "web"}, min_available="67%")  # 67% of 3 → 3 (rounded up)
    status, pdb, _ = call(stand_in, "GET", "/apis/policy/v1/namespaces/default/poddisruptionbudgets/web")
    assert pdb["status"] == {"observedGeneration": 1, "expectedPods": 3, "currentHealthy": 3,
                             "desiredHealthy": 3, "disruptionsAllowed": 0}
    eviction = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "a", "namespace": "default"}}
    status, body, _ = call(stand_in, "POST", "/api/v1/namespaces/default/pods/a/eviction", eviction)
    assert (status, body["reason"]) == (429, "TooManyRequests")
    assert body["details"]["causes"] == [{"reason": "DisruptionBudget", "message":
                                          "The disruption budget web needs 3 healthy pods and has 3 currently"}]
    stand_in.create_pod("d", "gpu-01", labels={"app": "web"})  # 67% of 4 → 3: one may go
    status, body, _ = call(stand_in, "POST", "/api/v1/namespaces/default/pods/a/eviction", eviction)
    assert (status, body["status"]) == (201, "Success")
    assert names(stand_in, "/api/v1/pods") == {"b", "c", "d"}
    status, body, _ = call(stand_in, "POST", "/api/v1/namespaces/default/pods/a/eviction", eviction)
    assert status == 404


def test_runs_as_a_process_with_a_kubeconfig(tmp_path: Path) -> None:
    proc = KubeProcess(kubeconfig=tmp_path / "lab" / "kubeconfig")
    (tmp_path / "lab").mkdir()
    proc.start(log=tmp_path / "kube.log")
    try:
        assert proc.kubeconfig.stat().st_mode & 0o777 == 0o600
        proc.join("gpu-07", labels={"racklife.io/pool": "inference"}, gpus=4)
        driver = KubeApiDriver.from_kubeconfig(proc.kubeconfig)
        try:
            node = driver.node("gpu-07")
            assert (node.pool, node.gpus, node.ready) == ("inference", 4, True)
        finally:
            driver.close()
        other = KubeAdmin.from_kubeconfig(proc.kubeconfig)  # e.g. a node's boot hook, in another process
        other.set_ready("gpu-07", False)
        assert proc.request("GET", "/api/v1/nodes/gpu-07")["status"]["conditions"][0]["status"] == "False"
        other.leave("gpu-07")
        proc.leave("gpu-07")  # idempotent
        with pytest.raises(AdminError) as gone:
            proc.request("GET", "/api/v1/nodes/gpu-07")
        assert gone.value.status == 404
        pid = proc.proc.pid if proc.proc else 0
    finally:
        proc.stop()
    assert pid and not Path(f"/proc/{pid}").exists()


def test_a_long_running_lab_keeps_bounded_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    from lifecycle.lab.kube import server

    monkeypatch.setattr(server, "KEEP_VERSIONS", 2)
    with KubeStandIn() as api:
        api.join("gpu-01")
        for i in range(10):
            call(api, "PATCH", "/api/v1/nodes/gpu-01", {"metadata": {"labels": {"i": str(i)}}},
                 "application/merge-patch+json")
            api.create_pod(f"p{i}", "gpu-01")
            api.delete_pod(f"p{i}")
        assert api.api is not None
        assert api.api._requests == []  # none in flight
        assert all(len(obj.history) <= 4 for _, obj in api.api.objects.items())
        assert len(list(api.api.objects.items())) == 1  # deleted pods do not linger
        status, node, _ = call(api, "GET", "/api/v1/nodes/gpu-01")
        assert (status, node["metadata"]["labels"]["i"]) == (200, "9")


def test_discovery_lists_what_is_served(stand_in: KubeStandIn) -> None:
    status, core, _ = call(stand_in, "GET", "/api/v1")
    assert status == 200
    served = {r["name"]: r for r in core["resources"]}
    assert {"nodes", "pods", "pods/eviction", "nodes/status"} <= set(served)
    assert served["nodes"]["namespaced"] is False and served["pods"]["namespaced"] is True
    status, policy, _ = call(stand_in, "GET", "/apis/policy/v1")
    assert status == 200
    assert [r["kind"] for r in policy["resources"] if r["name"] == "poddisruptionbudgets"] == ["PodDisruptionBudget"]


def test_reset_empties_the_cluster_and_expires_old_watches(stand_in: KubeStandIn) -> None:
    stand_in.join("gpu-01")
    stand_in.create_pod("a", "gpu-01")
    stand_in.reset()
    assert names(stand_in, "/api/v1/nodes") == set()
    assert names(stand_in, "/api/v1/pods") == set()
    status, body, _ = call(stand_in, "GET", "/api/v1/nodes?watch=true&resourceVersion=1&timeoutSeconds=1")
    assert status == 200 and body["type"] == "ERROR" and body["object"]["code"] == 410

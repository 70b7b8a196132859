"""The stand-in API itself, over raw HTTP: what it emulates must answer as kube-apiserver does."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from lifecycle.drivers.kube.api import KubeApiDriver
from lifecycle.lab.kube import AdminError, KubeAdmin, KubeProcess, KubeStandIn
from tests.kube.helpers import call


def wait_for(done: Callable[[], bool], seconds: float = 5) -> None:
    deadline = time.monotonic() + seconds
    while not done():
        assert time.monotonic() < deadline, "the stand-in did not get there in time"
        time.sleep(0.02)


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

    # A stale resourceVersion is refused by every kind of write.
    stale = {"metadata": {"resourceVersion": version, "labels": {"y": "2"}}}
    for media in ("application/merge-patch+json", "application/strategic-merge-patch+json"):
        status, body, _ = call(stand_in, "PATCH", "/api/v1/nodes/gpu-01", stale, media)
        assert (status, body["reason"]) == (409, "Conflict"), media
    ops = [{"op": "replace", "path": "/metadata/resourceVersion", "value": version},
           {"op": "add", "path": "/metadata/labels/y", "value": "2"}]
    status, body, _ = call(stand_in, "PATCH", "/api/v1/nodes/gpu-01", ops, "application/json-patch+json")
    assert (status, body["reason"]) == (409, "Conflict")
    current = call(stand_in, "GET", "/api/v1/nodes/gpu-01")[1]
    status, body, _ = call(stand_in, "PUT", "/api/v1/nodes/gpu-01", {**current, "metadata": {
        **current["metadata"], "resourceVersion": version}})
    assert (status, body["reason"]) == (409, "Conflict")
    assert "y" not in call(stand_in, "GET", "/api/v1/nodes/gpu-01")[1]["metadata"]["labels"]

    ops = [{"op": "add", "path": "/spec/taints/-", "value": {"key": "k", "effect": "NoSchedule"}}]
    status, body, _ = call(stand_in, "PATCH", "/api/v1/nodes/gpu-01", ops, "application/json-patch+json")
    assert status == 200 and body["spec"]["taints"] == [{"key": "k", "effect": "NoSchedule"}]
    failing = [{"op": "test", "path": "/spec/unschedulable", "value": True}]
    status, body, _ = call(stand_in, "PATCH", "/api/v1/nodes/gpu-01", failing, "application/json-patch+json")
    assert (status, body["reason"]) == (422, "Invalid")
    status, body, _ = call(stand_in, "PATCH", "/api/v1/nodes/gpu-01", {}, "application/apply-patch+yaml")
    assert status == 415 and "server-side apply" in body["message"]

    # PUT with the current version replaces the object; a no-op write keeps the version.
    current = call(stand_in, "GET", "/api/v1/nodes/gpu-01")[1]
    current["metadata"]["labels"]["z"] = "3"
    status, body, _ = call(stand_in, "PUT", "/api/v1/nodes/gpu-01", current)
    assert status == 200 and body["metadata"]["labels"]["z"] == "3"
    status, again, _ = call(stand_in, "PUT", "/api/v1/nodes/gpu-01", body)
    assert again["metadata"]["resourceVersion"] == body["metadata"]["resourceVersion"]


def test_strategic_merge_patch_merges_lists_by_their_key(stand_in: KubeStandIn) -> None:
    stand_in.join("gpu-01")
    stand_in.create_pod("a", "gpu-01")
    patch = {"status": {"conditions": [{"type": "Ready", "status": "False"}]}}
    status, body, _ = call(stand_in, "PATCH", "/api/v1/namespaces/default/pods/a/status", patch,
                           "application/strategic-merge-patch+json")
    assert status == 200
    conditions = {c["type"]: c["status"] for c in body["status"]["conditions"]}
    assert conditions["Ready"] == "False" and conditions["PodScheduled"] == "True"  # merged by type, not replaced
    status, body, _ = call(stand_in, "PATCH", "/api/v1/namespaces/default/pods/a/status", patch,
                           "application/merge-patch+json")
    assert [c["type"] for c in body["status"]["conditions"]] == ["Ready"]  # a merge patch replaces the list


def test_status_and_spec_are_written_apart(stand_in: KubeStandIn) -> None:
    stand_in.join("gpu-01")
    both = {"spec": {"unschedulable": True}, "status": {"capacity": {"nvidia.com/gpu": "2"}}}
    status, body, _ = call(stand_in, "PATCH", "/api/v1/nodes/gpu-01", both, "application/merge-patch+json")
    assert status == 200 and body["spec"]["unschedulable"] is True
    assert body["status"]["capacity"]["nvidia.com/gpu"] == "8"  # the main resource ignores status
    status, body, _ = call(stand_in, "PATCH", "/api/v1/nodes/gpu-01/status",
                           {"spec": {"unschedulable": False}, "status": {"capacity": {"nvidia.com/gpu": "2"}}},
                           "application/merge-patch+json")
    assert status == 200 and body["status"]["capacity"]["nvidia.com/gpu"] == "2"
    assert body["spec"]["unschedulable"] is True  # the status subresource ignores spec


@pytest.mark.parametrize(("patch", "field", "words"), [
    ({"metadata": {"labels": {"bad key!": "x"}}}, "metadata.labels", "name part must consist of"),
    ({"metadata": {"labels": {"ok": "no spaces allowed"}}}, "metadata.labels", "a valid label must be an empty"),
    ({"metadata": {"labels": {"ok": "x" * 64}}}, "metadata.labels", "must be no more than 63 characters"),
    ({"metadata": {"annotations": {"-bad/ok": "x"}}}, "metadata.annotations", "prefix part"),
    ({"spec": {"taints": [{"key": "k", "effect": "Sometimes"}]}}, "spec.taints[0].effect",
     'Unsupported value: "Sometimes"'),
    ({"spec": {"taints": [{"key": "k"}]}}, "spec.taints[0].effect", "Required value"),
    ({"spec": {"taints": [{"key": "k", "value": "a b", "effect": "NoSchedule"}]}}, "spec.taints[0].value",
     "a valid label"),
    ({"spec": {"taints": [{"key": "k", "effect": "NoSchedule"}, {"key": "k", "effect": "NoSchedule"}]}},
     "spec.taints[1]", "taints must be unique by key and effect pair"),
])
def test_invalid_writes_are_refused_with_the_field(stand_in: KubeStandIn, patch: dict[str, Any], field: str,
                                                   words: str) -> None:
    before = stand_in.join("gpu-01")
    status, body, _ = call(stand_in, "PATCH", "/api/v1/nodes/gpu-01", patch, "application/merge-patch+json")
    assert (status, body["reason"]) == (422, "Invalid")
    assert body["message"].startswith('Node "gpu-01" is invalid: ' + field)
    assert [c["field"] for c in body["details"]["causes"]] == [field]
    assert words in body["details"]["causes"][0]["message"]
    after = call(stand_in, "GET", "/api/v1/nodes/gpu-01")[1]
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]  # nothing changed


def test_names_are_validated_per_kind(stand_in: KubeStandIn) -> None:
    status, body, _ = call(stand_in, "POST", "/api/v1/nodes", {"metadata": {"name": "GPU_01"}})
    assert (status, body["details"]["causes"][0]["field"]) == (422, "metadata.name")
    assert "RFC 1123 subdomain" in body["message"]
    status, body, _ = call(stand_in, "POST", "/api/v1/namespaces", {"metadata": {"name": "a.b"}})
    assert status == 422 and "RFC 1123 label" in body["message"]


def test_unknown_fields_strict_warn_and_pruned(stand_in: KubeStandIn) -> None:
    pod = {"metadata": {"name": "p"}, "spec": {"nodeName": "gpu-01", "bogus": 1,
                                               "containers": [{"name": "c", "image": "i", "imagee": "typo"}]}}
    status, body, _ = call(stand_in, "POST", "/api/v1/namespaces/default/pods?fieldValidation=Strict", pod)
    assert (status, body["reason"]) == (400, "BadRequest")
    assert body["message"] == 'strict decoding error: unknown field "spec.bogus", unknown field ' \
                              '"spec.containers[0].imagee"'
    status, body, _ = call(stand_in, "POST", "/api/v1/namespaces/default/pods", pod)
    assert status == 201 and "bogus" not in body["spec"] and "imagee" not in body["spec"]["containers"][0]


def test_namespaces_exist_before_their_content_and_terminate(stand_in: KubeStandIn) -> None:
    stand_in.join("gpu-01")
    pod = {"metadata": {"name": "p"}, "spec": {"nodeName": "gpu-01", "containers": [{"name": "c", "image": "i"}]}}
    status, body, _ = call(stand_in, "POST", "/api/v1/namespaces/team-a/pods", pod)
    assert (status, body["reason"], body["message"]) == (404, "NotFound", 'namespaces "team-a" not found')
    status, body, _ = call(stand_in, "GET", "/api/v1/namespaces/team-a")
    assert status == 404
    stand_in.ensure_namespace("team-a")
    status, ns, _ = call(stand_in, "GET", "/api/v1/namespaces/team-a")
    assert status == 200 and ns["status"]["phase"] == "Active" and ns["spec"]["finalizers"] == ["kubernetes"]
    stand_in.create_pod("p", "gpu-01", namespace="team-a")
    status, body, _ = call(stand_in, "DELETE", "/api/v1/namespaces/team-a")
    assert status == 200 and body["status"]["phase"] == "Terminating"
    status, body, _ = call(stand_in, "POST", "/api/v1/namespaces/team-a/pods", {**pod, "metadata": {"name": "q"}})
    assert (status, body["reason"]) in {(403, "Forbidden"), (404, "NotFound")}
    wait_for(lambda: call(stand_in, "GET", "/api/v1/namespaces/team-a")[0] == 404)
    assert names(stand_in, "/api/v1/namespaces/team-a/pods") == set()
    status, body, _ = call(stand_in, "DELETE", "/api/v1/namespaces/default")
    assert (status, body["reason"]) == (403, "Forbidden")


def test_create_conflicts_unknown_resources_and_auth(stand_in: KubeStandIn) -> None:
    stand_in.join("gpu-01")
    status, body, _ = call(stand_in, "POST", "/api/v1/nodes", {"metadata": {"name": "gpu-01"}})
    assert (status, body["reason"]) == (409, "AlreadyExists")
    status, body, _ = call(stand_in, "POST", "/api/v1/namespaces/default/pods",
                           {"metadata": {"generateName": "job-"}, "spec": {"nodeName": "gpu-01", "containers": [
                               {"name": "c", "image": "i"}]}, "status": {"phase": "Succeeded"}})
    assert status == 201 and body["metadata"]["name"].startswith("job-")
    assert body["status"]["phase"] == "Pending"  # a client's status is dropped; the kubelet reports it
    wait_for(lambda: call(stand_in, "GET", f"/api/v1/namespaces/default/pods/{body['metadata']['name']}")[1]
             ["status"]["phase"] == "Running")
    status, body, _ = call(stand_in, "GET", "/api/v1/nodes/gpu-99")
    assert (status, body["reason"]) == (404, "NotFound")
    status, body, _ = call(stand_in, "GET", "/apis/example.com/v1/widgets")
    assert status == 404
    assert call(stand_in, "GET", "/api/v1/nodes", token=None)[0] == 401
    assert call(stand_in, "GET", "/api/v1/nodes", token="stolen")[0] == 401
    assert call(stand_in, "GET", "/version", token=None)[1]["gitVersion"].startswith("v1.32.")


def test_graceful_deletion_terminating_and_finalizers(stand_in: KubeStandIn) -> None:
    stand_in.join("gpu-01")
    stand_in.create_pod("a", "gpu-01")
    stand_in.set_ready("gpu-01", False)  # its kubelet is down: nobody finishes the deletion
    status, body, _ = call(stand_in, "DELETE", "/api/v1/namespaces/default/pods/a", {"gracePeriodSeconds": 60})
    assert status == 200 and body["metadata"]["deletionGracePeriodSeconds"] == 60
    assert body["metadata"]["deletionTimestamp"]
    listed = call(stand_in, "GET", "/api/v1/namespaces/default/pods/a", None)[1]
    assert listed["metadata"]["deletionTimestamp"]  # Terminating, still there
    stand_in.set_ready("gpu-01", True)  # a restarted kubelet stops the pod; not before its grace: shorten it
    call(stand_in, "DELETE", "/api/v1/namespaces/default/pods/a", {"gracePeriodSeconds": 0})
    assert call(stand_in, "GET", "/api/v1/namespaces/default/pods/a")[0] == 404

    stand_in.create_pdb("held", {"app": "x"})
    call(stand_in, "PATCH", "/apis/policy/v1/namespaces/default/poddisruptionbudgets/held",
         {"metadata": {"finalizers": ["example.com/keep"]}}, "application/merge-patch+json")
    path = "/apis/policy/v1/namespaces/default/poddisruptionbudgets/held"
    status, body, _ = call(stand_in, "DELETE", path)
    assert status == 200 and body["metadata"]["deletionTimestamp"]
    status, body, _ = call(stand_in, "PATCH", path, {"metadata": {"finalizers": ["example.com/keep", "b.io/x"]}},
                           "application/merge-patch+json")
    assert (status, body["reason"]) == (422, "Invalid")  # no new finalizers while deleting
    status, body, _ = call(stand_in, "PATCH", path, {"metadata": {"finalizers": None}}, "application/merge-patch+json")
    assert status == 200
    assert call(stand_in, "GET", path)[0] == 404


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
    from lifecycle.lab.kube import store

    monkeypatch.setattr(store, "JOURNAL_SIZE", 5)
    with KubeStandIn(shutdown_s=0) as api:
        api.join("gpu-01")
        for i in range(10):
            call(api, "PATCH", "/api/v1/nodes/gpu-01", {"metadata": {"labels": {"i": str(i)}}},
                 "application/merge-patch+json")
            api.create_pod(f"p{i}", "gpu-01")
            api.delete_pod(f"p{i}", grace_s=0)
        assert api.api is not None
        assert all(len(j.events) <= 5 for j in api.api.store.journals.values())
        assert {key[0] for key in api.api.store.objects} == {("", "nodes"), ("", "namespaces")}
        status, node, _ = call(api, "GET", "/api/v1/nodes/gpu-01")
        assert (status, node["metadata"]["labels"]["i"]) == (200, "9")


def test_discovery_lists_what_is_served(stand_in: KubeStandIn) -> None:
    status, core, _ = call(stand_in, "GET", "/api/v1")
    assert status == 200 and core["groupVersion"] == "v1"
    served = {r["name"]: r for r in core["resources"]}
    assert {"nodes", "pods", "pods/eviction", "nodes/status", "namespaces", "events"} <= set(served)
    assert served["nodes"]["namespaced"] is False and served["pods"]["namespaced"] is True
    assert served["nodes"]["shortNames"] == ["no"]
    eviction = served["pods/eviction"]
    assert (eviction["group"], eviction["version"], eviction["kind"], eviction["verbs"]) == \
        ("policy", "v1", "Eviction", ["create"])
    status, groups, _ = call(stand_in, "GET", "/apis")
    assert {g["name"] for g in groups["groups"]} == {"policy", "apps", "coordination.k8s.io"}
    status, apps, _ = call(stand_in, "GET", "/apis/apps/v1")
    assert {r["name"] for r in apps["resources"]} >= {"daemonsets", "replicasets"}
    status, policy, _ = call(stand_in, "GET", "/apis/policy/v1")
    assert status == 200
    assert [r["kind"] for r in policy["resources"] if r["name"] == "poddisruptionbudgets"] == ["PodDisruptionBudget"]


def test_reset_empties_the_cluster_and_expires_old_watches(stand_in: KubeStandIn) -> None:
    stand_in.join("gpu-01")
    stand_in.create_pod("a", "gpu-01")
    stand_in.reset()
    assert names(stand_in, "/api/v1/nodes") == set()
    assert names(stand_in, "/api/v1/pods") == set()
    status, body, _ = call(stand_in, "GET", "/api/v1/nodes?watch=true&resourceVersion=5&timeoutSeconds=1")
    assert status == 200 and body["type"] == "ERROR" and body["object"]["code"] == 410

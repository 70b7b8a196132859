"""The real kubectl against the stand-in: each command must give what it gives against kube-apiserver.

The machine image ships a multi-version kubectl (it picks a 1.27-1.33 client
from the server's /version; the stand-in reports v1.32.x). Without one these
tests fail, with a message: they are the proof that real clients trust the
stand-in. Each test has its own ``--cache-dir``, since kubectl caches
discovery by host and port.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from lifecycle.lab.kube import KubeStandIn
from tests.kube.helpers import call


class Kubectl:
    def __init__(self, binary: str, kubeconfig: Path, cache: Path) -> None:
        self.base = [binary, "--kubeconfig", str(kubeconfig), "--cache-dir", str(cache), "--request-timeout=20s"]

    def __call__(self, *args: str, ok: bool = True, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        done = subprocess.run([*self.base, *args], capture_output=True, text=True, timeout=90, input=stdin,
                              check=False)
        if ok:
            assert done.returncode == 0, f"kubectl {' '.join(args)} failed: {done.stdout}{done.stderr}"
        return done

    def popen(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen([*self.base, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def json(self, *args: str) -> Any:
        return json.loads(self(*args, "-o", "json").stdout)


@pytest.fixture
def kubectl(stand_in: KubeStandIn, tmp_path: Path) -> Kubectl:
    binary = shutil.which("kubectl")
    if binary is None:
        pytest.fail("kubectl is not on PATH: these tests need the real client (the machine image ships a "
                    "multi-version kubectl at /usr/bin/kubectl)")
    return Kubectl(binary, stand_in.write_kubeconfig(tmp_path / "kubeconfig"), tmp_path / "cache")


def lines(text: str) -> list[list[str]]:
    return [row.split() for row in text.strip().splitlines()]


def wait_for(done: Callable[[], bool], seconds: float = 10) -> None:
    deadline = time.monotonic() + seconds
    while not done():
        assert time.monotonic() < deadline, "not reached in time"
        time.sleep(0.05)


class Reader:
    """Collects a background process's output lines as they come."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc, self.out, self.err = proc, list[str](), list[str]()
        self.pumps = [threading.Thread(target=self._pump, args=(stream, into), daemon=True)
                      for stream, into in ((proc.stdout, self.out), (proc.stderr, self.err))]
        for pump in self.pumps:
            pump.start()

    @staticmethod
    def _pump(stream: Any, into: list[str]) -> None:
        for line in iter(stream.readline, ""):
            into.append(line.rstrip("\n"))

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
        self.proc.wait(10)
        for pump in self.pumps:
            pump.join(10)
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()


@pytest.fixture
def background() -> Iterator[list[Reader]]:
    readers: list[Reader] = []
    yield readers
    for r in readers:
        r.stop()


def test_version_get_and_short_names(stand_in: KubeStandIn, kubectl: Kubectl) -> None:
    assert "Server Version: v1.32." in kubectl("version").stdout
    stand_in.join("gpu-01", labels={"racklife.io/pool": "inference"})
    stand_in.join("gpu-02", labels={"racklife.io/pool": "training"}, gpus=4)
    stand_in.set_ready("gpu-02", False)
    rows = lines(kubectl("get", "no").stdout)
    assert rows[0] == ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]
    assert [(r[0], r[1]) for r in rows[1:]] == [("gpu-01", "Ready"), ("gpu-02", "NotReady")]
    rows = lines(kubectl("get", "nodes", "-l", "racklife.io/pool=inference", "--no-headers").stdout)
    assert [r[0] for r in rows] == ["gpu-01"]
    gpus = kubectl("get", "nodes", "-o", "jsonpath={.items[*].status.allocatable.nvidia\\.com/gpu}").stdout
    assert gpus.split() == ["8", "4"]
    stand_in.create_pod("web-a", "gpu-01", namespace="serving", labels={"app": "web"})
    rows = lines(kubectl("get", "po", "-A").stdout)
    assert rows[1][:4] == ["serving", "web-a", "1/1", "Running"]
    assert kubectl("get", "pods").stdout == ""  # the default namespace is empty
    assert "No resources found in default namespace." in kubectl("get", "pods").stderr
    done = kubectl("get", "node", "gpu-99", ok=False)
    assert done.returncode == 1 and 'Error from server (NotFound): nodes "gpu-99" not found' in done.stderr
    ns = lines(kubectl("get", "ns").stdout)
    assert {r[0] for r in ns[1:]} == {"default", "kube-node-lease", "kube-public", "kube-system", "serving"}
    resources = kubectl("api-resources", "--no-headers").stdout
    assert any(r[:2] == ["poddisruptionbudgets", "pdb"] and r[2] == "policy/v1" for r in lines(resources))


def test_label_and_server_side_label_validation(stand_in: KubeStandIn, kubectl: Kubectl) -> None:
    stand_in.join("gpu-01")
    assert kubectl("label", "node", "gpu-01", "racklife.io/pool=inference").stdout.strip() == "node/gpu-01 labeled"
    node = kubectl.json("get", "node", "gpu-01")
    assert node["metadata"]["labels"]["racklife.io/pool"] == "inference"
    done = kubectl("label", "node", "gpu-01", "racklife.io/pool=training", ok=False)
    assert "already has a value (inference)" in done.stderr  # kubectl's own check, from the object it read
    kubectl("label", "node", "gpu-01", "racklife.io/pool-")
    assert "racklife.io/pool" not in kubectl.json("get", "node", "gpu-01")["metadata"]["labels"]
    done = kubectl("patch", "node", "gpu-01", "--type", "merge", "-p",
                   '{"metadata":{"labels":{"pool":"not a value"}}}', ok=False)
    assert 'The Node "gpu-01" is invalid: metadata.labels: Invalid value: "not a value"' in done.stderr


def test_taint_and_an_unknown_effect(stand_in: KubeStandIn, kubectl: Kubectl) -> None:
    stand_in.join("gpu-01")
    assert kubectl("taint", "node", "gpu-01", "nvidia.com/gpu=present:NoSchedule").stdout.strip() == \
        "node/gpu-01 tainted"
    assert kubectl.json("get", "node", "gpu-01")["spec"]["taints"] == [
        {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
    kubectl("taint", "node", "gpu-01", "nvidia.com/gpu:NoSchedule-")
    assert not kubectl.json("get", "node", "gpu-01")["spec"].get("taints")
    done = kubectl("patch", "node", "gpu-01", "--type", "merge", "-p",
                   '{"spec":{"taints":[{"key":"k","effect":"Sometimes"}]}}', ok=False)
    assert 'spec.taints[0].effect: Unsupported value: "Sometimes"' in done.stderr


def test_cordon_and_uncordon(stand_in: KubeStandIn, kubectl: Kubectl) -> None:
    stand_in.join("gpu-01")
    assert kubectl("cordon", "gpu-01").stdout.strip() == "node/gpu-01 cordoned"
    assert lines(kubectl("get", "node", "gpu-01", "--no-headers").stdout)[0][1] == "Ready,SchedulingDisabled"
    assert kubectl("cordon", "gpu-01").stdout.strip() == "node/gpu-01 already cordoned"
    assert kubectl("uncordon", "gpu-01").stdout.strip() == "node/gpu-01 uncordoned"
    assert not kubectl.json("get", "node", "gpu-01")["spec"].get("unschedulable")


def test_drain_is_blocked_by_a_budget_until_it_is_relaxed(stand_in: KubeStandIn, kubectl: Kubectl,
                                                          background: list[Reader]) -> None:
    stand_in.join("gpu-01")
    stand_in.join("gpu-02")
    for name, node in (("web-a", "gpu-01"), ("web-b", "gpu-01"), ("web-c", "gpu-02")):
        stand_in.create_pod(name, node, labels={"app": "web"}, owner_kind="ReplicaSet", owner_name="web")
    call(stand_in, "PATCH", "/apis/apps/v1/namespaces/default/replicasets/web", {"spec": {"replicas": 3}},
         "application/merge-patch+json")
    stand_in.create_pod("dcgm-exporter", "gpu-01", namespace="gpu-operator", labels={"app": "dcgm"},
                        owner_kind="DaemonSet", owner_name="dcgm-exporter")
    stand_in.create_pdb("web", {"app": "web"}, max_unavailable=1)

    drain = Reader(kubectl.popen("drain", "gpu-01", "--ignore-daemonsets", "--timeout=90s"))
    background.append(drain)
    wait_for(lambda: any("will retry after 5s" in line and "disruption budget" in line for line in drain.err), 30)
    pods = {p["metadata"]["name"] for p in kubectl.json("get", "pods")["items"]}
    assert len(pods & {"web-a", "web-b"}) == 1 and "web-c" in pods  # one evicted, the budget keeps the other
    assert drain.proc.poll() is None

    kubectl("patch", "pdb", "web", "--type", "merge", "-p", '{"spec":{"maxUnavailable":2}}')
    assert drain.proc.wait(30) == 0, "\n".join(drain.err)
    assert "node/gpu-01 drained" in drain.out
    assert any("ignoring DaemonSet-managed Pods: gpu-operator/dcgm-exporter" in line for line in drain.err)
    assert {p["metadata"]["name"] for p in kubectl.json("get", "pods", "-A")["items"]} == {"web-c", "dcgm-exporter"}


def test_drain_refuses_pods_without_a_controller(stand_in: KubeStandIn, kubectl: Kubectl) -> None:
    stand_in.join("gpu-01")
    stand_in.create_pod("bare", "gpu-01")
    done = kubectl("drain", "gpu-01", "--ignore-daemonsets", "--timeout=10s", ok=False)
    assert done.returncode == 1 and "cannot delete Pods that declare no controller" in done.stderr
    assert kubectl.json("get", "pod", "bare")["metadata"]["name"] == "bare"


def test_wait_for_a_condition_and_for_deletion(stand_in: KubeStandIn, kubectl: Kubectl) -> None:
    stand_in.join("gpu-01", ready=False)
    threading.Timer(1.0, lambda: stand_in.set_ready("gpu-01", True)).start()
    done = kubectl("wait", "--for=condition=Ready", "node/gpu-01", "--timeout=20s")
    assert done.stdout.strip() == "node/gpu-01 condition met"
    stand_in.create_pod("a", "gpu-01")
    kubectl("delete", "pod", "a", "--wait=false")
    assert kubectl("wait", "--for=delete", "pod/a", "--timeout=20s").returncode == 0
    done = kubectl("wait", "--for=condition=Ready=False", "node/gpu-01", "--timeout=2s", ok=False)
    assert done.returncode == 1 and "timed out waiting" in done.stderr


def test_patch_merge_json_and_conflicts(stand_in: KubeStandIn, kubectl: Kubectl) -> None:
    stale = stand_in.join("gpu-01")["metadata"]["resourceVersion"]
    kubectl("patch", "node", "gpu-01", "--type", "merge", "-p", '{"metadata":{"labels":{"a":"1"}}}')
    kubectl("patch", "node", "gpu-01", "--type", "json", "-p", '[{"op":"add","path":"/metadata/labels/b","value":"2"}]')
    labels = kubectl.json("get", "node", "gpu-01")["metadata"]["labels"]
    assert (labels["a"], labels["b"]) == ("1", "2")
    done = kubectl("patch", "node", "gpu-01", "--type", "merge", "-p",
                   json.dumps({"metadata": {"resourceVersion": stale, "labels": {"c": "3"}}}), ok=False)
    assert "Error from server (Conflict)" in done.stderr and "the object has been modified" in done.stderr
    done = kubectl("patch", "node", "gpu-01", "--type", "json", "-p",
                   '[{"op":"test","path":"/metadata/labels/a","value":"9"}]', ok=False)
    assert done.returncode == 1 and "The request is invalid" in done.stderr
    assert "c" not in kubectl.json("get", "node", "gpu-01")["metadata"]["labels"]


POD = """apiVersion: v1
kind: Pod
metadata:
  name: applied
  labels: {{app: demo, tier: "{tier}"}}
spec:
  nodeName: gpu-01
  containers:
  - name: main
    image: registry.invalid/demo:1{extra}
"""


def test_apply_creates_configures_and_validates_on_the_server(stand_in: KubeStandIn, kubectl: Kubectl) -> None:
    stand_in.join("gpu-01")
    assert kubectl("apply", "-f", "-", stdin=POD.format(tier="a", extra="")).stdout.strip() == "pod/applied created"
    assert kubectl("apply", "-f", "-", stdin=POD.format(tier="a", extra="")).stdout.strip() == \
        "pod/applied unchanged"
    assert kubectl("apply", "-f", "-", stdin=POD.format(tier="b", extra="")).stdout.strip() == \
        "pod/applied configured"
    pod = kubectl.json("get", "pod", "applied")
    assert pod["metadata"]["labels"] == {"app": "demo", "tier": "b"}
    assert "kubectl.kubernetes.io/last-applied-configuration" in pod["metadata"]["annotations"]
    assert pod["status"]["phase"] == "Running"
    done = kubectl("apply", "-f", "-", stdin=POD.format(tier="b", extra="\n    imagee: typo"), ok=False)
    assert done.returncode == 1
    assert 'strict decoding error: unknown field "spec.containers[0].imagee"' in done.stderr
    done = kubectl("apply", "-f", "-", stdin=POD.format(tier="b", extra="").replace("demo:1", "demo:2")
                   .replace("gpu-01", "gpu-02"), ok=False)
    assert "Forbidden: pod updates may not change fields other than" in done.stderr


def test_get_watch_prints_columns_as_things_change(stand_in: KubeStandIn, kubectl: Kubectl,
                                                   background: list[Reader]) -> None:
    stand_in.join("gpu-01")
    watch = Reader(kubectl.popen("get", "nodes", "-w"))
    background.append(watch)
    wait_for(lambda: len(watch.out) >= 2)
    assert watch.out[0].split() == ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]
    assert watch.out[1].split()[:2] == ["gpu-01", "Ready"]
    kubectl("cordon", "gpu-01")
    wait_for(lambda: any("SchedulingDisabled" in line for line in watch.out))
    stand_in.join("gpu-02")
    wait_for(lambda: any(line.startswith("gpu-02") for line in watch.out))
    assert not watch.err


def test_namespaces_create_and_delete(kubectl: Kubectl) -> None:
    # kubectl's typed generator sends protobuf; -f sends JSON: both must work.
    assert kubectl("create", "namespace", "team-a").stdout.strip() == "namespace/team-a created"
    manifest = "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: team-b\n  labels: {team: b}\n"
    assert kubectl("create", "-f", "-", stdin=manifest).stdout.strip() == "namespace/team-b created"
    assert kubectl.json("get", "ns", "team-b")["metadata"]["labels"]["team"] == "b"
    done = kubectl("create", "namespace", "Team_C", ok=False)
    assert 'The Namespace "Team_C" is invalid: metadata.name: Invalid value: "Team_C"' in done.stderr
    assert lines(kubectl("get", "ns", "team-a", "--no-headers").stdout)[0][:2] == ["team-a", "Active"]
    assert kubectl("delete", "namespace", "team-a").stdout.strip() == 'namespace "team-a" deleted'
    done = kubectl("get", "ns", "team-a", ok=False)
    assert 'namespaces "team-a" not found' in done.stderr
    done = kubectl("delete", "namespace", "kube-system", ok=False)
    assert "Error from server (Forbidden)" in done.stderr


def test_scale_changes_what_a_budget_expects(stand_in: KubeStandIn, kubectl: Kubectl) -> None:
    stand_in.join("gpu-01")
    for name in ("web-a", "web-b"):
        stand_in.create_pod(name, "gpu-01", labels={"app": "web"}, owner_kind="ReplicaSet", owner_name="web")
    stand_in.create_pdb("web", {"app": "web"}, max_unavailable=1)
    assert kubectl("scale", "rs", "web", "--replicas=2").stdout.strip() == "replicaset.apps/web scaled"
    assert kubectl.json("get", "pdb", "web")["status"]["disruptionsAllowed"] == 1
    kubectl("scale", "rs", "web", "--replicas=3")  # a replica is missing: the budget is spent
    assert kubectl.json("get", "rs", "web")["spec"]["replicas"] == 3
    pdb = kubectl.json("get", "pdb", "web")["status"]
    assert (pdb["expectedPods"], pdb["disruptionsAllowed"]) == (3, 0)
    done = kubectl("scale", "rs", "web", "--replicas=-1", ok=False)
    assert done.returncode == 1


def test_a_kubectl_cordon_is_never_lifted_by_racklife(stand_in: KubeStandIn, kubectl: Kubectl,
                                                     tmp_path: Path) -> None:
    from lifecycle.drivers.kube import NotOurs
    from lifecycle.drivers.kube.api import KubeApiDriver

    stand_in.join("gpu-01")
    kubectl("cordon", "gpu-01")
    driver = KubeApiDriver.from_kubeconfig(stand_in.write_kubeconfig(tmp_path / "racklife-kubeconfig"))
    try:
        assert driver.cordon("gpu-01", "run-7").action == "foreign"
        with pytest.raises(NotOurs):
            driver.uncordon("gpu-01", "run-7")
        driver.set_pool("gpu-01", "inference", {"racklife.io/pool": "inference"})
    finally:
        driver.close()
    row = lines(kubectl("get", "node", "gpu-01", "--no-headers", "-L", "racklife.io/pool").stdout)[0]
    assert (row[1], row[-1]) == ("Ready,SchedulingDisabled", "inference")  # labelled, still the admin's cordon
    assert kubectl("uncordon", "gpu-01").stdout.strip() == "node/gpu-01 uncordoned"  # the admin lifts it

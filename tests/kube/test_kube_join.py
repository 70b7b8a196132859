"""An inference node joins as a kubelet would, and racklife waits for it to serve, from the API alone.

The agent is the lab's kubelet for one node, over HTTPS: it registers the
Node with the SKU's GPUs, renews its Lease, reports Ready and runs the pods
bound to it. ``KubeDriver.wait_ready`` is what racklife asks before calling
an inference node in service (virtual time: the clock moves the agent on).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from lifecycle.drivers.errors import OperationFailed
from lifecycle.drivers.kube.api import KubeApiDriver
from lifecycle.lab.kube import KubeStandIn
from lifecycle.lab.kube.agent import NodeAgent
from tests.kube.helpers import call

LEASE = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{}"


def wait_for(done: Callable[[], bool], seconds: float = 5) -> None:
    deadline = time.monotonic() + seconds
    while not done():
        assert time.monotonic() < deadline, "not reached in time"
        time.sleep(0.02)


@pytest.fixture
def agents() -> Iterator[list[NodeAgent]]:
    started: list[NodeAgent] = []
    yield started
    for agent in started:
        agent.stop()


def test_the_agent_registers_renews_and_runs_pods(stand_in: KubeStandIn, agents: list[NodeAgent]) -> None:
    agent = NodeAgent(stand_in, "gpu-01", "gb200-nvl72-tray", labels={"racklife.io/pool": "inference"},
                      renew_s=0.1, shutdown_s=0.05)
    agents.append(agent.start())
    status, node, _ = call(stand_in, "GET", "/api/v1/nodes/gpu-01")
    assert status == 200
    assert node["status"]["capacity"]["nvidia.com/gpu"] == node["status"]["allocatable"]["nvidia.com/gpu"] == "4"
    assert {c["type"]: c["status"] for c in node["status"]["conditions"]}["Ready"] == "True"
    assert node["metadata"]["labels"]["racklife.io/pool"] == "inference"

    first = call(stand_in, "GET", LEASE.format("gpu-01"))[1]
    assert first["spec"]["holderIdentity"] == "gpu-01" and first["spec"]["leaseDurationSeconds"] == 40
    wait_for(lambda: call(stand_in, "GET", LEASE.format("gpu-01"))[1]["spec"]["renewTime"]
             != first["spec"]["renewTime"])

    stand_in.create_pod("web-a", "gpu-01", wait_s=0)
    wait_for(lambda: call(stand_in, "GET", "/api/v1/namespaces/default/pods/web-a")[1]["status"].get("phase")
             == "Running")
    call(stand_in, "DELETE", "/api/v1/namespaces/default/pods/web-a")
    assert call(stand_in, "GET", "/api/v1/namespaces/default/pods/web-a")[1]["metadata"]["deletionTimestamp"]
    wait_for(lambda: call(stand_in, "GET", "/api/v1/namespaces/default/pods/web-a")[0] == 404)


def test_a_stopped_agent_runs_nothing(stand_in: KubeStandIn, agents: list[NodeAgent]) -> None:
    agent = NodeAgent(stand_in, "gpu-02", "h100-sxm-8", renew_s=0.1, shutdown_s=0.05).start()
    agent.stop()
    renewals = agent.renewals
    stand_in.create_pod("late", "gpu-02", wait_s=0)
    time.sleep(0.3)
    pod = call(stand_in, "GET", "/api/v1/namespaces/default/pods/late")[1]
    assert pod["status"]["phase"] == "Pending"  # no kubelet: the built-in one leaves an agent's node alone
    assert agent.renewals == renewals
    agents.append(agent.start())  # the node boots again: same Node, taken over
    wait_for(lambda: call(stand_in, "GET", "/api/v1/namespaces/default/pods/late")[1]["status"]["phase"]
             == "Running")


def test_wait_ready_returns_once_the_kubelet_serves(stand_in: KubeStandIn, api_driver: KubeApiDriver,
                                                   clock: Any, agents: list[NodeAgent]) -> None:
    agent = NodeAgent(stand_in, "gpu-03", "h100-sxm-8")
    steps = [agent.register, lambda: None, lambda: agents.append(agent.start())]
    clock.at_sleep = list(steps)
    node = api_driver.wait_ready("gpu-03", 8, deadline_s=60, poll_s=5)
    assert node.ready and node.gpus == 8
    assert clock.sleeps == [5, 5, 5]  # unregistered, NotReady, NotReady, then Ready


def test_wait_ready_fails_closed_on_the_wrong_gpu_count(stand_in: KubeStandIn, api_driver: KubeApiDriver,
                                                       agents: list[NodeAgent]) -> None:
    agents.append(NodeAgent(stand_in, "gpu-04", "gb200-nvl72-tray").start())
    with pytest.raises(OperationFailed) as e:
        api_driver.wait_ready("gpu-04", 8, deadline_s=20, poll_s=5)
    assert "Ready, allocatable nvidia.com/gpu 4 (the SKU has 8)" in e.value.message
    with pytest.raises(OperationFailed, match="not serving after 10 s: not registered"):
        api_driver.wait_ready("gpu-05", 8, deadline_s=10)


def test_unknown_skus_are_refused(stand_in: KubeStandIn) -> None:
    with pytest.raises(ValueError, match="unknown SKU"):
        NodeAgent(stand_in, "gpu-06", "h999").start()
    assert call(stand_in, "GET", "/api/v1/nodes/gpu-06")[0] == 404


def test_an_expired_lease_marks_the_node_unreachable_until_the_kubelet_returns() -> None:
    with KubeStandIn(shutdown_s=0, node_monitor_s=0.1) as api:
        agent = NodeAgent(api, "gpu-07", "h100-sxm-8", renew_s=0.1, lease_s=1, shutdown_s=0.05).start()
        time.sleep(1.3)  # renewed all along: still Ready
        assert _ready(api, "gpu-07") == "True"
        agent.stop()  # the kubelet is gone; its Lease runs out
        wait_for(lambda: _ready(api, "gpu-07") == "Unknown", 5)
        node = call(api, "GET", "/api/v1/nodes/gpu-07")[1]
        assert {(t["key"], t["effect"]) for t in node["spec"]["taints"]} == {
            ("node.kubernetes.io/unreachable", "NoSchedule"), ("node.kubernetes.io/unreachable", "NoExecute")}
        ready = next(c for c in node["status"]["conditions"] if c["type"] == "Ready")
        assert (ready["reason"], ready["message"]) == ("NodeStatusUnknown", "Kubelet stopped posting node status.")
        agent.start()
        try:
            wait_for(lambda: _ready(api, "gpu-07") == "True" and not
                     call(api, "GET", "/api/v1/nodes/gpu-07")[1]["spec"].get("taints"), 5)
        finally:
            agent.stop()


def _ready(api: KubeStandIn, node: str) -> str | None:
    conditions = call(api, "GET", f"/api/v1/nodes/{node}")[1]["status"]["conditions"]
    return next((c["status"] for c in conditions if c["type"] == "Ready"), None)

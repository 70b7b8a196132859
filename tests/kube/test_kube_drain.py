"""Drain: evict every evictable pod, honour PodDisruptionBudgets with backoff, report every pod touched.

Runs against the real driver over HTTP to the stand-in and against the fake;
time is virtual, so a drain that waits minutes takes milliseconds.
"""

from __future__ import annotations

from typing import Any

import pytest

from lifecycle.drivers.errors import OperationFailed
from lifecycle.drivers.kube import EvictionBackoff


def _scene(driver: Any, scene: Any) -> None:
    scene.node("gpu-01")
    scene.node("gpu-02")
    scene.pod("web-a", "gpu-01", labels={"app": "web"}, owner_kind="ReplicaSet")
    scene.pod("web-b", "gpu-02", labels={"app": "web"}, owner_kind="ReplicaSet")
    scene.pod("dcgm-exporter", "gpu-01", namespace="gpu-operator", owner_kind="DaemonSet")
    scene.pod("kube-proxy-gpu-01", "gpu-01", namespace="kube-system", mirror=True)
    scene.pod("batch-1", "gpu-01", labels={"app": "batch"})
    driver.cordon("gpu-01", "run-5")


def test_drain_evicts_and_skips_daemonsets_and_mirror_pods(cluster: Any) -> None:
    driver, scene = cluster
    _scene(driver, scene)
    report = driver.drain("gpu-01", deadline_s=60)
    assert report.complete
    assert set(report.evicted) == {"default/web-a", "default/batch-1"}
    assert report.skipped == {
        "gpu-operator/dcgm-exporter": "DaemonSet-managed",
        "kube-system/kube-proxy-gpu-01": "mirror pod (static pod managed by the kubelet)",
    }
    left = {p.key for p in driver.pods_on("gpu-01")}
    assert left == {"gpu-operator/dcgm-exporter", "kube-system/kube-proxy-gpu-01"}
    assert {p.key for p in driver.pods_on("gpu-02")} == {"default/web-b"}  # the other node untouched


def test_a_blocking_budget_is_retried_until_another_pod_is_gone(cluster: Any, clock: Any) -> None:
    driver, scene = cluster
    _scene(driver, scene)
    # maxUnavailable 1 over {web-a, web-b, web-stuck}: web-stuck is not Running, so the budget is spent
    # and evicting web-a answers 429. Once web-stuck is gone, one disruption is allowed again.
    scene.pod("web-stuck", "gpu-02", labels={"app": "web"}, owner_kind="ReplicaSet", phase="Pending")
    scene.pdb("web", {"app": "web"}, max_unavailable=1)
    clock.at_sleep = [lambda: None, lambda: scene.delete_pod("web-stuck")]
    report = driver.drain("gpu-01", deadline_s=300, backoff=EvictionBackoff(first_s=2, factor=2, max_s=30))
    assert report.complete
    assert set(report.evicted) == {"default/web-a", "default/batch-1"}
    assert not report.blocked
    assert clock.sleeps == [2, 4]
    assert report.eviction_calls == 4  # batch-1 and web-a (429), web-a (429), web-a (evicted)
    assert report.waited_s == 6
    assert {p.key for p in driver.pods_on("gpu-02")} == {"default/web-b"}


def test_the_deadline_ends_a_blocked_drain_and_says_why(cluster: Any, clock: Any) -> None:
    driver, scene = cluster
    _scene(driver, scene)
    scene.pdb("web", {"app": "web"}, min_available=2)
    report = driver.drain("gpu-01", deadline_s=45, backoff=EvictionBackoff(first_s=10, factor=2, max_s=30))
    assert not report.complete
    assert report.evicted == ("default/batch-1",)
    assert report.blocked == {"default/web-a": "The disruption budget web needs 2 healthy pods and has 2 currently"}
    (blocker,) = report.blockers
    assert blocker.pod == "default/web-a" and blocker.budget is not None
    assert (blocker.budget.name, blocker.budget.figure, blocker.budget.disruptions_allowed) == \
        ("web", "minAvailable 2", 0)
    assert "blocked default/web-a: held by PodDisruptionBudget default/web (minAvailable 2; 2 healthy of 2 " \
           "expected, 2 needed, 0 disruptions allowed)" in report.describe()
    assert sum(clock.sleeps) == pytest.approx(45)  # 10 + 20 + the 15 s left, never past the deadline
    assert clock.sleeps == [10, 20, 15]
    assert {p.key for p in driver.pods_on("gpu-01", {"app": "web"})} == {"default/web-a"}


def test_draining_a_schedulable_node_is_refused(cluster: Any) -> None:
    driver, scene = cluster
    scene.node("gpu-09")
    with pytest.raises(OperationFailed, match="cordon it first"):
        driver.drain("gpu-09", deadline_s=10)


def test_two_budgets_on_one_pod_is_an_error_not_a_retry(cluster: Any) -> None:
    driver, scene = cluster
    _scene(driver, scene)
    scene.pdb("web-1", {"app": "web"}, max_unavailable=1)
    scene.pdb("web-2", {"app": "web"}, max_unavailable="50%")
    with pytest.raises(OperationFailed, match="more than one PodDisruptionBudget") as e:
        driver.drain("gpu-01", deadline_s=10)
    assert not e.value.retryable


def test_fake_pods_take_time_to_terminate(clock: Any) -> None:
    from lifecycle.drivers.kube.fake import FakeKubeDriver

    fake = FakeKubeDriver(clock=clock, sleep=clock.sleep, grace_s=30)
    fake.add_node("gpu-01")
    fake.add_pod("web-a", "gpu-01")
    fake.cordon("gpu-01", "run-1")
    report = fake.drain("gpu-01", deadline_s=20, backoff=EvictionBackoff(first_s=5, factor=1, max_s=5))
    assert report.evicted == ("default/web-a",)
    assert report.terminating == ("default/web-a",)  # still shutting down at the deadline
    clock.now += 30
    assert fake.pods_on("gpu-01") == []


def test_the_servers_retry_after_is_a_floor_for_the_backoff(tmp_path: Any, clock: Any) -> None:
    """A budget the controller has not seen yet: 429 with Retry-After 10; the drain waits that, not its 1 s."""
    import time

    from lifecycle.drivers.kube.api import KubeApiDriver
    from lifecycle.lab.kube import KubeStandIn

    with KubeStandIn(shutdown_s=0, budget_lag_s=0.3) as api:
        api.join("gpu-01")
        api.create_pod("web-a", "gpu-01", labels={"app": "web"}, owner_kind="ReplicaSet", owner_name="web")
        api.create_pdb("web", {"app": "web"}, max_unavailable=1)
        driver = KubeApiDriver.from_kubeconfig(api.write_kubeconfig(tmp_path / "kubeconfig"), clock=clock,
                                               sleep=clock.sleep)
        try:
            driver.cordon("gpu-01", "run-1")
            clock.at_sleep = [lambda: time.sleep(0.4)]  # the controller catches up while the drain waits
            report = driver.drain("gpu-01", deadline_s=60, backoff=EvictionBackoff(first_s=1, factor=2, max_s=30))
        finally:
            driver.close()
    assert report.complete and report.evicted == ("default/web-a",)
    assert clock.sleeps[0] == 10

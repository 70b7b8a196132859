"""Pool labels and taints: set, replaced on a pool change, never clobbering anyone else's — both drivers."""

from __future__ import annotations

from typing import Any

from lifecycle.drivers.kube import POOL_LABEL, Taint


def test_set_pool_then_again_changes_nothing(cluster: Any) -> None:
    driver, scene = cluster
    scene.node("gpu-01", labels={"team": "ml"}, taints=(Taint("admin/hold", "PreferNoSchedule"),))
    change = driver.set_pool("gpu-01", "inference", {"nvidia.com/gpu.deploy.operands": "true"},
                             ["nvidia.com/gpu=present:NoSchedule"])
    assert change.changed
    assert change.labels_set == {POOL_LABEL: "inference", "nvidia.com/gpu.deploy.operands": "true"}
    assert change.taints_added == (Taint("nvidia.com/gpu", "NoSchedule", "present"),)
    node = driver.node("gpu-01")
    assert node.pool == "inference"
    assert node.labels["team"] == "ml"
    assert set(node.taints) == {Taint("admin/hold", "PreferNoSchedule"), Taint("nvidia.com/gpu", "NoSchedule", "present")}

    again = driver.set_pool("gpu-01", "inference", {"nvidia.com/gpu.deploy.operands": "true"},
                            ["nvidia.com/gpu=present:NoSchedule"])
    assert not again.changed
    assert driver.node("gpu-01").resource_version == node.resource_version  # no write at all


def test_pool_change_removes_only_what_racklife_set(cluster: Any) -> None:
    driver, scene = cluster
    scene.node("gpu-02", labels={"team": "ml"}, taints=(Taint("admin/hold", "PreferNoSchedule"),))
    driver.set_pool("gpu-02", "inference", {"serving": "yes"}, ["nvidia.com/gpu=present:NoSchedule"])
    change = driver.set_pool("gpu-02", "training", {"slurm": "yes"}, [])
    assert change.labels_removed == ("serving",)
    assert change.taints_removed == (Taint("nvidia.com/gpu", "NoSchedule", "present"),)
    node = driver.node("gpu-02")
    assert node.pool == "training"
    assert "serving" not in node.labels
    assert node.labels["team"] == "ml" and node.labels["slurm"] == "yes"
    assert node.taints == (Taint("admin/hold", "PreferNoSchedule"),)


def test_pool_change_keeps_a_maintenance_cordon(cluster: Any) -> None:
    driver, scene = cluster
    scene.node("gpu-03")
    driver.cordon("gpu-03", "run-3")
    driver.set_pool("gpu-03", "training", {}, [])
    node = driver.node("gpu-03")
    assert node.unschedulable and node.owner.run_id == "run-3"
    assert any(t.key == "racklife.io/maintenance" for t in node.taints)

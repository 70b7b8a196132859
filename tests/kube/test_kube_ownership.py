"""No racklife command lifts a cordon another owner holds; each one reports whose it is.

Against the real driver over HTTPS to the stand-in and against the fake. The
foreign owners: an admin's ``kubectl cordon`` (no annotation), tools that mark
the nodes they cordon (cluster-autoscaler's and Karpenter's taints, kured's
annotation) and another racklife run. Every driver command is tried on each.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from lifecycle.drivers.errors import OperationFailed
from lifecycle.drivers.kube import CORDONED_BY, NotOurs, Taint
from lifecycle.model.inventory import load_inventory

EXAMPLE = Path(__file__).parents[2] / "examples" / "site-h100-2rack.yaml"


def _admin(driver: Any, scene: Any, node: str) -> None:
    scene.admin_cordon(node)


def _tool(key: str, where: str) -> Callable[[Any, Any, str], None]:
    def mark(driver: Any, scene: Any, node: str) -> None:
        if where == "taint":
            driver._patch_node(node, {"spec": {"taints": [{"key": key, "value": "1", "effect": "NoSchedule"}]}})
        else:
            driver._patch_node(node, {"metadata": {"annotations": {key: "1"}}})
        scene.admin_cordon(node)
    return mark


def _other_run(driver: Any, scene: Any, node: str) -> None:
    driver.cordon(node, "run-other")


OWNERS = {
    "admin": (_admin, "other", None),
    "cluster-autoscaler": (_tool("ToBeDeletedByClusterAutoscaler", "taint"), "other", "cluster-autoscaler"),
    "karpenter": (_tool("karpenter.sh/disrupted", "taint"), "other", "karpenter"),
    "kured": (_tool("weave.works/kured-reboot-in-progress", "annotation"), "other", "kured"),
    "another racklife run": (_other_run, "racklife", None),
}


@pytest.mark.parametrize("who", OWNERS)
def test_no_command_lifts_a_foreign_cordon(cluster: Any, who: str) -> None:
    driver, scene = cluster
    scene.node("gpu-01")
    mark, kind, by = OWNERS[who]
    mark(driver, scene, "gpu-01")
    before = driver.node("gpu-01")
    assert before.unschedulable and (before.owner.kind, before.owner.by) == (kind, by)

    result = driver.cordon("gpu-01", "run-7")
    assert (result.action, result.owner) == ("foreign", before.owner)
    with pytest.raises(NotOurs) as refused:
        driver.uncordon("gpu-01", "run-7")
    assert by is None or by in refused.value.message
    driver.set_pool("gpu-01", "inference", {"racklife.io/pool": "inference"}, ["racklife.io/pool=inference:NoSchedule"])
    with pytest.raises(OperationFailed, match="not held by racklife run 'run-7'"):
        driver.drain("gpu-01", deadline_s=5, run_id="run-7")

    after = driver.node("gpu-01")
    assert after.unschedulable and after.owner == before.owner
    assert after.annotations.get(CORDONED_BY) == before.annotations.get(CORDONED_BY)


def test_every_write_is_guarded_not_only_uncordon(cluster: Any) -> None:
    driver, scene = cluster
    scene.node("gpu-02")
    scene.admin_cordon("gpu-02")
    for change in ({"spec": {"unschedulable": None}}, {"spec": {"unschedulable": False}},
                   {"metadata": {"annotations": {CORDONED_BY: "run-7"}}}):
        with pytest.raises(NotOurs):
            driver._update_node("gpu-02", lambda _node, c=change: dict(c))
    with pytest.raises(NotOurs):  # even "lifting for" a run that does not hold it
        driver._update_node("gpu-02", lambda _node: {"spec": {"unschedulable": None}}, lifting_for="run-7")
    assert driver.node("gpu-02").unschedulable


def test_racklife_lifts_its_own_cordon(cluster: Any) -> None:
    driver, scene = cluster
    scene.node("gpu-03")
    driver.cordon("gpu-03", "run-7")
    report = driver.drain("gpu-03", deadline_s=5, run_id="run-7")
    assert report.complete
    assert driver.uncordon("gpu-03", "run-7").action == "uncordoned"
    assert not driver.node("gpu-03").unschedulable


def test_pools_come_from_the_inventory(cluster: Any) -> None:
    driver, scene = cluster
    inventory = load_inventory(EXAMPLE)
    inference = next(n.name for n in inventory.nodes if n.pool == "inference")
    training = next(n.name for n in inventory.nodes if n.pool == "training")
    scene.node(inference)
    scene.node(training)
    change = driver.set_pool_from(inventory, inference)
    assert change.labels_set == {"racklife.io/pool": "inference", "nvidia.com/gpu.product": "H100-SXM5-80GB"}
    assert change.taints_added == (Taint("racklife.io/pool", "NoSchedule", "inference"),)
    node = driver.node(inference)
    assert node.pool == "inference" and Taint("racklife.io/pool", "NoSchedule", "inference") in node.taints
    assert not driver.set_pool_from(inventory, inference).changed
    with pytest.raises(OperationFailed, match="scheduled by slurm"):
        driver.set_pool_from(inventory, training)
    with pytest.raises(OperationFailed, match="not in the inventory"):
        driver.set_pool_from(inventory, "gpu-99")
    assert driver.node(training).pool is None


def test_a_pool_label_kubernetes_would_refuse_is_refused_first(cluster: Any) -> None:
    driver, scene = cluster
    inventory = load_inventory(EXAMPLE)
    inference = next(n.name for n in inventory.nodes if n.pool == "inference")
    scene.node(inference)
    inventory.pools["inference"].labels["racklife.io/team"] = "ml platform"
    inventory.pools["inference"].taints.append("bad key!:NoSchedule")
    with pytest.raises(OperationFailed) as refused:
        driver.set_pool_from(inventory, inference)
    assert "label racklife.io/team=ml platform: value: a valid label must be" in refused.value.message
    assert "bad key!:NoSchedule" in refused.value.message
    assert driver.node(inference).pool is None  # nothing written

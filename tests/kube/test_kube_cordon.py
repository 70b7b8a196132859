"""Cordon with ownership: racklife lifts only the cordons it set — against the stand-in and the fake."""

from __future__ import annotations

from typing import Any

import pytest

from lifecycle.drivers.kube import CORDONED_BY, MAINTENANCE_TAINT, NotOurs, Taint


def test_reads_a_node(cluster: Any) -> None:
    driver, scene = cluster
    scene.node("gpu-01", labels={"racklife.io/pool": "inference"}, gpus=4)
    node = driver.node("gpu-01")
    assert (node.ready, node.unschedulable, node.gpus, node.pool) == (True, False, 4, "inference")
    assert node.owner.kind == "none"
    assert len(node.boot_id) == 36  # status.nodeInfo.bootID: what a power cycle waits to see change
    scene.node("gpu-02")
    assert driver.node("gpu-02").boot_id not in ("", node.boot_id)


def test_cordon_marks_the_node_as_ours_and_uncordon_lifts_everything(cluster: Any) -> None:
    driver, scene = cluster
    scene.node("gpu-01", taints=(Taint("nvidia.com/gpu", "NoSchedule", "present"),))
    result = driver.cordon("gpu-01", "run-7", "role swap to training")
    assert result.action == "cordoned"
    node = driver.node("gpu-01")
    assert node.unschedulable
    assert node.annotations[CORDONED_BY] == "run-7"
    assert Taint(MAINTENANCE_TAINT, "NoSchedule", "run-7") in node.taints
    assert Taint("nvidia.com/gpu", "NoSchedule", "present") in node.taints
    assert (node.owner.kind, node.owner.run_id) == ("racklife", "run-7")

    assert driver.cordon("gpu-01", "run-7").action == "already"

    assert driver.uncordon("gpu-01", "run-7").action == "uncordoned"
    node = driver.node("gpu-01")
    assert not node.unschedulable
    assert CORDONED_BY not in node.annotations
    assert node.taints == (Taint("nvidia.com/gpu", "NoSchedule", "present"),)  # the pool's taint stays
    assert driver.uncordon("gpu-01", "run-7").action == "already"


def test_an_admins_cordon_is_reported_and_never_lifted(cluster: Any) -> None:
    driver, scene = cluster
    scene.node("gpu-02")
    scene.admin_cordon("gpu-02")

    result = driver.cordon("gpu-02", "run-7")
    assert result.action == "foreign"
    assert result.owner.kind == "other"
    assert CORDONED_BY not in driver.node("gpu-02").annotations  # we did not take it over

    with pytest.raises(NotOurs) as refused:
        driver.uncordon("gpu-02", "run-7")
    assert "someone else" in refused.value.message
    assert "uncordon it by hand" in refused.value.message
    assert not refused.value.retryable
    assert driver.node("gpu-02").unschedulable  # still cordoned


def test_another_runs_cordon_is_not_ours_either(cluster: Any) -> None:
    driver, scene = cluster
    scene.node("gpu-03")
    driver.cordon("gpu-03", "run-1")
    assert driver.cordon("gpu-03", "run-2").action == "foreign"
    with pytest.raises(NotOurs, match="racklife run 'run-1'"):
        driver.uncordon("gpu-03", "run-2")
    assert driver.node("gpu-03").owner.run_id == "run-1"


def test_leftover_marks_are_cleaned_after_a_hand_uncordon(cluster: Any) -> None:
    driver, scene = cluster
    scene.node("gpu-04")
    driver.cordon("gpu-04", "run-9")
    # An operator ran `kubectl uncordon`: the node is schedulable but our marks remain.
    driver._patch_node("gpu-04", {"spec": {"unschedulable": None}})
    assert driver.uncordon("gpu-04", "run-9").action == "already"
    node = driver.node("gpu-04")
    assert CORDONED_BY not in node.annotations
    assert not any(t.key == MAINTENANCE_TAINT for t in node.taints)


def test_run_ids_are_validated(cluster: Any) -> None:
    driver, scene = cluster
    scene.node("gpu-05")
    with pytest.raises(ValueError, match="run id"):
        driver.cordon("gpu-05", "bad id; rm -rf")


def test_readiness_follows_the_kubelet(cluster: Any) -> None:
    driver, scene = cluster
    scene.node("gpu-06")
    scene.set_ready("gpu-06", False)
    assert not driver.node("gpu-06").ready
    scene.set_ready("gpu-06", True)
    assert driver.node("gpu-06").ready


def _meddle_after_read(driver: Any, monkeypatch: pytest.MonkeyPatch, on_read: int, meddle: Any) -> list[int]:
    """Make another writer change the node right after racklife's ``on_read``-th read of it."""
    real, reads = driver.node, [0]

    def node(name: str) -> Any:
        current = real(name)
        reads[0] += 1
        if reads[0] == on_read:
            meddle()
        return current

    monkeypatch.setattr(driver, "node", node)
    return reads


def test_a_concurrent_write_is_reread_not_overwritten(cluster: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    driver, scene = cluster
    scene.node("gpu-07")
    # Read 1: cordon's own look; read 2: the read its conditional patch is based on. Then someone writes.
    reads = _meddle_after_read(driver, monkeypatch, 2, lambda: driver._patch_node("gpu-07", {
        "metadata": {"labels": {"team": "ml"}}, "spec": {"taints": [{"key": "admin/hold", "effect": "NoSchedule"}]}}))
    assert driver.cordon("gpu-07", "run-4").action == "cordoned"
    assert reads[0] == 3  # the patch met 409 Conflict and was recomputed from a fresh read
    node = driver.node("gpu-07")
    assert node.unschedulable and node.labels["team"] == "ml"  # both writes landed
    assert set(node.taints) == {Taint("admin/hold", "NoSchedule"), Taint(MAINTENANCE_TAINT, "NoSchedule", "run-4")}


def test_an_admin_cordon_that_wins_the_race_stays_theirs(cluster: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    driver, scene = cluster
    scene.node("gpu-08")
    _meddle_after_read(driver, monkeypatch, 2, lambda: scene.admin_cordon("gpu-08"))
    result = driver.cordon("gpu-08", "run-4")
    assert (result.action, result.owner.kind) == ("foreign", "other")
    assert CORDONED_BY not in driver.node("gpu-08").annotations

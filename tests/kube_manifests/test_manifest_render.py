"""GPU Operator and Slinky objects rendered from the inventories: valid for the cluster, and true to the inventory."""

from __future__ import annotations

from typing import Any

import pytest

from lifecycle.drivers.kube.manifests import (
    GpuOperatorOptions,
    Manifest,
    RenderError,
    SlinkyOptions,
    render_gpu_operator,
    render_slinky,
    validate,
)
from lifecycle.model.inventory import Inventory, InventoryError
from lifecycle.model.skus import SKUS
from tests.kube_manifests.inventories import edited


def _by_kind(objects: tuple[Manifest, ...], kind: str) -> list[dict[str, Any]]:
    return [m.to_dict() for m in objects if m.kind == kind]


def test_examples_render_objects_the_cluster_accepts(example: Inventory) -> None:
    for rendered in (render_gpu_operator(example), render_slinky(example)):
        checked = validate(rendered.objects)
        assert checked.errors == (), "\n".join(map(str, checked.errors))
        assert len(checked.objects) == len(rendered.objects)


def test_rendering_is_deterministic(example: Inventory) -> None:
    assert render_slinky(example) == render_slinky(example)
    assert render_gpu_operator(example) == render_gpu_operator(example)


def test_cluster_policy_tolerates_every_pool_taint_and_racklife_maintenance(example: Inventory) -> None:
    [policy] = _by_kind(render_gpu_operator(example).objects, "ClusterPolicy")
    tolerations = policy["spec"]["daemonsets"]["tolerations"]
    assert {"key": "racklife.io/maintenance", "operator": "Exists", "effect": "NoSchedule"} in tolerations
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in tolerations
    for pool in example.pools.values():
        for taint in pool.taints:
            key, _, rest = taint.partition("=")
            value, _, effect = rest.partition(":")
            assert {"key": key, "operator": "Equal", "value": value, "effect": effect} in tolerations


def test_cluster_policy_components_follow_the_site_choices() -> None:
    inv = edited(lambda d: None)
    [host] = _by_kind(render_gpu_operator(inv).objects, "ClusterPolicy")
    assert host["spec"]["driver"] == {"enabled": False} and host["spec"]["toolkit"] == {"enabled": False}
    assert host["spec"]["devicePlugin"]["enabled"] and host["spec"]["dcgmExporter"]["enabled"]
    assert host["spec"]["mig"] == {"strategy": "single"} and host["spec"]["migManager"]["enabled"]
    opts = GpuOperatorOptions(driver="operator", toolkit="operator", mig_strategy="none", dcgm_exporter=False)
    [ops] = _by_kind(render_gpu_operator(inv, opts).objects, "ClusterPolicy")
    assert ops["spec"]["driver"]["enabled"] and ops["spec"]["driver"]["version"] == "595.91.07"
    assert ops["spec"]["toolkit"]["version"] == "v1.20.0"
    assert ops["spec"]["mig"] == {"strategy": "none"} and ops["spec"]["migManager"] == {"enabled": False}
    assert ops["spec"]["dcgmExporter"] == {"enabled": False}
    assert ops["spec"]["hostPaths"]["driverInstallDir"] == "/run/nvidia/driver"
    assert validate(render_gpu_operator(inv, opts).objects).ok


def test_one_nodeset_per_training_pool_with_its_selector_and_gres(example: Inventory) -> None:
    rendered = render_slinky(example)
    nodesets = {n["metadata"]["labels"]["racklife.io/pool"]: n for n in _by_kind(rendered.objects, "NodeSet")}
    training = {p for p, pool in example.pools.items()
                if pool.scheduler == "slurm" and any(n.pool == p for n in example.nodes)}
    assert set(nodesets) == training and training
    for pool, ns in nodesets.items():
        sku = SKUS[next(n.sku for n in example.nodes if n.pool == pool)]
        spec = ns["spec"]
        assert spec["scalingMode"] == "DaemonSet"
        assert spec["template"]["spec"]["nodeSelector"]["racklife.io/pool"] == pool
        assert spec["template"]["spec"]["hostname"] == f"{pool}-"  # Slinky's Slurm NodeSet name
        assert spec["extraConf"].startswith(f"Gres=gpu:{sku.gres_type}:{sku.gpu_count} ")
        assert spec["slurmd"]["resources"]["limits"] == {"nvidia.com/gpu": sku.gpu_count}
        assert spec["controllerRef"] == {"name": "slurm"}


def test_partitions_as_the_inventory_names_them_largest_default() -> None:
    def two_pools(d: dict[str, Any]) -> None:
        d["pools"]["research"] = {"scheduler": "slurm", "partition": "train",
                                  "taints": ["racklife.io/pool=research:NoSchedule"]}
        d["pools"]["debug"] = {"scheduler": "slurm", "partition": "debug"}
        d["nodes"][0]["pool"] = "research"
        d["nodes"][1]["pool"] = "debug"
    rendered = render_slinky(edited(two_pools))
    [controller] = _by_kind(rendered.objects, "Controller")
    lines = controller["spec"]["extraConf"].splitlines()
    assert lines[0] == "GresTypes=gpu"
    assert lines[1:] == ["PartitionName=debug Nodes=debug MaxTime=INFINITE State=UP",
                         "PartitionName=train Nodes=research,training Default=YES MaxTime=INFINITE State=UP"]
    research = next(n for n in _by_kind(rendered.objects, "NodeSet")
                    if n["metadata"]["name"] == "slurm-worker-research")
    assert research["spec"]["template"]["spec"]["tolerations"] == [
        {"key": "racklife.io/pool", "operator": "Equal", "value": "research", "effect": "NoSchedule"}]
    assert validate(rendered.objects).ok


def test_keys_are_referenced_never_rendered(example: Inventory) -> None:
    rendered = render_slinky(example)
    assert not [m for m in rendered.objects if m.kind == "Secret"]
    names = {(s.name, s.key) for s in rendered.secrets}
    assert names == {("slurm-auth-slurm", "slurm.key"), ("slurm-auth-jwt", "jwt.key"),
                     ("slurm-sssd-conf", "sssd.conf"), ("slurm-mariadb-password", "password")}
    [controller] = _by_kind(rendered.objects, "Controller")
    assert controller["spec"]["slurmKeyRef"] == {"name": "slurm-auth-slurm", "key": "slurm.key"}
    without = render_slinky(example, SlinkyOptions(accounting=False))
    assert not _by_kind(without.objects, "Accounting")
    assert "accountingRef" not in _by_kind(without.objects, "Controller")[0]["spec"]
    assert ("slurm-mariadb-password", "password") not in {(s.name, s.key) for s in without.secrets}
    assert validate(without.objects).ok


def test_a_pool_mixing_skus_is_refused() -> None:
    inv = edited(lambda d: d["nodes"][0].update(sku="h200-sxm-8"))
    with pytest.raises(RenderError) as info:
        render_slinky(inv)
    [problem] = info.value.problems
    assert problem.field == "pools.training"
    assert "mixes SKUs h100-sxm-8, h200-sxm-8" in problem.message


def test_a_bad_pool_taint_is_refused_with_its_place() -> None:
    # The inventory refuses it first; the renderer checks again (model_copy skips validation).
    with pytest.raises(InventoryError):
        edited(lambda d: d["pools"]["inference"].update(taints=["racklife.io/pool=inference:Sometimes"]))
    inv = edited(lambda d: None)
    bad = inv.pools["inference"].model_copy(update={"taints": ["racklife.io/pool=inference:Sometimes"]})
    inv = inv.model_copy(update={"pools": {**inv.pools, "inference": bad}})
    with pytest.raises(RenderError) as info:
        render_gpu_operator(inv)
    assert [p.field for p in info.value.problems] == ["pools.inference.taints[0]"]


def test_a_pool_name_that_cannot_name_a_nodeset_is_refused() -> None:
    inv = edited(lambda d: None)
    pools = dict(inv.pools)
    pools["Training_A"] = pools.pop("training")
    nodes = [n.model_copy(update={"pool": "Training_A"}) if n.pool == "training" else n for n in inv.nodes]
    with pytest.raises(RenderError) as info:
        render_slinky(inv.model_copy(update={"pools": pools, "nodes": nodes}))
    assert [p.field for p in info.value.problems] == ["pools.Training_A"]

"""The provider's pieces below Terraform: the composed inventory, pool attributes, batching of calls."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from pydantic import ValidationError

from lifecycle.model.inventory import Pool, load_inventory
from lifecycle.model.states import Actor
from lifecycle.store import Store
from stacks.terraform.batch import Batcher
from stacks.terraform.desired import (
    NodeWant,
    UnknownNode,
    UnknownPool,
    baseline_problems,
    compose,
    groups,
    image_problem,
)
from stacks.terraform.pools import pool_of, state_of
from stacks.terraform.settings import from_config


@pytest.fixture
def site(repo_dir: Path, tmp_path: Path) -> tuple[Path, Store]:
    inv_path = repo_dir / "examples" / "site-h100-2rack.yaml"
    store = Store(f"sqlite:///{tmp_path / 'rl.sqlite'}")
    from lifecycle.store import connect

    connect.ensure_store(store.url)
    store.import_inventory(load_inventory(inv_path), Actor.OPERATOR, "test")
    return inv_path, store


def test_the_resource_sets_pool_and_image_of_its_node_only(site: tuple[Path, Store]) -> None:
    path, store = site
    base = load_inventory(path)
    first, second = base.nodes[0], base.nodes[1]
    other = "inference" if first.pool == "training" else "training"
    inv = compose(base, store, {first.name: NodeWant(first.name, other, "debian12-gpu")})
    assert inv.node(first.name).pool == other and inv.node(first.name).image == "debian12-gpu"
    assert inv.node(second.name) == store.get(second.name).node().model_copy(
        update={"pool": store.get(second.name).pool})


def test_an_image_version_is_pinned_per_node(site: tuple[Path, Store]) -> None:
    path, store = site
    base = load_inventory(path)
    a, b, c = (n.name for n in base.nodes[:3])
    inv = compose(base, store, {a: NodeWant(a, "training", "debian12-gpu:2025.02")})
    assert inv.node(a).image == "debian12-gpu"  # the node names the image; the version is the inventory's
    assert {i.name: i.version for i in inv.images}["debian12-gpu"] == "2025.02"
    assert {i.name: i.version for i in compose(base, store).images} == {i.name: i.version for i in base.images}
    # Two versions of one image cannot be in one inventory, and a pin would change the version of a node that
    # pins none: three groups.
    wants = {a: NodeWant(a, "training", "minimal:2"), b: NodeWant(b, "training", "minimal:1"),
             c: NodeWant(c, "training", "minimal"), "x": NodeWant("x", "training", "debian12-gpu:3")}
    assert [sorted(g) for g in groups(wants)] == [[c], sorted([a, "x"]), [b]]
    assert [sorted(g) for g in groups({a: wants[a], c: wants[c]})] == [[c], [a]]
    assert groups({}) == []
    with pytest.raises(ValueError, match="two versions of one image"):
        compose(base, store, {a: wants[a], b: wants[b]})


@pytest.mark.parametrize(("image", "why"), [("minimal", None), ("minimal:2", None), ("debian12-gpu:2025.02+1", None),
                                            ("Minimal", "RFC 1123"), ("minimal:", "version ''"),
                                            ("minimal:two words", "version 'two words'"), (":2", "name ''")])
def test_an_image_is_name_or_name_and_version(image: str, why: str | None) -> None:
    problem = image_problem(image)
    assert (problem is None) if why is None else (problem is not None and why in problem), problem


def test_a_pool_apply_changes_no_node_and_wins_over_the_file(site: tuple[Path, Store]) -> None:
    path, store = site
    base = load_inventory(path)
    floor = base.pools["training"].model_copy(update={"min_nodes": 3})
    inv = compose(base, store, pools={"training": floor}, for_import=True)
    report = store.import_inventory(inv, Actor.OPERATOR, "test")
    assert not report.updated and not report.added and len(report.unchanged) == len(base.nodes)
    assert store.pool("training").min_nodes == 3
    assert compose(base, store).pools["training"].min_nodes == 3  # the store's definition, not the file's


def test_a_node_or_pool_nobody_defines_is_refused(site: tuple[Path, Store]) -> None:
    path, store = site
    base = load_inventory(path)
    with pytest.raises(UnknownNode, match="r99-n99"):
        compose(base, store, {"r99-n99": NodeWant("r99-n99", "training")})
    with pytest.raises(UnknownPool, match="no such pool: gpu-farm"):
        compose(base, store, {base.nodes[0].name: NodeWant(base.nodes[0].name, "gpu-farm")})


def test_pool_attributes_map_to_the_inventory_pool_and_back() -> None:
    attrs = {"name": "inference", "scheduler": "kubernetes", "partition": None, "min_nodes": 2.0,
             "labels": {"racklife.io/pool": "inference"}, "taints": ["b=1:NoSchedule", "a=1:NoSchedule"],
             "leave_policy": None, "retest_level": None, "drain_deadline_s": None}
    pool = pool_of(attrs)
    assert pool == Pool(scheduler="kubernetes", min_nodes=2, labels={"racklife.io/pool": "inference"},
                        taints=["a=1:NoSchedule", "b=1:NoSchedule"])
    back = state_of("inference", pool, attrs)
    assert back["taints"] == ["a=1:NoSchedule", "b=1:NoSchedule"] and back["leave_policy"] == "wait"
    assert state_of("p", Pool(scheduler="none"), {"labels": None, "taints": None})["labels"] is None
    with pytest.raises(ValidationError, match="partition"):
        pool_of({"scheduler": "slurm"})


def test_calls_made_together_are_one_planner_call() -> None:
    rounds: list[list[str]] = []

    def run(asks: dict[str, int]) -> dict[str, int]:
        rounds.append(sorted(asks))
        return {k: v * 10 for k, v in asks.items()}

    batch: Batcher[int, int] = Batcher(run, 0.3, threading.Lock())
    results: dict[str, int] = {}

    def call(key: str, value: int) -> None:
        results[key] = batch.submit(key, value)

    threads = [threading.Thread(target=call, args=(f"n{i}", i)) for i in range(4)]
    for t in threads:
        t.start()
        time.sleep(0.02)
    for t in threads:
        t.join(10)
    assert rounds == [["n0", "n1", "n2", "n3"]]
    assert results == {"n0": 0, "n1": 10, "n2": 20, "n3": 30}
    assert batch.submit("late", 5) == 50 and rounds[-1] == ["late"]


def test_a_failed_round_fails_every_caller_in_it() -> None:
    def run(asks: dict[str, int]) -> dict[str, int]:
        raise ValueError("store down")

    batch: Batcher[int, int] = Batcher(run, 0.0, threading.Lock())
    with pytest.raises(ValueError, match="store down"):
        batch.submit("a", 1)


def test_provider_settings_come_from_the_block_then_the_environment(tmp_path: Path) -> None:
    inv = tmp_path / "inv.yaml"
    inv.write_text("x")
    settings, problems = from_config({"max_in_flight": 4}, {"RACKLIFE_INVENTORY": str(inv),
                                                           "RACKLIFE_HOME": str(tmp_path), "KUBECONFIG": "/k"})
    assert not problems and settings is not None
    assert settings.inventory == inv and settings.max_in_flight == 4 and settings.kubeconfig == "/k"
    assert settings.images_dir == tmp_path / "images" and settings.operator.startswith("terraform:")
    _, problems = from_config({"acceptance_level": "extreme", "max_unavailable": "0%", "boot_timeout": 0,
                               "bmc_credentials": {"1BAD": "u:p"}}, {})
    assert {attr for attr, _ in problems} == {"inventory", "acceptance_level", "max_unavailable", "boot_timeout",
                                              "bmc_credentials"}


def _plan(current: dict[str, object], changed: set[str] | None = None) -> tuple[dict[str, object], list[str]]:
    from tf.iface import PlanContext
    from tf.utils import Diagnostics

    from stacks.terraform.nodes import NodeResource
    from stacks.terraform.provider_base import ProviderBase

    ctx = PlanContext(Diagnostics(), "racklife_node", changed_fields=changed or set())
    planned = NodeResource(ProviderBase()).plan(ctx, dict(current), dict(current))
    return planned, [d.summary for d in ctx.diagnostics.diagnostics]


def test_the_plan_hook_turns_racklife_work_into_an_update() -> None:
    from tf.types import Unknown

    node = {"id": "n1", "name": "n1", "pool": "training", "image": None, "firmware": None, "state": "in_service",
            "power": "on", "booted_image": "minimal", "steps": [], "blockers": []}
    assert _plan(node) == (node, [])  # converged: no change
    planned, _ = _plan(node | {"steps": ["power-on (why: bmc: …)"]})  # drift the planner would fix
    assert planned["steps"] is Unknown and planned["power"] is Unknown
    planned, _ = _plan(node | {"blockers": ["held: held by run r1: it finishes first"]})  # a run to re-attach to
    assert planned["state"] is Unknown
    planned, warnings = _plan(node | {"blockers": ["foreign-drain: slurm: drained by root"]})
    assert planned["steps"] == [] and warnings == ["racklife will not act through a blocker on n1"]
    planned, _ = _plan(node | {"pool": "inference"}, {"pool"})  # a config change: a role swap
    assert planned["steps"] is Unknown and planned["pool"] == "inference"


def test_a_firmware_baseline_goes_to_the_planner_as_the_inventorys(site: tuple[Path, Store]) -> None:
    """The planner plans and applies it (update-firmware); the provider only composes it, checked as a file's."""
    path, store = site
    base = load_inventory(path)
    n = base.nodes[0].name
    want = NodeWant(n, "training", firmware={"BMC": "5.0.0"}, firmware_files={"BMC": "/srv/fw/bmc-5.tar"})
    [fw] = compose(base, store, {n: want}).node(n).firmware
    assert (fw.component, fw.version, fw.file) == ("BMC", "5.0.0", "/srv/fw/bmc-5.tar")
    assert compose(base, store, {n: NodeWant(n, "training")}).node(n).firmware == base.node(n).firmware  # no opinion
    assert baseline_problems({"BMC": "5.0.0"}, {}) == [
        ("firmware_files", "no image for component 'BMC': firmware_files must name the file that installs version "
                           "5.0.0")]
    assert [a for a, _ in baseline_problems({"BMC": "5 0"}, {"BMC": "fw.tar", "BIOS": "/b"})] == [
        "firmware_files", "firmware", "firmware_files"]  # BIOS not in the baseline; a bad version; a relative file
    with pytest.raises(ValueError, match="no image for component 'BMC'"):
        compose(base, store, {n: NodeWant(n, "training", firmware={"BMC": "5.0.0"})})


def test_without_terraform_the_tests_fail_with_a_message(monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.terraform.tfhelp import terraform_bin

    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(pytest.fail.Exception, match="the terraform binary is not on PATH"):
        terraform_bin()

"""The drift table: each rule against observations built from the lab inventory's node and pools."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from lifecycle.model.inventory import load_inventory
from lifecycle.model.states import State
from lifecycle.planner.observed import (
    AcceptanceSeen,
    BmcSeen,
    BootSeen,
    Desired,
    KubeSeen,
    Observation,
    SlurmSeen,
    Source,
    drift,
)

NOW = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)


@pytest.fixture
def desired(repo_dir: Path) -> Desired:
    inv = load_inventory(repo_dir / "examples" / "site-h100-2rack.yaml")
    node = inv.nodes[0]
    image = node.image or "minimal"
    return Desired(node, inv.pool(node.pool), image, next(i.version for i in inv.images if i.name == image))


def healthy(d: Desired) -> Observation:
    return Observation(
        d.node.name, NOW, State.IN_SERVICE, d.node.pool,
        bmc=BmcSeen("on", {"BIOS": "1.0"}),
        boot=BootSeen(d.image, d.image_version, NOW - timedelta(days=1)),
        slurm=SlurmSeen("IDLE", False, False, "", "none", None, None, (d.pool.partition or "",)),
        acceptance=AcceptanceSeen(True, True, True, True, "run:n", NOW + timedelta(days=20)))


def kinds(o: Observation, d: Desired) -> set[tuple[Source, str]]:
    return {(x.source, x.kind) for x in drift(o, d)}


def test_a_node_as_wanted_has_no_drift(desired: Desired) -> None:
    assert drift(healthy(desired), desired) == []


def test_power_off_out_of_band(desired: Desired) -> None:
    o = replace(healthy(desired), bmc=BmcSeen("off"))
    assert kinds(o, desired) == {(Source.BMC, "power")}
    assert kinds(replace(o, state=State.ENROLLED), desired) == set()  # not expected on yet


def test_foreign_drain_and_own_drain_are_told_apart(desired: Desired) -> None:
    base = healthy(desired)
    admin = replace(base, slurm=SlurmSeen("IDLE+DRAIN", True, False, "bad DIMM", "other", None, "alice",
                                          (desired.pool.partition or "",)))
    [d] = drift(admin, desired)
    assert (d.source, d.kind) == (Source.SLURM, "foreign-drain") and "alice" in d.message
    ours = replace(base, slurm=SlurmSeen("IDLE+DRAIN", True, False, "racklife:run-1: x", "racklife", "run-1",
                                         None, (desired.pool.partition or "",)))
    assert kinds(ours, desired) == {(Source.SLURM, "own-drain")}


def test_image_version_and_missing_partition(desired: Desired) -> None:
    o = replace(healthy(desired), boot=BootSeen(desired.image, "0.0.1", NOW),
                slurm=SlurmSeen("IDLE", False, False, "", "none", None, None, ()))
    assert kinds(o, desired) == {(Source.BOOT, "image"), (Source.SLURM, "partition")}


@pytest.mark.parametrize("seen", [
    AcceptanceSeen(False),
    AcceptanceSeen(True, False, True, True, "r"),
    AcceptanceSeen(True, True, False, True, "r", NOW - timedelta(days=1)),
    AcceptanceSeen(True, True, True, False, "r"),
])
def test_in_service_without_a_valid_acceptance_fails_closed(desired: Desired, seen: AcceptanceSeen) -> None:
    assert kinds(replace(healthy(desired), acceptance=seen), desired) == {(Source.ACCEPTANCE, "acceptance")}


def test_kube_labels_and_foreign_cordon(desired: Desired) -> None:
    pool = desired.pool.model_copy(update={"labels": {"racklife.io/pool": "inference"}})
    d = replace(desired, pool=pool)
    o = replace(healthy(d), slurm=None, kube=KubeSeen(True, True, True, "other", None, {}, ()))
    assert kinds(o, d) >= {(Source.KUBE, "labels"), (Source.KUBE, "foreign-cordon")}
    assert kinds(replace(o, kube=KubeSeen(False)), d) >= {(Source.KUBE, "node")}


def test_an_unreadable_source_is_drift_and_the_observation_round_trips(desired: Desired) -> None:
    o = replace(healthy(desired), bmc=None, errors={Source.BMC: "unreachable: timed out"})
    assert kinds(o, desired) == {(Source.BMC, "unreadable")}
    assert Observation.from_json(o.to_json()) == o


def test_down_after_power_loss_is_not_a_foreign_hold_but_down_with_power_is(desired: Desired) -> None:
    down = SlurmSeen("DOWN", False, True, "lab: powered off", "other", None, "root", (desired.pool.partition or "",))
    off = replace(healthy(desired), bmc=BmcSeen("off"), slurm=down)
    assert kinds(off, desired) == {(Source.BMC, "power"), (Source.SLURM, "down-powered-off")}
    # Down with power: still a foreign hold (fail closed), and Slurm's answer to a power cycle until the
    # node's slurmd registers again: apply looks again a while before it holds the down against the node.
    on = replace(off, bmc=BmcSeen("on"))
    assert kinds(on, desired) == {(Source.SLURM, "foreign-drain"), (Source.SLURM, "down-powered-on")}
    assert kinds(replace(on, slurm=replace(down, drained=True)), desired) == \
        {(Source.SLURM, "foreign-drain")}  # a drain is an owner's hold: no registration ends it


@pytest.mark.parametrize("state", [State.ENROLLED, State.AVAILABLE, State.INSPECT_FAILED, State.PROVISION_FAILED])
def test_jobs_on_a_node_racklife_would_provision_block_it(desired: Desired, state: State) -> None:
    """Provisioning power-cycles the node: racklife never takes one from under Slurm's jobs (an import of a
    fleet already serving leaves its nodes enrolled in the store)."""
    from lifecycle.planner.plan import plan_node

    base = replace(healthy(desired), state=state, bmc=BmcSeen("on"),
                   acceptance=AcceptanceSeen(False))
    working = replace(base, slurm=SlurmSeen("mixed", False, False, "", "none", None, None, ("training",),
                                            ("4242",)))
    assert kinds(working, desired) == {(Source.SLURM, "slurm-working")}
    node = plan_node(working, desired)
    assert [b.kind for b in node.blockers] == ["jobs-running"] and node.steps == []
    assert "jobs 4242" in node.blockers[0].message and state.value in node.blockers[0].message
    # Allocated with the job list not (yet) showing it: still Slurm's.
    allocated = replace(base, slurm=SlurmSeen("allocated", False, False, "", "none", None, None, ("training",)))
    assert [b.kind for b in plan_node(allocated, desired).blockers] == ["jobs-running"]
    # Idle, no jobs: provisioned as planned.
    idle = replace(base, slurm=SlurmSeen("idle", False, False, "", "none", None, None, ("training",)))
    assert (Source.SLURM, "slurm-working") not in kinds(idle, desired)
    assert plan_node(idle, desired).steps[0].action.value == "provision"


def test_jobs_on_a_node_in_service_are_not_slurm_working(desired: Desired) -> None:
    busy = replace(healthy(desired), slurm=SlurmSeen("allocated", False, False, "", "none", None, None,
                                                     (desired.pool.partition or "",), ("7",)))
    assert kinds(busy, desired) == set()

"""The plan table: per node the ordered steps with reasons, blockers stop them, unbuilt actions stay visible."""

from __future__ import annotations

from dataclasses import replace

from lifecycle.model.states import State
from lifecycle.planner.observed import AcceptanceSeen, BmcSeen, BootSeen, Desired, SlurmSeen
from lifecycle.planner.plan import Action, Floor, plan, plan_node
from tests.planner.test_drift import NOW, desired, healthy  # noqa: F401 (fixture)


def actions(p: object) -> list[Action]:
    return [s.action for s in p.steps]  # type: ignore[attr-defined]


def test_converged_node_plans_nothing(desired: Desired) -> None:  # noqa: F811
    p = plan_node(healthy(desired), desired)
    assert p.steps == [] and p.blockers == []
    assert not plan([healthy(desired)], {desired.node.name: desired}).changes


def test_lifecycle_states_plan_the_rest_of_the_way(desired: Desired) -> None:  # noqa: F811
    base = replace(healthy(desired), slurm=None, acceptance=AcceptanceSeen(False), boot=BootSeen(None, None, None))
    assert actions(plan_node(replace(base, state=State.ENROLLED), desired)) == [
        Action.PROVISION, Action.ACCEPT, Action.JOIN]
    assert actions(plan_node(replace(base, state=State.PROVISIONED, boot=healthy(desired).boot), desired)) == [
        Action.ACCEPT, Action.JOIN]


def test_image_change_plans_reimage_accept_join_with_reasons(desired: Desired) -> None:  # noqa: F811
    o = replace(healthy(desired), boot=BootSeen(desired.image, "0.0.1", NOW))
    p = plan_node(o, desired)
    # The reimage is one run (leave, reprovision, re-test, rejoin); accept and join are what it ends with.
    assert actions(p) == [Action.REIMAGE, Action.ACCEPT, Action.JOIN]
    reimage = p.steps[0]
    assert reimage.implemented and "not yet implemented" not in reimage.describe()
    assert "0.0.1" in reimage.reason and f"{desired.image}:{desired.image_version}" in reimage.detail
    assert reimage.target == f"{desired.image}:{desired.image_version}"  # what apply's runner reimages with
    assert f"leave ({desired.pool.leave_policy})" in reimage.detail and "re-test at quick" in reimage.detail
    assert "acceptance record" in p.steps[1].reason and p.steps[2].detail == f"Slurm partition {desired.pool.partition}"


def test_image_change_with_jobs_under_wait_is_blocked(desired: Desired) -> None:  # noqa: F811
    slurm = healthy(desired).slurm
    assert slurm is not None
    o = replace(healthy(desired), boot=BootSeen(desired.image, "0.0.1", NOW), slurm=replace(slurm, jobs=("42",)))
    p = plan_node(replace(o), replace(desired, pool=desired.pool.model_copy(update={"leave_policy": "wait"})))
    assert p.steps == [] and [b.kind for b in p.blockers] == ["jobs-under-wait"] and "42" in p.blockers[0].message


def test_power_off_plans_power_on(desired: Desired) -> None:  # noqa: F811
    p = plan_node(replace(healthy(desired), bmc=BmcSeen("off")), desired)
    assert actions(p) == [Action.POWER_ON] and p.steps[0].implemented
    assert plan([replace(healthy(desired), bmc=BmcSeen("off"))], {desired.node.name: desired}).changes


def test_foreign_drain_blocks_and_nothing_is_planned_through_it(desired: Desired) -> None:  # noqa: F811
    o = replace(healthy(desired), boot=BootSeen(desired.image, "0.0.1", NOW),
                slurm=SlurmSeen("IDLE+DRAIN", True, False, "bad DIMM", "other", None, "alice",
                                (desired.pool.partition or "",)))
    p = plan_node(o, desired)
    assert p.steps == [] and [b.kind for b in p.blockers] == ["foreign-drain"]
    assert "alice" in p.blockers[0].message


def test_quarantined_and_held_nodes_are_blocked(desired: Desired) -> None:  # noqa: F811
    q = plan_node(replace(healthy(desired), state=State.QUARANTINED), desired)
    assert q.steps == [] and [b.kind for b in q.blockers] == ["quarantined"]
    h = plan_node(replace(healthy(desired), state=State.PROVISIONED), desired, held_by="accept-1")
    assert h.steps == [] and "accept-1" in h.blockers[0].message


def test_running_jobs_under_wait_block_a_leave(desired: Desired) -> None:  # noqa: F811
    d = replace(desired, pool=desired.pool.model_copy(update={"leave_policy": "wait"}))
    o = replace(healthy(d), acceptance=AcceptanceSeen(True, False, True, True, "r"),
                slurm=replace(healthy(d).slurm, jobs=("42",)))  # type: ignore[type-var]
    p = plan_node(o, d)
    assert p.steps == [] and [b.kind for b in p.blockers] == ["jobs-under-wait"] and "42" in p.blockers[0].message


def test_nodes_added_and_removed_in_the_inventory(desired: Desired) -> None:  # noqa: F811
    p = plan([healthy(desired)], {desired.node.name: desired, "new-1": desired}, missing=["new-1"],
             removed=[desired.node.name])
    by = {n.node: n for n in p.nodes}
    assert actions(by["new-1"])[:2] == [Action.ENROLL, Action.PROVISION]
    assert actions(by[desired.node.name]) == [Action.DECOMMISSION] and by[desired.node.name].steps[0].implemented


def test_a_removed_node_once_decommissioned_plans_nothing(desired: Desired) -> None:  # noqa: F811
    gone = replace(healthy(desired), state=State.DECOMMISSIONED)
    p = plan([gone], {}, removed=[desired.node.name])
    assert p.nodes == [] and not p.changes


def test_a_removed_node_held_by_a_run_is_blocked_not_planned(desired: Desired) -> None:  # noqa: F811
    p = plan([healthy(desired)], {}, holders={desired.node.name: "decommission-1"}, removed=[desired.node.name])
    [n] = p.nodes
    assert n.steps == [] and [b.kind for b in n.blockers] == ["held"] and "decommission-1" in n.blockers[0].message


def test_every_step_says_why(desired: Desired) -> None:  # noqa: F811
    kube = replace(desired, pool=desired.pool.model_copy(update={"scheduler": "kubernetes", "partition": None}))
    p = plan_node(replace(healthy(kube), state=State.ACCEPTED, slurm=None), kube)
    assert [(s.action, s.reason) for s in p.steps] == [
        (Action.JOIN_KUBE, "accepted; its pool is served by Kubernetes")]


def test_moves_out_of_a_pool_beyond_its_floor_are_blocked_with_the_numbers(desired: Desired) -> None:  # noqa: F811
    names = ["a1", "a2", "a3"]
    there = replace(desired, node=desired.node.model_copy(update={"pool": "inference"}))
    seen = [replace(healthy(desired), node=n) for n in names]
    wants = {n: replace(there, node=there.node.model_copy(update={"name": n})) for n in names}
    floor = Floor(desired.node.pool, serving=5, leaving=1, min_nodes=3)
    out = {p.node: p for p in plan(seen, wants, floors={desired.node.pool: floor}).nodes}
    assert actions(out["a1"]) == [Action.MOVE_POOL] and not out["a1"].blockers
    for n in ("a2", "a3"):
        assert out[n].steps == [] and [b.kind for b in out[n].blockers] == ["pool-floor"]
        assert out[n].blockers[0].message == (
            f"pool {desired.node.pool}: 5 in service, 1 leaving in role swaps under way, 3 planned to move out; "
            "min_nodes is 3, so 1 may move now")
    # Without a floor to keep, every move is planned.
    assert all(actions(p) == [Action.MOVE_POOL] for p in plan(seen, wants).nodes)


def _baseline(d: Desired, driver: str = "redfish", **versions: str) -> Desired:
    from lifecycle.model.inventory import FirmwareBaseline

    bmc = d.node.bmc.model_copy(update={"driver": driver})
    fw = [FirmwareBaseline(component=c, version=v, file=f"/srv/fw/{c}-{v}.tar") for c, v in versions.items()]
    return replace(d, node=d.node.model_copy(update={"firmware": fw, "bmc": bmc}))


def test_a_component_off_its_baseline_plans_one_firmware_run(desired: Desired) -> None:  # noqa: F811
    d = _baseline(desired, BIOS="2.0")
    p = plan_node(healthy(desired), d)  # the BMC reports BIOS 1.0
    assert actions(p) == [Action.UPDATE_FIRMWARE] and not p.blockers
    [s] = p.steps
    assert s.implemented and "not yet implemented" not in s.describe()
    assert [(f.component, f.current, f.version, f.file) for f in s.firmware] == [
        ("BIOS", "1.0", "2.0", "/srv/fw/BIOS-2.0.tar")]
    assert "BIOS 1.0 -> 2.0 from /srv/fw/BIOS-2.0.tar" in s.detail and "re-test at quick" in s.detail
    assert "BIOS is 1.0, the baseline says 2.0" in s.reason
    # At its baseline: nothing to do.
    assert plan_node(healthy(desired), _baseline(desired, BIOS="1.0")).steps == []


def test_a_firmware_update_waits_like_a_reimage_for_jobs_under_wait(desired: Desired) -> None:  # noqa: F811
    d = _baseline(replace(desired, pool=desired.pool.model_copy(update={"leave_policy": "wait"})), BIOS="2.0")
    o = replace(healthy(d), slurm=replace(healthy(d).slurm, jobs=("42",)))  # type: ignore[type-var]
    p = plan_node(o, d)
    assert p.steps == [] and [b.kind for b in p.blockers] == ["jobs-under-wait"]


def test_a_baseline_on_an_ipmi_bmc_is_a_blocker_with_the_reason(desired: Desired) -> None:  # noqa: F811
    p = plan_node(healthy(desired), _baseline(desired, "ipmi", BIOS="2.0"))
    assert p.steps == [] and [b.kind for b in p.blockers] == ["no-firmware-interface"]
    assert "firmware interface" in p.blockers[0].message and "ipmi driver" in p.blockers[0].message


def test_a_baseline_component_the_bmc_does_not_report_is_a_blocker(desired: Desired) -> None:  # noqa: F811
    p = plan_node(healthy(desired), _baseline(desired, BMC="5.0", BIOS="2.0"))
    assert p.steps == [] and [b.kind for b in p.blockers] == ["firmware-unknown"]
    assert "no one firmware component for BMC" in p.blockers[0].message and "reports: BIOS" in p.blockers[0].message


def test_a_baseline_component_is_found_by_its_id_and_never_by_a_repeated_name(desired: Desired) -> None:  # noqa: F811
    seen = replace(healthy(desired), bmc=BmcSeen("on", {"BMC firmware": "3.0"}, (("BMC firmware", "BMC", "3.0"),)))
    [s] = plan_node(seen, _baseline(desired, BMC="5.0")).steps
    assert [(f.component, f.current) for f in s.firmware] == [("BMC", "3.0")]
    twice = replace(seen, bmc=BmcSeen("on", {"fw": "2"}, (("fw", "a1", "1"), ("fw", "b2", "2"))))
    assert [b.kind for b in plan_node(twice, _baseline(desired, fw="2")).blockers] == ["firmware-unknown"]
    assert actions(plan_node(twice, _baseline(desired, b2="3"))) == [Action.UPDATE_FIRMWARE]

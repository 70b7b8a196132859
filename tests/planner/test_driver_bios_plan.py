"""The inventory's NVIDIA driver version and BIOS attributes, planned like a firmware baseline.

The driver is observed as the node's own GPUs reported it in its newest acceptance record
(findings shaped as ``acceptance.judge`` writes them), the BIOS through the BMC's BIOS
interface (the Redfish emulator serving the captured iDRAC tree); a node whose version or
attributes differ plans one update-driver or set-bios run; what cannot be known, or an
IPMI BMC asked for BIOS attributes, is a blocker with the reason (fail closed).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import asdict, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from acceptance.judge import NodeFinding
from lifecycle.drivers.bmc.base import BmcDriver, Credentials
from lifecycle.drivers.bmc.redfish import RedfishDriver
from lifecycle.lab.redfish_emulator import BmcConfig, RedfishEmulator
from lifecycle.model.inventory import BmcSpec, InventoryError, parse_inventory
from lifecycle.model.states import State
from lifecycle.planner import observe
from lifecycle.planner.observed import AcceptanceSeen, BmcSeen, Desired
from lifecycle.planner.plan import Action, plan_node
from lifecycle.store import AcceptanceRecord, Store
from lifecycle.store.observations import reported_driver
from tests.planner.test_drift import NOW, desired, healthy  # noqa: F401 (fixture)

USER, PASSWORD = "racklife", "emulator-S3cret!"


def _wants(d: Desired, driver: str | None = None, bios: dict[str, Any] | None = None,
           pool_driver: str | None = None, pool_bios: dict[str, Any] | None = None, bmc: str = "redfish") -> Desired:
    node = d.node.model_copy(update={"driver": driver, "bios": bios or {},
                                     "bmc": d.node.bmc.model_copy(update={"driver": bmc})})
    return replace(d, node=node, pool=d.pool.model_copy(update={"driver": pool_driver, "bios": pool_bios or {}}))


def _on(d: Desired, driver: str | None = "560.35.03", bios: dict[str, bool | int | str] | None = None,
        **acc: Any) -> Any:
    o = healthy(d)
    assert o.acceptance is not None
    return replace(o, acceptance=replace(o.acceptance, driver=driver, **acc),
                   bmc=BmcSeen("on", {"BIOS": "1.0"}, bios=bios))


# ------------------------------------------------------------------ the inventory


def test_a_pool_and_a_node_name_a_driver_and_bios_attributes_and_the_node_wins(repo_dir: Path) -> None:
    text = (repo_dir / "examples" / "site-h100-2rack.yaml").read_text()
    text = text.replace("    leave_policy: requeue\n", "    leave_policy: requeue\n    driver: \"570.133.20\"\n"
                        "    bios: {SriovGlobalEnable: Enabled, ProcCStates: Disabled}\n", 1)
    text = text.replace("    serial: SN-H100-0101\n", "    serial: SN-H100-0101\n    driver: \"570.86.15\"\n"
                        "    bios: {ProcCStates: Enabled, ProcTurboMode: Enabled}\n", 1)
    inv = parse_inventory(text)
    node = inv.node("r01-n01")
    d = Desired(node, inv.pool(node.pool), None, None)
    assert d.driver == "570.86.15" and d.bios == {"SriovGlobalEnable": "Enabled", "ProcCStates": "Enabled",
                                                   "ProcTurboMode": "Enabled"}
    other = inv.node("r01-n02")
    assert Desired(other, inv.pool(other.pool), None, None).driver == "570.133.20"


def test_a_driver_or_bios_attribute_that_is_not_one_is_refused_with_its_line(repo_dir: Path) -> None:
    text = (repo_dir / "examples" / "site-h100-2rack.yaml").read_text()
    bad = text.replace("    leave_policy: requeue\n", "    leave_policy: requeue\n    driver: latest\n"
                       "    bios: {\"Sriov Enable\": Enabled, Cores: [1]}\n", 1)
    with pytest.raises(InventoryError) as exc:
        parse_inventory(bad, "site.yaml")
    text_of = str(exc.value)
    assert "pools.training.driver" in text_of and "NVIDIA driver version" in text_of and "site.yaml:" in text_of
    assert "BIOS attribute name" in text_of and "pools.training.bios.Cores" in text_of, text_of


# ------------------------------------------------------------------ the driver


def test_a_driver_the_gpus_do_not_report_plans_one_update_driver_run(desired: Desired) -> None:  # noqa: F811
    d = _wants(desired, pool_driver="570.133.20")
    p = plan_node(_on(d), d)
    assert [s.action for s in p.steps] == [Action.UPDATE_DRIVER] and not p.blockers
    [s] = p.steps
    assert s.implemented and s.target == "570.133.20"
    assert "560.35.03 -> 570.133.20" in s.detail and "re-test at quick reading 570.133.20" in s.detail
    assert "the node's GPUs report driver 560.35.03" in s.reason and "the inventory says 570.133.20" in s.reason
    assert plan_node(_on(d, "570.133.20"), d).steps == []  # on it: nothing to do
    assert plan_node(_on(desired), desired).steps == []  # no driver in the inventory: no opinion


def test_a_driver_nobody_read_is_a_blocker_not_a_guess(desired: Desired) -> None:  # noqa: F811
    d = _wants(desired, driver="570.133.20")
    for o, said in ((_on(d, None), "reports no one driver version"),
                    (_on(d, newer_than_provisioning=False), "predates its last provisioning"),
                    (replace(_on(d), acceptance=AcceptanceSeen(False)), "no acceptance record")):
        p = plan_node(o, d)
        assert p.steps == [] and [b.kind for b in p.blockers] == ["driver-unknown"], p
        assert said in p.blockers[0].message and "racklife accept" in p.blockers[0].message
    # Before its first acceptance, a node is provisioned and accepted as usual: that acceptance reads it.
    fresh = replace(_on(d, None), state=State.PROVISIONED, acceptance=AcceptanceSeen(False))
    assert [s.action for s in plan_node(fresh, d).steps] == [Action.ACCEPT, Action.JOIN]


def test_a_driver_update_waits_for_jobs_under_wait(desired: Desired) -> None:  # noqa: F811
    d = _wants(replace(desired, pool=desired.pool.model_copy(update={"leave_policy": "wait"})), driver="570.133.20")
    o = _on(d)
    p = plan_node(replace(o, slurm=replace(o.slurm, jobs=("42",))), d)
    assert p.steps == [] and [b.kind for b in p.blockers] == ["jobs-under-wait"]


def _record(node: str, *findings: NodeFinding) -> AcceptanceRecord:
    now = datetime.now(UTC)
    summary = {"verdict": "pass", "findings": [asdict(f) for f in findings]}
    return AcceptanceRecord(f"accept-1:{node}", node, True, "quick", "h100-sxm-8", now, now + timedelta(days=30),
                            "test", "accept-1", summary, None, None)


def test_the_driver_is_what_the_newest_record_read_from_the_gpus_and_two_versions_are_none() -> None:
    gpu = NodeFinding("gpu.driver", "pass", "profile", "driver_version", "560.35.03",
                      {"min": "550.0", "expected": None})
    asked = NodeFinding("result.driver", "fail", "record", "driver_version", "560.35.03", "570.86.15",
                        "the node reports driver 560.35.03, not 570.86.15")
    assert reported_driver(_record("n", gpu)) == "560.35.03"
    assert reported_driver(_record("n", gpu, asked)) == "560.35.03"  # the old one, after a lying install
    other = replace(asked, measured="570.86.15")
    assert reported_driver(_record("n", gpu, other)) is None  # contradictory: not known
    none = NodeFinding("result.driver", "error", "record", "driver_version", None, "570.86.15", "no gpu check ran")
    assert reported_driver(_record("n", none)) is None


@pytest.fixture
def store(tmp_path: Path, repo_dir: Path) -> Iterator[Store]:
    from lifecycle.model.inventory import load_inventory

    s = Store(f"sqlite:///{tmp_path / 'rl.sqlite'}")
    s.import_inventory(load_inventory(repo_dir / "examples" / "site-h100-2rack.yaml"))
    yield s
    s.close()


# ------------------------------------------------------------------ BIOS


@pytest.fixture
def emu(fixtures_dir: Path) -> Iterator[RedfishEmulator]:
    with RedfishEmulator([BmcConfig("dell", fixtures_dir / "redfish" / "dell-idrac-bmclib", USER, PASSWORD)]) as e:
        yield e


def test_observe_reads_the_driver_from_the_record_and_the_bios_through_the_bmc(
        store: Store, emu: RedfishEmulator) -> None:
    rec = store.get("r01-n01")
    store.add_acceptance_record(_record(rec.name, NodeFinding("gpu.driver", "pass", "profile", "driver_version",
                                                              "560.35.03")))

    def bmc(_node: str, _spec: BmcSpec) -> BmcDriver:
        return RedfishDriver(emu.urls["dell"], Credentials(USER, PASSWORD), timeout=5.0)

    def unused() -> Any:
        raise AssertionError("a pool without a scheduler reads no scheduler")

    sources = observe.Sources(bmc, unused, unused, firmware=False)
    [seen] = observe.observe(store, [rec], sources, {rec.name: "none"},
                             bios_for={rec.name: ["SriovGlobalEnable", "Proc1NumCores", "NoSuchAttribute"]})
    assert seen.acceptance is not None and seen.acceptance.driver == "560.35.03"
    # The captured iDRAC's values, typed as its Bios types them; an attribute it lacks is absent.
    assert seen.bmc is not None and seen.bmc.bios == {"SriovGlobalEnable": "Disabled", "Proc1NumCores": 24}
    [plain] = observe.observe(store, [rec], sources, {rec.name: "none"})
    assert plain.bmc is not None and plain.bmc.bios is None  # not asked for: not read


def test_bios_attributes_off_the_inventory_plan_one_set_bios_run(desired: Desired) -> None:  # noqa: F811
    d = _wants(desired, bios={"SriovGlobalEnable": "Enabled", "Proc1NumCores": 16}, pool_bios={"SecureBoot": True})
    o = _on(d, "560.35.03", {"SriovGlobalEnable": "Disabled", "Proc1NumCores": 24, "SecureBoot": True})
    p = plan_node(o, d)
    assert [s.action for s in p.steps] == [Action.SET_BIOS] and not p.blockers
    [s] = p.steps
    assert s.bios == (("Proc1NumCores", "16"), ("SriovGlobalEnable", "Enabled"))  # only those that differ
    assert s.target == "Proc1NumCores=16,SriovGlobalEnable=Enabled"
    assert "Proc1NumCores 24 -> 16" in s.detail and "stage, reboot, read back" in s.detail
    assert "SriovGlobalEnable is Disabled, the inventory says Enabled" in s.reason
    # Typed like the live attribute: "0x10" is 16, true is the boolean.
    same = _wants(desired, bios={"SriovGlobalEnable": "Disabled", "Proc1NumCores": "0x18", "SecureBoot": "true"})
    assert plan_node(_on(same, "560.35.03", {"SriovGlobalEnable": "Disabled", "Proc1NumCores": 24,
                                             "SecureBoot": True}), same).steps == []


def test_bios_that_cannot_be_compared_or_set_is_a_blocker_with_the_reason(desired: Desired) -> None:  # noqa: F811
    d = _wants(desired, bios={"SriovGlobalEnable": "Enabled", "Proc1NumCores": "many"})
    live = {"SriovGlobalEnable": "Disabled", "Proc1NumCores": 24}
    cases = ((_on(d, bios=live), "Proc1NumCores is an integer, not 'many'"),
             (_on(_wants(desired, bios={"Nope": 1}), bios=live), "has no attribute Nope"),
             (_on(d, bios=None), "were not read"))
    for o, said in cases:
        wants = d if "Nope" not in said else _wants(desired, bios={"Nope": 1})
        p = plan_node(o, wants)
        assert p.steps == [] and [b.kind for b in p.blockers] == ["bios-unknown"], p
        assert said in p.blockers[0].message
    ipmi = _wants(desired, bios={"SriovGlobalEnable": "Enabled"}, bmc="ipmi")
    p = plan_node(_on(ipmi), ipmi)
    assert p.steps == [] and [b.kind for b in p.blockers] == ["no-bios-interface"]
    assert "the ipmi driver" in p.blockers[0].message and "BIOS" in p.blockers[0].message


def test_a_driver_and_bios_change_are_two_runs_in_apply_order(desired: Desired) -> None:  # noqa: F811
    from lifecycle.planner.apply import ORDER, TAKES_OUT_OF_SERVICE

    d = _wants(desired, driver="570.133.20", bios={"SriovGlobalEnable": "Enabled"})
    p = plan_node(_on(d, "560.35.03", {"SriovGlobalEnable": "Disabled"}), d)
    assert [s.action for s in p.steps] == [Action.UPDATE_DRIVER, Action.SET_BIOS]  # as apply takes them
    assert ORDER.index(Action.UPDATE_DRIVER) < ORDER.index(Action.SET_BIOS) < ORDER.index(Action.ACCEPT)
    assert {Action.UPDATE_DRIVER, Action.SET_BIOS} <= TAKES_OUT_OF_SERVICE  # within --max-unavailable

"""The dynamic providers' check and diff on the example's nodes: clear failures, replace vs update.

check and diff read only their inputs (no store, no fleet), so they are
called here in-process; tests/e2e/test_pulumi_lab.py drives the same
methods through the real provider host.
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from lifecycle.model.inventory import load_inventory
from stacks.racklife_pulumi import engine
from stacks.racklife_pulumi.components import node_props
from stacks.racklife_pulumi.providers import (
    BareMetalNodeProvider,
    PoolMembershipProvider,
    SlurmNodeRegistrationProvider,
)

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "site-h100-2rack.yaml"


@pytest.fixture
def props() -> dict[str, Any]:
    inv = load_inventory(EXAMPLE)
    return node_props(inv, inv.node("r01-n01"))


def failures(result: Any) -> dict[str, str]:
    return {f.property: f.reason for f in result.failures}


def test_a_valid_node_checks_clean(props: dict[str, Any]) -> None:
    assert failures(BareMetalNodeProvider().check({}, props)) == {}


def test_bad_inputs_fail_on_their_property(props: dict[str, Any]) -> None:
    bad = copy.deepcopy(props)
    bad["spec"]["nics"][0]["mac"] = "not-a-mac"
    bad["spec"]["bmc"]["credentials"] = "hunter2"
    got = failures(BareMetalNodeProvider().check({}, bad))
    assert set(got) == {"spec.nics[0].mac", "spec.bmc.credentials"}, got
    assert "env:" in got["spec.bmc.credentials"]  # says what a credentials reference looks like
    assert "hunter2" not in " ".join(got.values())


def test_a_missing_section_and_a_wrong_name_fail(props: dict[str, Any]) -> None:
    assert set(failures(BareMetalNodeProvider().check({}, {**props, "rack": None}))) == {"rack"}
    assert set(failures(BareMetalNodeProvider().check({}, {**props, "node": "r09-n99"}))) == {"node"}


def test_node_diff_image_is_an_update_serial_a_replacement_pool_not_its_business(props: dict[str, Any]) -> None:
    p = BareMetalNodeProvider()
    assert not p.diff("id", props, copy.deepcopy(props)).changes
    image = copy.deepcopy(props)
    image["spec"]["image"] = "minimal"
    d = p.diff("id", props, image)
    assert d.changes and d.replaces == []
    serial = copy.deepcopy(props)
    serial["spec"]["serial"] = "SN-OTHER-1"
    d = p.diff("id", props, serial)
    assert d.changes and d.replaces == ["spec.serial"] and d.delete_before_replace
    pool = copy.deepcopy(props)
    pool["spec"]["pool"] = "inference"
    assert not p.diff("id", props, pool).changes  # PoolMembership's


def test_membership_check_needs_a_known_pool_and_the_acceptance_gate(props: dict[str, Any]) -> None:
    p = PoolMembershipProvider()
    good = {**props, "pool": "training", "acceptance_record": "acc-1"}
    assert failures(p.check({}, good)) == {}
    assert failures(p.check({}, {**good, "acceptance_record": None})) == {}  # unknown at preview
    assert set(failures(p.check({}, {**good, "acceptance_record": ""}))) == {"acceptance_record"}
    assert "unknown pool 'gpu'" in failures(p.check({}, {**good, "pool": "gpu"}))["pool"]
    wire = copy.deepcopy(good)
    wire["pools"]["training"]["drain_deadline_s"] = 1800.0  # as the wire carries it
    assert failures(p.check({}, wire)) == {}
    wire["pools"]["training"]["leave_policy"] = "never"
    assert list(failures(p.check({}, wire))) == ["pools.training.leave_policy"]
    d = p.diff("id", good, {**good, "pool": "inference"})
    assert d.changes and d.replaces == []  # a pool change is a role swap, in place
    assert p.diff("id", good, {**good, "node": "r01-n02"}).replaces == ["node"]


def test_membership_create_refuses_without_an_acceptance_record(props: dict[str, Any]) -> None:
    with pytest.raises(engine.FleetError, match="only once accepted"):
        PoolMembershipProvider().create({**props, "pool": "training", "acceptance_record": ""})


def test_registration_check_and_diff() -> None:
    p = SlurmNodeRegistrationProvider()
    assert failures(p.check({}, {"node": "r01-n01", "partition": "train"})) == {}
    assert set(failures(p.check({}, {"node": "r01 n01;", "partition": ""}))) == {"node", "partition"}
    olds = {"node": "r01-n01", "partition": "train", "membership": "training"}
    assert p.diff("id", olds, {**olds, "partition": "big"}).replaces == ["partition"]


def test_settings_from_config_then_environment() -> None:
    config = {"level": "standard", "maxInFlight": "4"}
    s = engine.settings_from(config.get, {"RACKLIFE_SSH_CONFIG": "/lab/ssh", "KUBECONFIG": "/k", "RACKLIFE_HOME": "/h"})
    assert (s.level, s.max_in_flight, s.ssh_config, s.kubeconfig, s.home) == ("standard", 4, "/lab/ssh", "/k", "/h")
    with pytest.raises(ValueError, match="racklife:level"):
        engine.settings_from({"level": "thorough"}.get, {})
    with pytest.raises(ValueError, match="racklife:maxInFlight"):
        engine.settings_from({"maxInFlight": "many"}.get, {})
    hooks = engine.settings_from({}.get, {"RACKLIFE_SLURM_ADD_CMD": "/site/add --x", "RACKLIFE_SLURM_CONF_CMD": "/rm"})
    assert (hooks.slurm_add_cmd, hooks.slurm_conf_cmd, hooks.parallel) == ("/site/add --x", "/rm", 4)
    assert engine.settings_from({"parallel": "2"}.get, {}).parallel == 2
    with pytest.raises(ValueError, match="racklife:parallel must be 1 to 4"):
        engine.settings_from({"parallel": "8"}.get, {})


def test_a_host_runs_at_most_parallel_operations_at_once() -> None:
    """The semaphore admits ``racklife:parallel`` operations at once (the lab test shows two Creates overlap)."""
    from stacks.racklife_pulumi import shared

    one = shared.Shared()
    with one.slot(1):
        got = threading.Event()
        t = threading.Thread(target=lambda: (one.slot(1).__enter__(), got.set()))
        t.start()
        assert not got.wait(0.5)  # parallel 1: the second operation waits for the first
    assert got.wait(5)
    t.join(timeout=5)


def test_operations_that_come_and_go_share_one_workflow_engine(tmp_path: Path) -> None:
    """Three operations, eight rounds each, arriving at any moment: one that arrives while the last one out
    shuts DBOS down waits for the shutdown, then launches it again (it used to launch DBOS under the
    shutdown: "Executor accessed before DBOS was launched", seen in the lab's whole-program test)."""
    url = f"sqlite:///{tmp_path / 'racklife.sqlite'}"
    done = subprocess.run([sys.executable, str(Path(__file__).with_name("shared_app.py")), url, "3", "8"],
                          env=os.environ | {"RACKLIFE_DB": url, "RACKLIFE_HOME": str(tmp_path)}, capture_output=True,
                          text=True, timeout=300, check=False)
    assert done.returncode == 0 and done.stdout.strip().splitlines()[-1:] == ["ok 24"], done.stdout + done.stderr


def test_numbers_as_the_wire_carries_them_still_check(props: dict[str, Any]) -> None:
    """Pulumi sends every number as a double (rack units 48.0); the inventory's integers are strict."""
    wire = copy.deepcopy(props)
    wire["rack"]["units"] = float(wire["rack"]["units"])
    wire["spec"]["u"] = float(wire["spec"]["u"])
    assert failures(BareMetalNodeProvider().check({}, wire)) == {}
    wire["spec"]["u"] = 2.5
    assert set(failures(BareMetalNodeProvider().check({}, wire))) == {"spec.u"}


def test_a_fleet_error_passes_the_redaction_filter() -> None:
    """The engine shows a provider's error and keeps it in its logs: a BMC URL with credentials is masked."""
    err = engine.FleetError("node-01: bmc: https://admin:hunter2secret@10.0.0.1/redfish refused; password=hunter2secret")
    assert "hunter2secret" not in str(err) and "10.0.0.1" in str(err)

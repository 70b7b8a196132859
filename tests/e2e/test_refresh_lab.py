"""`racklife refresh`, `plan` and `apply` on a built 4-node lab.

Converged: no drift and no steps (node-04 joined its Kubernetes pool during
the build); apply, twice, does nothing. Out-of-band changes are each reported with the source that
shows them and nothing is acted on; the plan proposes the fix for the
powered-off node, names the foreign drain as a blocker and plans nothing
through it; apply powers the node on (Slurm has it back) and leaves the
drain alone; a second apply does nothing.

The lab is built with `racklife build` (an import, then apply: provision, accept, join).
Then, behind racklife's back: node-01 is powered off through its BMC emulator
(Redfish, the real client), node-02 is drained by hand in Slurm, and node-04's
pool label is removed by hand in the Kubernetes stand-in (a merge patch).
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lifecycle.drivers.bmc.base import PowerAction, PowerState
from lifecycle.drivers.bmc.factory import driver_for
from lifecycle.drivers.slurm.driver import SlurmDriver
from lifecycle.drivers.slurm.runner import CommandRunner
from lifecycle.lab.kube.run import KubeAdmin
from lifecycle.model.inventory import load_inventory
from lifecycle.planner import observe
from lifecycle.store import Store
from tests.e2e.conftest import RunningLab

pytestmark = [pytest.mark.xdist_group("lab"), pytest.mark.slow]
TRAINING = ["node-01", "node-02", "node-03"]


@pytest.fixture(scope="module")
def built(minimal_image: Path) -> Iterator[RunningLab]:
    lab = RunningLab(4)
    try:
        # `build` is an import, then apply: provision, accept (one run), join (Slurm and Kubernetes).
        build = lab.racklife("build", str(lab.inventory), "--images", str(minimal_image), "--boot-timeout", "60",
                             timeout=1200)
        assert build.returncode == 0, build.stdout + build.stderr
        assert _states(lab) == {"node-01": "in_service", "node-02": "in_service", "node-03": "in_service",
                                "node-04": "in_service"}
        yield lab
    finally:
        lab.down()


def _refresh(lab: RunningLab) -> tuple[int, dict[str, object]]:
    res = lab.racklife("refresh", "--json")
    assert res.returncode in (0, 1), res.stdout + res.stderr
    assert "Traceback" not in res.stderr, res.stderr
    doc: dict[str, object] = json.loads(res.stdout)
    return res.returncode, doc


def _plan(lab: RunningLab) -> tuple[int, dict[str, dict[str, object]]]:
    res = lab.racklife("plan", "--json")
    assert res.returncode in (0, 1), res.stdout + res.stderr
    assert "Traceback" not in res.stderr, res.stderr
    return res.returncode, {n["node"]: n for n in json.loads(res.stdout)["nodes"]}


def _steps(p: dict[str, object]) -> list[tuple[str, bool]]:
    return [(s["action"], s["implemented"]) for s in p["steps"]]  # type: ignore[attr-defined]


def _apply(lab: RunningLab) -> tuple[int, dict[str, Any]]:
    res = lab.racklife("apply", "--yes", "--json", timeout=900)
    assert res.returncode in (0, 1), res.stdout + res.stderr
    assert "Traceback" not in res.stderr, res.stderr
    doc: dict[str, Any] = json.loads(res.stdout)
    return res.returncode, doc


def _states(lab: RunningLab) -> dict[str, str]:
    return {n["name"]: n["state"] for n in json.loads(lab.racklife("nodes", "list", "--json").stdout)}


def test_a_built_lab_has_no_drift(built: RunningLab) -> None:
    code, doc = _refresh(built)
    assert code == 0 and doc["drift"] == [], doc["drift"]
    seen = {o["node"]: o for o in doc["nodes"]}  # type: ignore[attr-defined]
    assert sorted(seen) == ["node-01", "node-02", "node-03", "node-04"]
    for n in TRAINING:
        assert seen[n]["state"] == "in_service" and seen[n]["bmc"]["power"] == "on", seen[n]
        assert seen[n]["slurm"]["partitions"] == ["training"] and not seen[n]["slurm"]["drained"], seen[n]
        assert seen[n]["acceptance"]["passed"] and seen[n]["acceptance"]["newer_than_provisioning"]
        assert seen[n]["boot"]["image"] == "minimal" and seen[n]["kube"] is None
    assert seen["node-04"]["kube"]["registered"] and seen["node-04"]["kube"]["labels"]["racklife.io/pool"] == "inference"
    assert seen["node-04"]["bmc"]["firmware"], "firmware versions read from the BMC"

    code, plan = _plan(built)
    assert code == 0 and {n: _steps(p) for n, p in plan.items() if p["steps"] or p["blockers"]} == {}, plan

    before = _states(built)
    history = {n: len(json.loads(built.racklife("node", "history", n, "--json").stdout)) for n in before}
    for _ in range(2):
        code, applied = _apply(built)
        assert code == 0 and applied["done"] == [] and applied["converged"], applied
        assert _states(built) == before
    assert {n: len(json.loads(built.racklife("node", "history", n, "--json").stdout)) for n in before} \
        == history  # nothing recorded either


def test_bad_input_is_exit_2_and_changes_nothing(built: RunningLab, tmp_path: Path) -> None:
    for args in (["plan", "--nodes", "node-01,nope"], ["refresh", "--nodes", "nope"]):
        res = built.racklife(*args)
        assert res.returncode == 2 and "nope" in res.stderr and "Traceback" not in res.stderr, res.stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text("site: {name: x}\nracks: []\n")
    res = built.racklife("plan", str(bad), "--json")
    assert res.returncode == 2 and json.loads(res.stdout)["valid"] is False


def test_out_of_band_changes_are_reported_by_source_and_left_alone(built: RunningLab) -> None:
    inv = load_inventory(built.inventory)
    before = _states(built)
    bmc = driver_for(inv.node("node-01").bmc)
    try:
        bmc.power(PowerAction.OFF)
        deadline = time.monotonic() + 60
        while bmc.power_state() != PowerState.OFF:
            assert time.monotonic() < deadline
            time.sleep(0.2)
    finally:
        bmc.close()
    subprocess.run(["scontrol", "update", "nodename=node-02", "state=drain", "reason=admin: hands off"],
                   env=built.env, check=True, timeout=15)
    # The stand-in's own admin client: kubectl sends no token over the lab's plain HTTP.
    KubeAdmin.from_kubeconfig(Path(built.env["KUBECONFIG"])).request(
        "PATCH", "/api/v1/nodes/node-04", {"metadata": {"labels": {"racklife.io/pool": None}}},
        content_type="application/merge-patch+json")

    code, doc = _refresh(built)
    assert code == 1
    found = {(d["node"], d["source"], d["kind"]) for d in doc["drift"]}  # type: ignore[attr-defined]
    assert ("node-01", "bmc", "power") in found, found
    assert ("node-02", "slurm", "foreign-drain") in found, found
    assert ("node-04", "kube", "labels") in found, found
    assert not any(n == "node-03" for n, _s, _k in found), found
    why = {(d["node"], d["kind"]): d["message"] for d in doc["drift"]}  # type: ignore[attr-defined]
    assert "admin: hands off" in why[("node-02", "foreign-drain")]
    assert "racklife.io/pool=inference" in why[("node-04", "labels")]

    code, plan = _plan(built)
    assert code == 1
    assert _steps(plan["node-01"]) == [("power-on", True)], plan["node-01"]
    assert plan["node-01"]["blockers"] == []
    assert plan["node-02"]["steps"] == [] and [b["kind"] for b in plan["node-02"]["blockers"]] == ["foreign-drain"]
    assert "admin: hands off" in plan["node-02"]["blockers"][0]["message"]
    assert plan["node-03"]["steps"] == [] and plan["node-03"]["blockers"] == []

    # Nothing acted on: racklife's beliefs, the drain and the power are as they were.
    assert _states(built) == before
    node02 = SlurmDriver(CommandRunner(env=built.env)).node("node-02")
    assert node02.state.drain and node02.reason == "admin: hands off"
    # What was seen is stored with the time.
    store = Store(f"sqlite:///{Path(built.env['RACKLIFE_HOME']) / 'racklife.sqlite'}")
    try:
        stored = observe.load(store)
    finally:
        store.close()
    assert stored["node-01"].bmc is not None and stored["node-01"].bmc.power == "off"
    assert stored["node-02"].slurm is not None and stored["node-02"].slurm.owner == "other"

    # Apply fixes what it can and leaves the foreign drain alone.
    code, applied = _apply(built)
    assert [(d["node"], d["action"], d["ok"]) for d in applied["done"]] == [("node-01", "power-on", True)], applied
    slurm = SlurmDriver(CommandRunner(env=built.env))
    assert not slurm.node("node-01").state.drain and slurm.node("node-01").state.base != "down"
    node02 = slurm.node("node-02")
    assert node02.state.drain and node02.reason == "admin: hands off"
    assert _states(built) == before
    code, after = _refresh(built)
    assert not any(d["node"] == "node-01" for d in after["drift"]), after["drift"]  # type: ignore[attr-defined]
    code, again = _apply(built)
    assert again["done"] == [], again

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


def test_a_forced_power_cycle_leaves_slurm_and_rejoins_and_never_lifts_a_foreign_drain(built: RunningLab) -> None:
    """`bmc power cycle --force` of a node in service is one workflow: the store and Slurm agree after it.

    Before, --force went straight to the BMC: Slurm held the node down ('lab: powered off'), the store
    still said in service, and the next `slurm join` moved it to join_failed.
    """
    slurm = SlurmDriver(CommandRunner(env=built.env))
    refused = built.racklife("bmc", "power", "cycle", "--node", "node-03", "--yes", "--json")
    assert refused.returncode == 5 and "a scheduler is using it" in json.loads(refused.stdout)["error"]["message"]
    dry = built.racklife("bmc", "power", "cycle", "--node", "node-03", "--force", "--dry-run", "--json")
    assert dry.returncode == 0 and json.loads(dry.stdout)["targets"] == ["node-03"], dry.stdout + dry.stderr

    # Someone else's drain: refused, nothing done (no power action, their drain and reason kept).
    subprocess.run(["scontrol", "update", "nodename=node-01", "state=drain", "reason=admin: reseat cable"],
                   env=built.env, check=True, timeout=15)
    try:
        started = slurm.node("node-01").slurmd_start
        foreign = built.racklife("bmc", "power", "cycle", "--node", "node-01", "--force", "--yes", "--json",
                                 timeout=300)
        assert foreign.returncode == 5, foreign.stdout + foreign.stderr
        [out] = json.loads(foreign.stdout)
        assert out["refused"] and out["power"] == {} and "admin: reseat cable" in out["reason"], out
        node01 = slurm.node("node-01")
        assert node01.state.drain and node01.reason == "admin: reseat cable"
        assert node01.slurmd_start == started and node01.state.responding  # not power cycled
        assert _states(built)["node-01"] == "in_service"
    finally:  # the admin lifts their own drain
        subprocess.run(["scontrol", "update", "nodename=node-01", "state=resume"], env=built.env, check=True,
                       timeout=15)

    before = slurm.node("node-03")
    assert before.slurmd_start, "Slurm reports SlurmdStartTime"
    history = len(json.loads(built.racklife("node", "history", "node-03", "--json").stdout))
    cycled = built.racklife("bmc", "power", "cycle", "--node", "node-03", "--force", "--yes", "--policy", "requeue",
                            "--json", timeout=600)
    assert cycled.returncode == 0, cycled.stdout + cycled.stderr
    assert "Traceback" not in cycled.stderr
    [out] = json.loads(cycled.stdout)
    assert out["ok"] and out["state"] == "in_service" and out["power"]["action"] == "cycle", out
    after = slurm.node("node-03")
    assert after.slurmd_start != before.slurmd_start, "the node rebooted"
    deadline = time.monotonic() + 30  # Slurm marks a resumed node not responding until its next ping (~1 s)
    while not (after.state.base == "idle" and not after.state.drain and after.state.responding):
        assert time.monotonic() < deadline, after
        time.sleep(0.5)
        after = slurm.node("node-03")
    time.sleep(11)  # a ping cycle (SlurmdTimeout/3): the node stays answering, no late 'not responding'
    after = slurm.node("node-03")
    assert after.state.base == "idle" and not after.state.drain and after.state.responding, after
    assert "training" in after.partitions
    events = [t["event"] for t in json.loads(built.racklife("node", "history", "node-03", "--json").stdout)[history:]]
    assert events == ["drain", "drain_done", "join", "join_done"], events
    assert _states(built)["node-03"] == "in_service"
    _code, seen = _refresh(built)
    assert not any(d["node"] == "node-03" for d in seen["drift"]), seen["drift"]  # type: ignore[attr-defined]
    # A later join is a no-op: nothing recorded.
    join = built.racklife("slurm", "join", "node-03", "--json")
    assert join.returncode == 0 and json.loads(join.stdout)[0]["reason"] == "already in service", join.stdout
    assert len(json.loads(built.racklife("node", "history", "node-03", "--json").stdout)) == history + 4

    # Off: the node stays out of service (drained, racklife's drain) and the output says how to bring it back.
    off = built.racklife("bmc", "power", "off", "--node", "node-03", "--force", "--yes", "--json", timeout=300)
    assert off.returncode == 0, off.stdout + off.stderr
    [out] = json.loads(off.stdout)
    assert out["ok"] and out["state"] == "drained", out
    assert out["hint"] == ("to bring it back: racklife bmc power on node-03, then racklife slurm join "
                           "node-03"), out
    held = slurm.node("node-03")
    assert held.state.drain and held.owner.kind == "racklife", held
    on = built.racklife("bmc", "power", "on", "--node", "node-03", "--json")
    assert on.returncode == 0, on.stdout + on.stderr
    deadline = time.monotonic() + 120
    while not (held.state.responding and held.state.base != "down"):  # ReturnToService=2: back when it registers
        assert time.monotonic() < deadline, held
        time.sleep(0.5)
        held = slurm.node("node-03")
    back = built.racklife("slurm", "join", "node-03", "--json")
    assert back.returncode == 0 and json.loads(back.stdout)[0]["state"] == "in_service", back.stdout + back.stderr
    assert not slurm.node("node-03").state.drain

    # A node of a Kubernetes pool: cordoned by racklife, cycled (IPMI), back when its kubelet reports a new
    # boot id and Ready, uncordoned.
    admin = KubeAdmin.from_kubeconfig(Path(built.env["KUBECONFIG"]))
    boot = admin.request("GET", "/api/v1/nodes/node-04")["status"]["nodeInfo"]["bootID"]
    kcycled = built.racklife("bmc", "power", "cycle", "--node", "node-04", "--force", "--yes", "--json", timeout=600)
    assert kcycled.returncode == 0, kcycled.stdout + kcycled.stderr
    [out] = json.loads(kcycled.stdout)
    assert out["ok"] and out["state"] == "in_service" and out["leave"]["ok"], out
    kube_node = admin.request("GET", "/api/v1/nodes/node-04")
    assert kube_node["status"]["nodeInfo"]["bootID"] != boot, "the node rebooted"
    assert not kube_node["spec"].get("unschedulable"), kube_node["spec"]
    assert [c["status"] for c in kube_node["status"]["conditions"] if c["type"] == "Ready"] == ["True"]
    assert _states(built)["node-04"] == "in_service"


def test_accept_of_nodes_in_service_is_refused_not_failed(built: RunningLab) -> None:
    """`accept` of nodes in service printed FAIL verdicts and exited 1 ("verdict: fail") for nodes nobody tested."""
    res = built.racklife("accept", "node-[01-02]", "--level", "quick", "--json")
    assert res.returncode == 5, res.stdout + res.stderr
    verdicts = json.loads(res.stdout)["nodes"]
    assert [(v["node"], v["passed"], v["state"]) for v in verdicts] == [("node-01", False, "in_service"),
                                                                        ("node-02", False, "in_service")]
    assert all("acceptance needs one of" in (v["refused_by"] or "") for v in verdicts), verdicts
    text = built.racklife("accept", "node-01", "--level", "quick")
    assert text.returncode == 5 and "REFUSED" in text.stdout and "FAIL" not in text.stdout, text.stdout

"""A rolling firmware upgrade, and a Slurm upgrade, on a built 4-node lab (real Slurm, the emulated BMCs).

In order, in one test: `racklife upgrade --nodes node-01,node-04 --firmware F --component BMC`
updates node-01 (iDRAC tree, SimpleUpdate from the image server on loopback) — drained, the
Task followed, the version read back, re-tested, in service again — and leaves node-04 (IPMI)
out with the reason; node-03 (OpenBMC tree, multipart push) likewise. Then node-02's BMC
(iLO tree) is told to fail its tasks: its upgrade fails, the node is quarantined (a firmware
update is not taken back) and its version is unchanged.

And the declarative way: node-01's firmware baseline raised in the inventory, `racklife plan`
shows the update (component, from -> to, the image), `racklife apply` carries it out through the
node cycle, and the next plan says no changes; a baseline on node-04 (IPMI) is a blocker with
the reason. Both tests keep to the nodes they name, so either may run first.

And an NVIDIA driver upgrade through the lab's install hook (`racklife lab env` exports it):
node-03 (Slurm, Redfish) and node-04 (Kubernetes, IPMI) together, each installed, power-cycled
through its BMC and re-tested; both end in service with their GPUs reporting the new driver and
are then "already on" it. Then an install that exits 0 but installs nothing (the lab fault
`driver-unapplied`) on the canary of a second rollout: the re-test reads the old driver, the node
is quarantined, the rollout halts and the other node is not touched; the node is repaired back
into service (on the driver it really runs) so the other tests find it serving.

And the declarative way for both: node-01's driver version and a BIOS attribute changed in the
inventory, `racklife plan` shows update-driver and set-bios, `racklife apply` runs each as one node
cycle (the driver read back from the node's GPUs, the attribute from the live Bios) and the next plan
says no changes; then the BMC's `bios-unapplied` fault (the attribute never reads back: undone, nothing
left staged, the node back in service) and the node's `driver-unapplied` fault (the GPUs report the old driver:
quarantined) each make apply fail with the step still planned; the node is repaired back into service.

And a Slurm upgrade of the training pool in Slurm's order (slurmdbd, slurmctld, then slurmd batch
by batch) with racklife SIGKILLed while the controllers restart (resumed, no daemon restarted twice)
and then the primary slurmctld killed mid-rollout; it takes whichever training nodes are in
service (node-02 is quarantined when the firmware test ran first) and leaves them in service.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from lifecycle.lab.redfish_emulator.update_service import make_image
from tests.e2e import slurm_reads as reads
from tests.e2e.conftest import EXE, RunningLab

pytestmark = [pytest.mark.xdist_group("lab-b"), pytest.mark.slow]


@pytest.fixture(scope="module")
def built(minimal_image: Path) -> Iterator[RunningLab]:
    lab = RunningLab(4)
    try:
        res = lab.racklife("build", str(lab.inventory), "--images", str(minimal_image), "--boot-timeout", "60",
                           timeout=1800)
        assert res.returncode == 0, res.stdout + res.stderr
        yield lab
    finally:
        lab.down()


def _states(lab: RunningLab) -> dict[str, str]:
    return {n["name"]: n["state"] for n in json.loads(lab.racklife("nodes", "list", "--json").stdout)}


def _version(lab: RunningLab, node: str, component: str) -> str:
    res = lab.racklife("bmc", "firmware", "list", node, "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    return str(next(c["version"] for c in json.loads(res.stdout)["firmware"]
                    if component in (c["name"], (c["id"] or "").rsplit("/", 1)[-1])))


def _upgrade(lab: RunningLab, nodes: str, image: Path, component: str) -> tuple[int, str]:
    res = lab.racklife("upgrade", "--nodes", nodes, "--firmware", str(image), "--component", component,
                       "--firmware-version", "4.0.0", "--canary", "0", "--policy", "requeue", timeout=1200)
    assert "Traceback" not in res.stderr, res.stderr
    return res.returncode, res.stdout + res.stderr


def test_rolling_firmware_upgrade_on_two_vendor_trees(built: RunningLab, tmp_path: Path) -> None:
    image = make_image(tmp_path / "fw.tar", "BMC", "4.0.0")
    dry = built.racklife("upgrade", "--nodes", "node-01,node-04", "--firmware", str(image), "--component", "BMC",
                         "--firmware-version", "4.0.0", "--canary", "0", "--dry-run", "--json")
    assert dry.returncode == 0, dry.stdout + dry.stderr
    plan = json.loads(dry.stdout)
    assert plan["batches"] == [["node-01"]] and "the ipmi driver" in plan["skipped"]["node-04"]

    for node, component in (("node-01", "BMC"), ("node-03", "5d0869c4")):
        assert _version(built, node, component) != "4.0.0"
        code, text = _upgrade(built, f"{node},node-04" if node == "node-01" else node, image, component)
        assert code == 0, text
        assert _version(built, node, component) == "4.0.0"
        assert _states(built)[node] == "in_service"

    fault = built.racklife("lab", "fault", "node-02", "bmc-tasks-fail", "--dir", str(built.dir))
    assert fault.returncode == 0, fault.stdout + fault.stderr
    before = _version(built, "node-02", "iLO 5")
    code, text = _upgrade(built, "node-02", image, "iLO 5")
    assert code == 1, text
    assert _states(built)["node-02"] == "quarantined"
    assert _version(built, "node-02", "iLO 5") == before


def _with_baseline(lab: RunningLab, out: Path, baselines: dict[str, tuple[str, str, Path]]) -> Path:
    doc = yaml.safe_load(lab.inventory.read_text())
    for node in doc["nodes"]:
        if node["name"] in baselines:
            component, version, image = baselines[node["name"]]
            node["firmware"] = [{"component": component, "version": version, "file": str(image)}]
    out.write_text(yaml.safe_dump(doc, sort_keys=False))
    return out


def test_apply_brings_a_node_to_its_firmware_baseline(built: RunningLab, tmp_path: Path) -> None:
    image = make_image(tmp_path / "fw-5.tar", "BMC", "5.0.0")
    before = _version(built, "node-01", "BMC")
    assert before != "5.0.0"
    inv = _with_baseline(built, tmp_path / "baseline.yaml", {"node-01": ("BMC", "5.0.0", image)})

    plan = built.racklife("plan", str(inv), "--nodes", "node-01", "--json")
    assert plan.returncode == 1, plan.stdout + plan.stderr
    [node] = json.loads(plan.stdout)["nodes"]
    [step] = node["steps"]
    assert step["action"] == "update-firmware" and step["implemented"], step
    assert step["firmware"] == [{"component": "BMC", "current": before, "version": "5.0.0", "file": str(image)}]
    text = built.racklife("plan", str(inv), "--nodes", "node-01")
    assert f"BMC {before} -> 5.0.0 from {image}" in text.stdout, text.stdout

    # --max-unavailable 2: the other test may have run first and left node-02 of the pool quarantined.
    res = built.racklife("apply", str(inv), "--nodes", "node-01", "--yes", "--json", "--max-unavailable", "2",
                         timeout=1200)
    assert "Traceback" not in res.stderr, res.stderr
    assert res.returncode == 0, res.stdout + res.stderr
    report = json.loads(res.stdout)
    assert report["converged"] and [(d["node"], d["action"], d["ok"]) for d in report["done"]] == [
        ("node-01", "update-firmware", True)], report
    assert _version(built, "node-01", "BMC") == "5.0.0"
    assert _states(built)["node-01"] == "in_service"
    history = built.racklife("node", "history", "node-01", "--json")
    assert "firmware" in history.stdout and "5.0.0" in history.stdout, history.stdout

    again = built.racklife("plan", str(inv), "--nodes", "node-01")
    assert again.returncode == 0 and "no changes" in again.stderr, again.stdout + again.stderr

    ipmi = _with_baseline(built, tmp_path / "ipmi.yaml", {"node-04": ("BMC", "5.0.0", image)})
    blocked = built.racklife("plan", str(ipmi), "--nodes", "node-04", "--json")
    assert blocked.returncode == 0, blocked.stdout + blocked.stderr  # no changes: a blocker is not a change
    [node] = json.loads(blocked.stdout)["nodes"]
    assert node["steps"] == [] and [b["kind"] for b in node["blockers"]] == ["no-firmware-interface"], node
    assert "ipmi driver" in node["blockers"][0]["message"]


def _driver(lab: RunningLab, node: str) -> list[str]:
    """The driver version each GPU of ``node`` reports, as a user reads it (nvidia-smi over SSH)."""
    res = subprocess.run(["ssh", "-F", lab.env["RACKLIFE_LAB_SSH_CONFIG"], node, "nvidia-smi",
                          "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True, text=True,
                         timeout=60, check=False)
    assert res.returncode == 0, res.stdout + res.stderr
    return res.stdout.split()


def _driver_upgrade(lab: RunningLab, nodes: str, version: str, *extra: str) -> tuple[int, dict[str, Any]]:
    # --max-unavailable 2: the firmware test may have run first and left node-02 of the pool quarantined.
    res = lab.racklife("upgrade", "--nodes", nodes, "--driver", version, "--policy", "requeue",
                       "--max-unavailable", "2", "--json", *extra, timeout=1200)
    assert "Traceback" not in res.stderr, res.stderr
    doc: dict[str, Any] = json.loads(res.stdout)
    return res.returncode, doc


def test_driver_upgrade_is_read_back_from_the_node_and_a_lying_install_halts(built: RunningLab) -> None:
    nodes = ["node-03", "node-04"]  # one per pool, so one batch: Slurm + Redfish, Kubernetes + IPMI
    old = _driver(built, "node-03")[0]
    assert old != "560.35.03" and "RACKLIFE_DRIVER_INSTALL_CMD" in built.env
    code, report = _driver_upgrade(built, ",".join(nodes), "560.35.03", "--canary", "0")
    assert code == 0, report
    assert sorted(report["upgraded"]) == nodes and report["batches"] == [nodes], report
    for n in nodes:
        assert set(_driver(built, n)) == {"560.35.03"} and _states(built)[n] == "in_service"
        [result] = [r for r in report["nodes"] if r["node"] == n]
        assert result["phases"]["driver"] > 0 and result["phases"]["retest"] > 0, result
        history = built.racklife("node", "history", n, "--json").stdout
        assert '"driver"' in history and "560.35.03" in history and old in history, history
    log = (built.dir / "driver-installs.log").read_text().splitlines()
    assert sorted(log[-2:]) == [f"{n} 560.35.03 installed" for n in nodes], log
    dry = built.racklife("upgrade", "--nodes", ",".join(nodes), "--driver", "560.35.03", "--dry-run", "--json")
    assert json.loads(dry.stdout)["skipped"] == dict.fromkeys(nodes, "already on 560.35.03"), dry.stdout

    # An install that says it worked and did nothing: the canary's re-test reads the old driver.
    dry = built.racklife("upgrade", "--nodes", ",".join(nodes), "--driver", "570.86.15", "--canary", "1",
                         "--max-unavailable", "2", "--dry-run", "--json")
    assert dry.returncode == 0, dry.stdout + dry.stderr
    [[canary], [other]] = json.loads(dry.stdout)["batches"]
    fault = built.racklife("lab", "fault", canary, "driver-unapplied", "--dir", str(built.dir))
    assert fault.returncode == 0, fault.stdout + fault.stderr
    try:
        code, report = _driver_upgrade(built, ",".join(nodes), "570.86.15", "--canary", "1", "--auto-continue")
        assert code == 1 and report["phase"] == "halted" and report["failed"] == [canary], report
        [result] = [r for r in report["nodes"] if r["node"] == canary]
        assert result["state"] == "quarantined" and "reports driver 560.35.03, not 570.86.15" in result["reason"], \
            result
        assert other not in [r["node"] for r in report["nodes"]], report  # the rollout halted before it
        assert _states(built)[canary] == "quarantined" and _states(built)[other] == "in_service"
        assert set(_driver(built, canary)) == {"560.35.03"} and set(_driver(built, other)) == {"560.35.03"}
    finally:
        built.racklife("lab", "fault", canary, "healthy", "--dir", str(built.dir))
    # Back into service on the driver it really runs (the other tests of this lab expect every node serving).
    res = built.racklife("repair", canary, "--action", "reboot", "--json", timeout=900)
    assert res.returncode == 0 and json.loads(res.stdout)["state"] == "in_service", res.stdout + res.stderr


def _bios(lab: RunningLab, node: str) -> dict[str, Any]:
    res = lab.racklife("bmc", "bios", "list", node, "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    attrs: dict[str, Any] = json.loads(res.stdout)["attributes"]
    return attrs


def _wanting(lab: RunningLab, out: Path, node: str, **wants: Any) -> Path:
    doc = yaml.safe_load(lab.inventory.read_text())
    for n in doc["nodes"]:
        if n["name"] == node:
            n.update(wants)
    out.write_text(yaml.safe_dump(doc, sort_keys=False))
    return out


def _apply(lab: RunningLab, inv: Path, *extra: str) -> tuple[int, dict[str, Any]]:
    # --max-unavailable 2: another test may have left node-02 of the pool quarantined.
    res = lab.racklife("apply", str(inv), "--nodes", "node-01", "--yes", "--json", "--max-unavailable", "2",
                       *extra, timeout=1200)
    assert "Traceback" not in res.stderr, res.stderr
    doc: dict[str, Any] = json.loads(res.stdout)
    return res.returncode, doc


def test_apply_brings_a_node_to_its_driver_and_bios_and_a_fault_of_either_fails_closed(
        built: RunningLab, tmp_path: Path) -> None:
    old = _driver(built, "node-01")
    assert len(set(old)) == 1 and old[0] != "570.133.20", old
    assert _bios(built, "node-01")["SriovGlobalEnable"] == "Disabled"  # the captured iDRAC's
    inv = _wanting(built, tmp_path / "wants.yaml", "node-01", driver="570.133.20",
                   bios={"SriovGlobalEnable": "Enabled"})

    plan = built.racklife("plan", str(inv), "--nodes", "node-01", "--json")
    assert plan.returncode == 1, plan.stdout + plan.stderr
    [node] = json.loads(plan.stdout)["nodes"]
    assert [(s["action"], s["implemented"]) for s in node["steps"]] == [("update-driver", True), ("set-bios", True)]
    assert node["steps"][0]["target"] == "570.133.20" and node["steps"][1]["bios"] == {"SriovGlobalEnable": "Enabled"}
    text = built.racklife("plan", str(inv), "--nodes", "node-01").stdout
    assert f"update-driver ({old[0]} -> 570.133.20" in text and "SriovGlobalEnable Disabled -> Enabled" in text, text

    code, report = _apply(built, inv)
    assert code == 0 and report["converged"], report
    assert [(d["node"], d["action"], d["ok"]) for d in report["done"]] == [
        ("node-01", "update-driver", True), ("node-01", "set-bios", True)], report
    assert set(_driver(built, "node-01")) == {"570.133.20"} and _bios(built, "node-01")["SriovGlobalEnable"] == \
        "Enabled"
    assert _states(built)["node-01"] == "in_service"
    again = built.racklife("plan", str(inv), "--nodes", "node-01")
    assert again.returncode == 0 and "no changes" in again.stderr, again.stdout + again.stderr

    # The BIOS never reads back: the change is undone (the node rejoins as it was), apply fails, still planned.
    back = _wanting(built, tmp_path / "bios-back.yaml", "node-01", driver="570.133.20",
                    bios={"SriovGlobalEnable": "Disabled"})
    fault = built.racklife("lab", "fault", "node-01", "bios-unapplied", "--dir", str(built.dir))
    assert fault.returncode == 0, fault.stdout + fault.stderr
    try:
        code, report = _apply(built, back, "--bios-timeout", "15")
    finally:
        built.racklife("lab", "fault", "node-01", "bmc-healthy", "--dir", str(built.dir))
    assert code == 1 and not report["converged"], report
    [done] = report["done"]
    assert (done["action"], done["ok"]) == ("set-bios", False) and "read back" in done["detail"], done
    assert _states(built)["node-01"] == "in_service" and _bios(built, "node-01")["SriovGlobalEnable"] == "Enabled"
    assert [s["action"] for n in report["remaining"]["nodes"] for s in n["steps"]] == ["set-bios"], report
    pending = built.racklife("bmc", "bios", "list", "node-01", "--pending", "--json")
    assert json.loads(pending.stdout)["pending"] == {}, pending.stdout  # undone: nothing left for a later reboot

    # The install says it worked and did nothing: the re-test reads the old driver; quarantined, not rejoined.
    newer = _wanting(built, tmp_path / "newer.yaml", "node-01", driver="575.51.02")
    fault = built.racklife("lab", "fault", "node-01", "driver-unapplied", "--dir", str(built.dir))
    assert fault.returncode == 0, fault.stdout + fault.stderr
    try:
        code, report = _apply(built, newer)
        assert code == 1 and not report["converged"], report
        [done] = report["done"]
        assert (done["action"], done["ok"]) == ("update-driver", False), done
        assert _states(built)["node-01"] == "quarantined" and set(_driver(built, "node-01")) == {"570.133.20"}
        [left] = report["remaining"]["nodes"]
        assert [b["kind"] for b in left["blockers"]] == ["quarantined"], left
    finally:
        built.racklife("lab", "fault", "node-01", "healthy", "--dir", str(built.dir))
    res = built.racklife("repair", "node-01", "--action", "reboot", "--json", timeout=900)
    assert res.returncode == 0 and json.loads(res.stdout)["state"] == "in_service", res.stdout + res.stderr


_slurm = reads.slurm


def _ping(lab: RunningLab) -> dict[str, str]:
    text = subprocess.run(["scontrol", "ping"], env=lab.env, capture_output=True, text=True, timeout=60).stdout
    return dict(re.findall(r"Slurmctld\((primary|backup)\d*\) at \S+ is (UP|DOWN)", text))


def _wait(cond: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)


def test_slurm_upgrade_in_slurms_order_survives_a_crash_of_racklife_and_the_primary_controller_dying(
        built: RunningLab, minimal_image: Path, tmp_path: Path) -> None:
    """slurmdbd, then slurmctld, then each slurmd batch by batch, with two crashes in the way:

    1. racklife SIGKILLed after slurmdbd's restart is journaled, while the hook restarts the controllers (the
       backup done, the primary under way: the hook outlives racklife); `racklife upgrade resume RUN` adopts
       the run. slurmdbd and each slurmctld started exactly once (their own log lines, pids, BOOT_TIME):
       before, the recovered run restarted both controllers again;
    2. once a slurmd has restarted, the primary slurmctld is killed: the backup answers and the rollout
       finishes.

    Each slurmd restarted once; sacct lists the requeued jobs with their GPUs. One Slurm version here: every
    daemon restarts onto the same binaries (docs/limits.md), and the version each reports is checked."""
    version = _slurm(built, "slurmctld", "-V").split()[-1]
    hook = [sys.executable, "-m", "lifecycle.lab.slurm_daemons", "--lab-dir", str(built.dir)]
    nodes = reads.training(built)
    assert len(nodes) >= 2, _states(built)  # node-02 is quarantined when the firmware test ran first
    jobs = [_slurm(built, "sbatch", "--parsable", "--chdir=/tmp", "--output=/dev/null", "-p", "training", "-N1",
                   "--gres=gpu:2", "--wrap", "sleep 900").strip() for _ in range(2)]
    _wait(lambda: sorted(_slurm(built, "squeue", "-h", "-t", "R", "-o", "%i").split()) == sorted(jobs), 60,
          "the jobs to run")
    # A retry policy shorter than the cluster's SlurmctldTimeout (the lab's: 10 s) is named before anything runs.
    short = built.racklife("upgrade", "--pool", "training", "--slurm", version, "--max-unavailable", "2",
                           "--dry-run", env_extra={"RACKLIFE_RETRY_ATTEMPTS": "2"})
    assert short.returncode == 0 and "warning: racklife retries a Slurm call that finds no controller for about " \
        "2 s (RACKLIFE_RETRY_*), less than this cluster's SlurmctldTimeout of 10 s" in short.stderr, short.stderr
    pids = {d: reads.pid(built, d) for d in ("slurmdbd", "slurmctld-primary", "slurmctld-backup")}
    dbd_boot, ctld_boot = reads.dbd_boot(built), reads.ctld_boot(built)
    slurmd_start = {n: reads.slurmd_start(built, n) for n in nodes}
    logs = reads.Logs(built)
    first_log = tmp_path / "first.log"
    with first_log.open("wb") as f:
        first = subprocess.Popen([EXE, "upgrade", "--pool", "training", "--slurm", version, "--policy", "requeue",
                                  "--deadline", "5s", "--max-unavailable", "2", "--canary", "1", "--auto-continue",
                                  "--json"], env=built.env, stdout=f, stderr=subprocess.STDOUT)
    try:
        _wait(lambda: first.poll() is not None or "restart slurmctld backup" in logs.restarts(), 300,
              "the backup slurmctld's restart")
    finally:
        first.send_signal(signal.SIGKILL)  # racklife only: its hook goes on to restart the primary
        first.wait(30)
    assert logs.restarts() == ["restart slurmdbd", "restart slurmctld backup"], (logs.restarts(),
                                                                                 first_log.read_text())
    found = re.search(r"upgrade run (upgrade-[0-9a-f]+)", first_log.read_text())
    assert found, first_log.read_text()
    run = found[1]
    assert "SlurmctldTimeout" not in first_log.read_text()  # the default policy outlasts the lab's 10 s

    resumed = subprocess.Popen([EXE, "upgrade", "resume", run, "--images", str(minimal_image), "--json"],
                               env=built.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # Once a slurmd has restarted (the control plane is done), the primary slurmctld dies.
        _wait(lambda: resumed.poll() is not None or any(r.startswith("restart slurmd ") for r in logs.restarts()),
              600, "the first slurmd restart")
        assert resumed.poll() is None, resumed.communicate()
        after = {d: reads.pid(built, d) for d in pids}
        ctld_boot_after = reads.ctld_boot(built)
        killed = subprocess.run([*hook, "kill", "slurmctld-primary"], env=built.env, capture_output=True, text=True,
                                timeout=120)
        assert killed.returncode == 0, killed.stderr
        _wait(lambda: _ping(built) == {"primary": "DOWN", "backup": "UP"}, 120, "the backup to be in charge")
        out, err = resumed.communicate(timeout=1500)
        ctld_starts = logs.started("slurmctld.log", "slurmctld")
    finally:
        if resumed.poll() is None:
            resumed.kill()
        subprocess.run([*hook, "restart", "slurmctld-primary"], env=built.env, capture_output=True, timeout=120)
    assert resumed.returncode == 0, out + err
    assert "Traceback" not in err and f"{run}: its process is gone: running it here" in err, err
    report = json.loads(out)
    # The order the daemons really restarted in, as the lab's hook saw it: each control-plane daemon once.
    restarts = logs.restarts()
    assert restarts[:3] == ["restart slurmdbd", "restart slurmctld backup", "restart slurmctld primary"], restarts
    assert restarts[-1] == "restart slurmctld primary", restarts  # this test's own, after the kill
    assert not [r for r in restarts[3:-1] if r.startswith(("restart slurmdbd", "restart slurmctld"))], restarts
    slurmds = [r.removeprefix("restart slurmd ") for r in restarts[3:] if r.startswith("restart slurmd ")]
    assert sorted(slurmds) == nodes, restarts
    # ... and as the daemons say: one start line each (the two controllers share a log), new pids and boot times.
    assert logs.started("slurmdbd.log", "slurmdbd") == 1, logs.new("slurmdbd.log")[-2000:]
    assert ctld_starts == 2, logs.new("slurmctld.log")[-3000:]
    assert all(after[d] != pids[d] for d in pids), (pids, after)
    dbd, ctld = report["control_plane"]
    assert dbd["daemon"] == "slurmdbd" and dbd["ok"] and "already" not in dbd, dbd  # journaled before the kill
    assert dbd["after"] == version and dbd["started"] == [dbd_boot, reads.dbd_boot(built)], dbd
    assert ctld["daemon"] == "slurmctld" and ctld["ok"] and ctld["after"] == version, ctld
    assert "not restarted again" in ctld["already"] and ctld["started"] == [ctld_boot, ctld_boot_after], ctld
    for n in nodes:
        assert logs.started(f"slurmd-{n}.log", "slurmd") == 1, (n, logs.new(f"slurmd-{n}.log")[-2000:])
        assert reads.slurmd_start(built, n) != slurmd_start[n], n
    assert report["phase"] == "done" and sorted(report["upgraded"]) == nodes, report
    assert report["batches"] == [nodes[:1], nodes[1:3], *([nodes[3:]] if nodes[3:] else [])], report["batches"]
    # The primary died after the first slurmd restart, and the rollout went on under the backup.
    kill = restarts.index("kill slurmctld primary")
    assert kill > 3 and any(r.startswith("restart slurmd ") for r in restarts[kill:]), restarts
    assert _ping(built) == {"primary": "UP", "backup": "UP"}
    # No job lost: both requeued (the report says so), and slurmdbd recorded each run with its GPUs.
    touched = " ".join(report["touched"])
    for job in jobs:
        assert f"Slurm job {job} " in touched and "requeued" in touched, report["touched"]
        rows = [r.split("|") for r in _slurm(built, "sacct", "-n", "-P", "-D", "-X", "-j", job, "-o",
                                             "JobID,State,AllocTRES").splitlines()]
        assert any(r[1] == "REQUEUED" and "gres/gpu=2" in r[2].split(",") for r in rows), rows
        subprocess.run(["scancel", job], env=built.env, timeout=60, check=False)
    assert set(_states(built)[n] for n in nodes) == {"in_service"}

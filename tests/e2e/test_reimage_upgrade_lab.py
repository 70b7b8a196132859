"""Changing a node's image: `apply` of a changed inventory, `role-swap --reimage`, a rolling upgrade (real Slurm).

One 7-node lab (node-01..06 in training, Slurm; node-07 in inference),
built with `racklife build` from the minimal image, version 1; a second build
of it, version 2, is published beside it. In order, in one test:

1. the inventory pinning every node to minimal 1 plans no changes; changed to
   version 2, the plan shows a reimage (and the re-acceptance and join it
   ends with); `racklife apply --nodes node-06` carries it out as one run
   (racklife's drain, reprovisioned with version 2, re-tested, idle in its
   partition again) and node-06 then plans no changes;
2. `racklife role-swap node-05 --to inference --reimage --image minimal:2`:
   the node boots version 2 and ends Ready in Kubernetes in pool inference;
3. `racklife upgrade --pool training --image minimal:2 --max-unavailable 2
   --canary 1 --policy wait` with a job running on node-01: node-06 (already
   on version 2) is left out; the canary (node-01) waits for the job, which
   completes; the run holds after it until `racklife upgrade resume`; then
   node-02..04 go, never more than 2 of the pool out of service at once. The
   controller is SIGKILLed while batch 2 is under way; `racklife upgrade
   resume RUN` adopts the run, and batch 2 finishes (each of its nodes
   drained and reimaged once). Every node ends on version 2, idle in Slurm,
   and plans no changes; the report names the job it touched.

A second test (independent of the first: it may run alone) upgrades node-01..04
to minimal 3 with `--canary 1 --policy wait`: the run holds after the canary
(node-01 new, accepted, in service; the others untouched); a long job starts
on node-02; `resume`, and while batch 2 waits for the job, `abort`. Every node
ends fully new (node-01..03: minimal 3 booted, accepted, in service in Slurm)
or fully old (node-04: its old image, in service, no event in its history);
sacct says the job COMPLETED.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.conftest import EXE, RunningLab, built_lab, publish_version, wait_for

pytestmark = [pytest.mark.xdist_group("lab-b"), pytest.mark.slow]
UPGRADED = ["node-01", "node-02", "node-03", "node-04"]
SERVING = {"idle", "allocated", "mixed", "completing"}


@pytest.fixture(scope="module")
def lab(minimal_image: Path) -> Iterator[RunningLab]:
    # 7 nodes: one IPMI BMC (node-04). With 8, the lab's two IPMI BMCs (node-04, node-08) both time out on
    # session setup when refresh reads them together, and the build does not converge (reported separately).
    with built_lab(7, minimal_image, timeout=1800) as running:
        yield running


def pinned(lab: RunningLab, tmp: Path, version: str) -> Path:
    """The lab's inventory with every node on image minimal at ``version``."""
    doc = yaml.safe_load(lab.inventory.read_text())
    doc["images"] = [{"name": "minimal", "version": version}]
    for n in doc["nodes"]:
        n["image"] = "minimal"
    out = tmp / f"inventory-{version}.yaml"
    out.write_text(yaml.safe_dump(doc, sort_keys=False))
    return out


def plan(lab: RunningLab, inv: Path, *args: str) -> tuple[int, dict[str, dict[str, Any]]]:
    res = lab.racklife("plan", str(inv), *args, "--json")
    assert res.returncode in (0, 1) and "Traceback" not in res.stderr, res.stdout + res.stderr
    return res.returncode, {n["node"]: n for n in json.loads(res.stdout)["nodes"]}


def booted(lab: RunningLab, node: str) -> tuple[str, str]:
    res = lab.racklife("refresh", "--nodes", node, "--json")
    [seen] = json.loads(res.stdout)["nodes"]
    return seen["boot"]["image"], seen["boot"]["version"]


def sinfo(lab: RunningLab) -> dict[str, tuple[str, str]]:
    out = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %T %P"], env=lab.env, capture_output=True, text=True,
                         timeout=15, check=True).stdout.split("\n")
    return {f[0]: (f[1], f[2].rstrip("*")) for line in out if len(f := line.split()) == 3}


def node(lab: RunningLab, name: str) -> dict[str, Any]:
    return next(n for n in json.loads(lab.racklife("nodes", "list", "--json").stdout) if n["name"] == name)


def upgrade_status(lab: RunningLab, run: str) -> dict[str, Any]:
    res = lab.racklife("upgrade", "status", run, "--json")
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stdout + res.stderr
    doc: dict[str, Any] = json.loads(res.stdout)
    return doc


def _reimage_through_apply(lab: RunningLab, images: Path, tmp: Path) -> Path:
    code, nodes = plan(lab, pinned(lab, tmp, "1"))
    assert code == 0 and all(not n["steps"] for n in nodes.values()), nodes
    assert booted(lab, "node-06") == ("minimal", "1")
    v2 = pinned(lab, tmp, "2")
    code, nodes = plan(lab, v2)
    assert code == 1, nodes
    steps = nodes["node-06"]["steps"]
    assert [s["action"] for s in steps] == ["reimage", "accept", "join"], steps
    assert steps[0]["implemented"] and "minimal:2" in steps[0]["detail"] and "re-test" in steps[0]["detail"], steps
    assert "last booted minimal 1" in steps[0]["reason"], steps

    res = lab.racklife("apply", str(v2), "--nodes", "node-06", "--images", str(images), "--boot-timeout", "60",
                       "--yes", "--json", timeout=900)
    assert "Traceback" not in res.stderr, res.stderr
    doc = json.loads(res.stdout)
    assert res.returncode == 0 and doc["converged"], res.stdout + res.stderr
    assert [(d["node"], d["action"], d["ok"]) for d in doc["done"]] == [("node-06", "reimage", True)], doc["done"]
    assert booted(lab, "node-06") == ("minimal", "2")
    assert sinfo(lab)["node-06"] == ("idle", "training")
    events = [h["event"] for h in json.loads(lab.racklife("node", "history", "node-06", "--json").stdout)]
    at = events.index("reprovision")
    assert events[at - 2:at + 6] == ["drain", "drain_done", "reprovision", "reprovision_done", "burn_in", "accept",
                                     "join", "join_done"], events
    code, nodes = plan(lab, v2, "--nodes", "node-06")
    assert code == 0 and not nodes["node-06"]["steps"], nodes
    code, nodes = plan(lab, v2, "--nodes", "node-01")
    assert code == 1 and nodes["node-01"]["steps"][0]["action"] == "reimage"  # nothing done to the others
    return v2


def _role_swap_with_reimage(lab: RunningLab, images: Path) -> None:
    res = lab.racklife("role-swap", "node-05", "--to", "inference", "--reimage", "--image", "minimal:2", "--images",
                       str(images), "--boot-timeout", "60", "--json", timeout=900)
    assert "Traceback" not in res.stderr, res.stderr
    [o] = json.loads(res.stdout)
    assert res.returncode == 0 and o["ok"], o
    assert list(o["phases"])[:4] == ["drain_wait", "move", "reimage", "switch"], o["phases"]
    assert o["changes"]["reimage"]["detail"]["version"] == "2", o["changes"]
    assert o["pool"] == "inference" and node(lab, "node-05")["state"] == "in_service"
    assert booted(lab, "node-05") == ("minimal", "2")


def _rolling_upgrade(lab: RunningLab, images: Path, v2: Path, tmp: Path) -> None:
    res = lab.racklife("upgrade", "--pool", "training", "--image", "minimal:2", "--max-unavailable", "2",
                       "--dry-run", "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    dry = json.loads(res.stdout)
    assert dry["batches"] == [["node-01"], ["node-02", "node-03"], ["node-04"]], dry
    assert "already on minimal:2" in dry["skipped"]["node-06"], dry

    done_file = tmp / "job-done"
    job = subprocess.run(["sbatch", "--parsable", "--chdir=/tmp", "--output=/dev/null", "-p", "training", "-w",
                          "node-01", "--wrap", f"sleep 15; touch {done_file}"], env=lab.env, capture_output=True,
                         text=True, check=True, timeout=15).stdout.strip()
    wait_for(lambda: sinfo(lab)["node-01"][0] in ("allocated", "mixed"), 30, "the job to run")

    out_of_service: list[int] = []  # Slurm's count of the pool's nodes not serving, sampled while it runs
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            seen = sinfo(lab)
            out_of_service.append(sum(seen[n][0] not in SERVING for n in [*UPGRADED, "node-06"]))
            time.sleep(0.3)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    proc = subprocess.Popen([EXE, "upgrade", "--pool", "training", "--image", "minimal:2", "--max-unavailable", "2",
                             "--canary", "1", "--policy", "wait", "--images", str(images), "--boot-timeout", "60",
                             "--json"], env=lab.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        runs: list[str] = []

        def started() -> bool:
            listed = json.loads(lab.racklife("workflows", "list", "--json").stdout)
            runs[:] = [r["id"] for r in listed if r["name"].endswith("upgrade") and r["status"] == "PENDING"]
            return bool(runs)

        wait_for(started, 60, "the upgrade run to start")
        [run] = runs
        wait_for(lambda: (upgrade_status(lab, run)["report"] or {}).get("phase") == "held", 600, "the canary hold")
        held = upgrade_status(lab, run)["report"]
        assert held["batches"] == [["node-01"]] and [n["node"] for n in held["nodes"]] == ["node-01"], held
        assert held["nodes"][0]["ok"], held
        assert done_file.exists(), "the job finished before its node left (wait)"
        assert any(f"Slurm job {job}" in t for t in held["touched"]), held["touched"]
        time.sleep(3)  # held means held: nothing else starts
        assert upgrade_status(lab, run)["report"]["phase"] == "held"
        assert all(booted(lab, n) == ("minimal", "1") for n in UPGRADED[1:])
        assert booted(lab, "node-01") == ("minimal", "2")

        resumed = lab.racklife("upgrade", "resume", run)
        assert resumed.returncode == 0 and "sent" in resumed.stderr, resumed.stdout + resumed.stderr
        # The controller dies mid-batch: batch 2's nodes have left Slurm; the run and its children stay PENDING.
        wait_for(lambda: node(lab, "node-02")["state"] != "in_service", 300, "batch 2 to take node-02 out")
        proc.kill()
        proc.communicate(timeout=30)  # reaps it and closes its pipes
        adopted = lab.racklife("upgrade", "resume", run, "--images", str(images), "--boot-timeout", "60", "--json",
                               timeout=900)
        out, err = adopted.stdout, adopted.stderr
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=30)
        stop.set()
        watcher.join(timeout=5)
    assert "Traceback" not in err and "its process is gone: running it here" in err, err
    report = json.loads(out)
    assert adopted.returncode == 0 and report["phase"] == "done", out + err
    assert report["upgraded"] == UPGRADED and report["failed"] == [], report
    assert report["batches"] == [["node-01"], ["node-02", "node-03"], ["node-04"]], report
    assert report["peak_out_of_service"]["training"] <= 2, report
    assert out_of_service, "the watcher never read sinfo"
    peak = max(out_of_service)
    assert peak >= 1, f"no node was ever seen out of service: {out_of_service}"
    assert peak <= 2, f"more nodes out than --max-unavailable 2: {out_of_service}"
    for n in UPGRADED:
        assert booted(lab, n) == ("minimal", "2"), n
        assert sinfo(lab)[n] == ("idle", "training"), n
    for n in ("node-02", "node-03"):  # the batch the crash cut: finished once, not started again
        events = [h["event"] for h in json.loads(lab.racklife("node", "history", n, "--json").stdout)]
        assert events.count("reprovision") == 1 and events.count("drain") == 1, (n, events)
    code, nodes = plan(lab, v2, "--nodes", ",".join([*UPGRADED, "node-06"]))
    assert code == 0 and all(not p["steps"] for p in nodes.values()), nodes
    assert upgrade_status(lab, run)["status"] == "SUCCESS"


def test_image_changes_by_apply_role_swap_and_rolling_upgrade(lab: RunningLab, minimal_image: Path,
                                                              tmp_path: Path) -> None:
    images = publish_version(minimal_image, tmp_path / "images", "2")
    v2 = _reimage_through_apply(lab, images, tmp_path)
    _role_swap_with_reimage(lab, images)
    _rolling_upgrade(lab, images, v2, tmp_path)


ABORTED = ["node-01", "node-02", "node-03", "node-04"]


def history(lab: RunningLab, name: str) -> list[dict[str, Any]]:
    res = lab.racklife("node", "history", name, "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    rows: list[dict[str, Any]] = json.loads(res.stdout)
    return rows


def accepted_since(lab: RunningLab, name: str, since: str) -> bool:
    """The node's latest acceptance passed and was recorded after ``since`` (ISO time)."""
    shown = json.loads(lab.racklife("node", "show", name, "--json").stdout)
    return bool(shown["acceptance"]) and shown["acceptance"][0]["passed"] and \
        shown["acceptance"][0]["created_at"] > since


def sacct_states(lab: RunningLab, job: str) -> list[str]:
    out = subprocess.run(["sacct", "-n", "-P", "-D", "-X", "-j", job, "-o", "State"], env=lab.env,
                         capture_output=True, text=True, timeout=30, check=True).stdout
    return [s.strip() for s in out.splitlines() if s.strip()]


def test_canary_holds_then_abort_mid_batch_leaves_every_node_old_or_new(lab: RunningLab, minimal_image: Path,
                                                                         tmp_path: Path) -> None:
    """Issue 19: the canary holds for a verdict; `abort` mid-rollout leaves every node fully old or fully new
    (or quarantined with a reason), read from the boot server's record and Slurm as well as the store; no
    job lost. Independent of the test above (it may run alone): whatever each node booted before is "old",
    minimal 3 is "new"; the nodes are named, so node-05's pool does not matter."""
    images = publish_version(minimal_image, tmp_path / "images", "3")
    old = {n: booted(lab, n) for n in ABORTED}
    assert all(v != ("minimal", "3") for v in old.values()), old
    assert all(node(lab, n)["state"] == "in_service" for n in ABORTED), [node(lab, n) for n in ABORTED]
    since = subprocess.run(["date", "-u", "+%Y-%m-%dT%H:%M:%S"], capture_output=True, text=True,
                           check=True).stdout.strip()
    seen_before = {n: len(history(lab, n)) for n in ABORTED}
    proc = subprocess.Popen([EXE, "upgrade", "--nodes", ",".join(ABORTED), "--image", "minimal:3",
                             "--max-unavailable", "2", "--canary", "1", "--policy", "wait", "--images", str(images),
                             "--boot-timeout", "60", "--json"], env=lab.env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        runs: list[str] = []

        def started() -> bool:
            listed = json.loads(lab.racklife("workflows", "list", "--json").stdout)
            runs[:] = [r["id"] for r in listed if r["name"].endswith("upgrade") and r["status"] == "PENDING"]
            return bool(runs) or proc.poll() is not None

        wait_for(started, 60, "the upgrade run to start")
        assert proc.poll() is None, proc.communicate()
        [run] = runs
        wait_for(lambda: (upgrade_status(lab, run)["report"] or {}).get("phase") == "held", 600, "the canary hold")
        time.sleep(3)  # held means held: nothing else starts
        held = upgrade_status(lab, run)
        assert held["status"] == "PENDING" and held["report"]["phase"] == "held", held
        assert held["report"]["batches"] == [["node-01"]], held
        assert [(n["node"], n["ok"]) for n in held["report"]["nodes"]] == [("node-01", True)], held
        assert held["report"]["pending"] == ABORTED[1:], held
        assert booted(lab, "node-01") == ("minimal", "3")
        assert node(lab, "node-01")["state"] == "in_service" and accepted_since(lab, "node-01", since)
        assert sinfo(lab)["node-01"] == ("idle", "training")
        for n in ABORTED[1:]:  # untouched: same image, never left, still serving
            assert booted(lab, n) == old[n] and len(history(lab, n)) == seen_before[n], n
        # A long job on node-02 (batch 2), started while the run holds: batch 2 must wait for it (policy wait).
        done_file = tmp_path / "long-job-done"
        job = subprocess.run(["sbatch", "--parsable", "--chdir=/tmp", "--output=/dev/null", "-p", "training", "-w",
                              "node-02", "--wrap", f"sleep 30; touch {done_file}"], env=lab.env,
                             capture_output=True, text=True, check=True, timeout=15).stdout.strip()
        wait_for(lambda: sinfo(lab)["node-02"][0] in ("allocated", "mixed"), 30, "the long job to run")
        assert upgrade_status(lab, run)["report"]["phase"] == "held"

        resumed = lab.racklife("upgrade", "resume", run)
        assert resumed.returncode == 0 and "sent" in resumed.stderr, resumed.stdout + resumed.stderr
        # Batch 2 (node-02, node-03) is under way: node-02 waits for the long job (policy wait). Abort now.
        wait_for(lambda: node(lab, "node-02")["state"] != "in_service", 120, "batch 2 to take node-02 out")
        assert not done_file.exists(), "the job ended before the abort: the abort was not mid-batch"
        aborted = lab.racklife("upgrade", "abort", run)
        assert aborted.returncode == 0 and "sent" in aborted.stderr, aborted.stdout + aborted.stderr
        out, err = proc.communicate(timeout=900)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=30)
    assert "Traceback" not in err, err
    report = json.loads(out)
    assert proc.returncode == 1 and report["phase"] == "aborted", out + err
    assert report["batches"] == [["node-01"], ["node-02", "node-03"]] and report["pending"] == ["node-04"], report
    assert upgrade_status(lab, run)["status"] == "SUCCESS"

    # The truth, from the world and the store: every node fully old, fully new, or quarantined with a reason.
    slurm = sinfo(lab)
    verdicts: dict[str, str] = {}
    for n in ABORTED:
        rec = node(lab, n)
        if rec["state"] == "quarantined":
            why = json.loads(lab.racklife("node", "show", n, "--json").stdout)["why"]["reason"]
            assert why, (n, rec)
            verdicts[n] = "quarantined"
        elif booted(lab, n) == ("minimal", "3"):
            assert rec["state"] == "in_service" and accepted_since(lab, n, since), (n, rec)
            assert slurm[n][0] in SERVING and slurm[n][1] == "training", (n, slurm[n])
            verdicts[n] = "new"
        else:
            assert booted(lab, n) == old[n] and rec["state"] == "in_service", (n, rec)
            assert len(history(lab, n)) == seen_before[n], (n, history(lab, n)[seen_before[n]:])
            assert slurm[n][0] in SERVING and slurm[n][1] == "training", (n, slurm[n])
            verdicts[n] = "old"
    # The batch in flight finished its cycle; the node not started stayed as it was.
    assert verdicts == {"node-01": "new", "node-02": "new", "node-03": "new", "node-04": "old"}, verdicts
    # No job lost: it ran to its end before node-02 left (wait), and slurmdbd says so.
    assert done_file.exists(), "the long job did not finish"
    assert any(f"Slurm job {job}" in t for t in report["touched"]), report["touched"]
    assert sacct_states(lab, job) == ["COMPLETED"], sacct_states(lab, job)
    assert not subprocess.run(["squeue", "-h", "-j", job], env=lab.env, capture_output=True, text=True,
                              timeout=15).stdout.strip()

"""`racklife accept` on an 8-node lab rack with two faulty nodes, from provisioning to the join gate.

node-03 has slow NVLink (low single-node all_reduce busbw), node-06 a lossy
InfiniBand link that trains at full rate: ibstat and every single-node check
pass, and only all_reduce across nodes shows it. Acceptance runs the
multi-node rounds through the lab's real Slurm (srun jobs), leaves node-03 out
of them (it failed burn-in) and isolates node-06; it passes six, quarantines
two with the right reasons (and drains them in Slurm, owned by the run),
writes the JSON, JUnit and HTML reports; the JUnit validates; the HTML renders
in headless Chromium with the right counts; the evidence bundle verifies and
fails once tampered with; and only accepted nodes may join Slurm.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import xmlschema

from acceptance.evidence import seal
from lifecycle.drivers.slurm.driver import SlurmDriver
from lifecycle.drivers.slurm.runner import CommandRunner
from tests.acceptance.test_reports import CHROMIUM_FLAGS, _Page
from tests.e2e.conftest import RunningLab

pytestmark = [pytest.mark.xdist_group("lab"), pytest.mark.slow]
FAULTY = {"node-03": "slow-nvlink", "node-06": "ib-slow"}


@pytest.fixture(scope="module")
def lab() -> Iterator[RunningLab]:
    lab = RunningLab(8, FAULTY)
    try:
        yield lab
    finally:
        lab.down()


@pytest.fixture(scope="module")
def accepted(lab: RunningLab, minimal_image: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    assert lab.racklife("inventory", "import", str(lab.inventory)).returncode == 0
    prov = lab.racklife("provision", "--all", "--boot-timeout", "60", "--images", str(minimal_image))
    assert prov.returncode == 0, prov.stdout + prov.stderr
    reports = tmp_path_factory.mktemp("reports")
    res = lab.racklife("accept", "rack-1", "--level", "quick", "--report-dir", str(reports), "--json",
                       "--operator", "ops@example", timeout=900)
    assert res.returncode == 1, res.stdout + res.stderr  # two nodes failed
    doc: dict[str, object] = json.loads(res.stdout)
    return doc | {"reports": reports}


def test_six_pass_two_quarantined_with_reasons(lab: RunningLab, accepted: dict[str, object]) -> None:
    verdicts = {v["node"]: v for v in accepted["nodes"]}  # type: ignore[attr-defined]
    assert sorted(n for n, v in verdicts.items() if v["passed"]) == sorted(set(verdicts) - set(FAULTY))
    assert all(v["state"] == "accepted" for n, v in verdicts.items() if n not in FAULTY)
    for node in FAULTY:
        assert verdicts[node]["state"] == "quarantined"
    assert any("busbw" in r or "all_reduce" in r for r in verdicts["node-03"]["reasons"]), verdicts["node-03"]
    assert any(r.startswith("multi_node.isolation: isolation: slow with proven-good node")
               for r in verdicts["node-06"]["reasons"]), verdicts["node-06"]
    assert not any(r.startswith(("ib", "nccl")) for r in verdicts["node-06"]["reasons"]), verdicts["node-06"]
    listed = {n["name"]: n["state"] for n in json.loads(lab.racklife("nodes", "list", "--json").stdout)}
    assert listed == {n: v["state"] for n, v in verdicts.items()}
    shown = json.loads(lab.racklife("node", "show", "node-01", "--json").stdout)
    assert shown["acceptance"][0]["passed"] is True and shown["acceptance"][0]["accepted_by"] == "ops@example"


def test_multi_node_rounds_ran_through_slurm_and_isolated_the_lossy_link(
        lab: RunningLab, accepted: dict[str, object]) -> None:
    report = json.loads(next(Path(str(accepted["reports"])).glob("*.json")).read_text())
    runs = [r for r in report["multi_node"] if r["launcher"] == "srun"]
    kinds = [r["kind"] for r in runs]
    assert kinds[:3] == ["same_leaf_pairs", "same_leaf_pairs", "ring"], kinds
    assert all(k.startswith("isolation-r") for k in kinds[3:]) and len(kinds) > 3
    paired = {n for r in runs for n in r["nodes"]}
    assert paired == {"node-01", "node-02", "node-04", "node-05", "node-06"}  # node-03 failed burn-in; 07/08 are k8s
    ring = runs[2]
    assert ring["verdict"] == "fail" and ring["finding"]["threshold"] == 368.0  # 46 GB/s x 8 NICs, from the profile
    for r in runs[:2]:
        assert r["verdict"] == "pass" and r["finding"]["measured"] >= 368.0
    iso = report["isolation"]
    assert iso["bad_nodes"] == ["node-06"] and iso["bad_links"] == [] and iso["unresolved"] == []
    assert iso["rounds"] == 1 and all("node-06" in g for h in iso["history"] for g in h["groups"])
    # every run was a Slurm job; the controller still knows them (MinJobAge), with the run's job name
    jobs = [r["job_id"] for r in runs]
    assert all(j and j.isdigit() for j in jobs) and len(set(jobs)) == len(jobs)
    for r in runs:
        shown = subprocess.run(["scontrol", "show", "job", "-o", r["job_id"]], env=lab.env, capture_output=True,
                               text=True, check=True).stdout
        assert f"JobName=racklife-{accepted['run_id']}" in shown and "JobState=COMPLETED" in shown, shown
        assert "NumNodes=" + str(len(r["nodes"])) in shown
    evidence = Path(lab.env["RACKLIFE_HOME"]) / "acceptance" / str(accepted["run_id"]) / "evidence"
    rack = json.loads((evidence / "rack.json").read_text())
    stage, k8s = rack["multi_node_stage"]["stages"]
    assert stage["rounds"] == 3 and stage["isolation_rounds"] == 1 and stage["slurm_jobs"] == jobs
    assert (stage["launcher"], k8s["launcher"], k8s["pool"]) == ("srun", "mpirun", "inference")
    assert rack["multi_node_stage"]["left_out"]["node-03"].startswith("failed single-node burn-in")
    raw = sorted((evidence / "multi_node").glob("*-ring.txt"))
    assert raw and "srun" in raw[0].read_text() and "0: # Avg bus bandwidth" in raw[0].read_text()


def test_every_result_is_bound_to_the_inventory_serial(lab: RunningLab, accepted: dict[str, object]) -> None:
    """Each lab node reads its serial through the fake dmidecode (its DMI data): a result without
    one would be an error now that the inventory has a serial for every node."""
    report = json.loads(next(Path(str(accepted["reports"])).glob("*.json")).read_text())
    assert len(report["nodes"]) == 8
    seen = []
    for n in report["nodes"]:
        serial = next(f for f in n["findings"] if f["check"] == "result.serial")
        assert serial["verdict"] == "pass" and "is the inventory's" in serial["reason"], serial
        assert serial["measured"] == serial["threshold"] and str(serial["measured"]).startswith("LAB"), serial
        seen.append(serial["measured"])
    assert len(set(seen)) == 8  # lifecycle/lab/layout.py gives each node its own serial


def test_kubernetes_pool_nodes_are_paired_over_ssh(lab: RunningLab, accepted: dict[str, object]) -> None:
    """node-07 and node-08 are in the inference pool (no Slurm): all_reduce across them ran as mpirun
    started over SSH on node-07, the lab's mpirun starting its all_reduce_perf on both, and each of
    them carries that run's verdict."""
    report = json.loads(next(Path(str(accepted["reports"])).glob("*.json")).read_text())
    ssh_runs = [r for r in report["multi_node"] if r["launcher"] == "mpirun"]
    assert ssh_runs and all(sorted(r["nodes"]) == ["node-07", "node-08"] for r in ssh_runs)
    assert all(r["verdict"] == "pass" and r["job_id"] is None and r["finding"]["measured"] >= 368.0
               for r in ssh_runs)
    for node in ("node-07", "node-08"):
        n = next(x for x in report["nodes"] if x["node"] == node)
        runs = next(f for f in n["findings"] if f["check"] == "multi_node.runs")
        assert n["verdict"] == "pass" and runs["verdict"] == "pass" and "node-07+node-08" in runs["reason"]
    evidence = Path(lab.env["RACKLIFE_HOME"]) / "acceptance" / str(accepted["run_id"]) / "evidence"
    raw = sorted((evidence / "multi_node").glob("*.txt"))
    mpi = [p.read_text() for p in raw if p.read_text().startswith("$ mpirun")]
    assert mpi and "--host node-07,node-08" in mpi[0] and "# Avg bus bandwidth" in mpi[0]


def test_quarantined_training_nodes_are_drained_by_racklife(lab: RunningLab, accepted: dict[str, object]) -> None:
    slurm = SlurmDriver(CommandRunner(env=lab.env))
    for node in FAULTY:
        n = slurm.node(node)
        assert n.state.drain and n.owner.kind == "racklife" and n.owner.run_id == accepted["run_id"]
    assert not slurm.node("node-01").state.drain


def test_reports_junit_and_html(accepted: dict[str, object], repo_dir: Path, tmp_path: Path) -> None:
    reports = Path(str(accepted["reports"]))
    names = sorted(p.name for p in reports.iterdir())
    assert any(n.endswith(".json") for n in names) and any(n.endswith(".xml") for n in names)
    junit = next(reports.glob("*.xml"))
    xmlschema.XMLSchema(repo_dir / "tests" / "acceptance" / "data" / "JUnit.xsd").validate(str(junit))
    html = next(reports.glob("*.html"))
    chromium = shutil.which("chromium")
    assert chromium, "Debian package 'chromium' is required"
    base = [chromium, *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}"]
    shot = tmp_path / "accept.png"
    subprocess.run([*base, "--window-size=1200,2400", f"--screenshot={shot}", html.as_uri()],
                   check=True, capture_output=True, timeout=120)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    dom = subprocess.run([*base, "--dump-dom", html.as_uri()], check=True, capture_output=True, timeout=120,
                         text=True).stdout
    page = _Page()
    page.feed(dom)
    assert page.ids == {"count-total": "8", "count-pass": "6", "count-fail": "2"}


def test_evidence_verifies_then_detects_tampering(lab: RunningLab, accepted: dict[str, object]) -> None:
    shown = json.loads(lab.racklife("node", "show", "node-02", "--json").stdout)
    record_id = shown["acceptance"][0]["id"]
    run_dir = Path(lab.env["RACKLIFE_HOME"]) / "acceptance" / str(accepted["run_id"]) / "evidence"
    assert record_id.startswith(str(accepted["run_id"]))
    ok = lab.racklife("evidence", "verify", str(run_dir))
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "anchor store: ok" in ok.stdout and "anchor signature: ok" in ok.stdout, ok.stdout
    assert shown["acceptance"][0]["evidence_sha256"] in ok.stdout
    victim = next(p for p in sorted(run_dir.rglob("result.json")))
    victim.write_text(victim.read_text().replace('"fail"', '"pass"').replace('"error"', '"pass"') + " ")
    bad = lab.racklife("evidence", "verify", str(run_dir))
    assert bad.returncode == 1 and victim.name in bad.stdout + bad.stderr
    # the forger re-hashes the manifest: the bundle agrees with itself, but not with the store or the signature
    manifest = json.loads((run_dir / "manifest.json").read_text())
    seal(run_dir, created_at=manifest["created_at"], operator=manifest["operator"])
    resealed = lab.racklife("evidence", "verify", str(run_dir), "--json")
    assert resealed.returncode == 1, resealed.stdout
    doc = json.loads(resealed.stdout)
    assert doc["consistent"] is True and doc["ok"] is False
    assert {a["kind"]: a["ok"] for a in doc["anchors"]} == {"store": False, "signature": False}
    key = lab.racklife("evidence", "key")
    assert key.returncode == 0 and key.stdout.startswith("-----BEGIN PUBLIC KEY-----")


def test_join_gate_follows_acceptance(lab: RunningLab, accepted: dict[str, object]) -> None:
    ok = lab.racklife("slurm", "join", "node-01", "--json")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert json.loads(ok.stdout)[0]["state"] == "in_service"
    refused = lab.racklife("slurm", "join", "node-03", "--json")
    assert refused.returncode == 5
    assert "acceptance" in json.loads(refused.stdout)[0]["reason"]


def test_required_multi_node_not_done_is_not_accepted_unless_waived(lab: RunningLab, accepted: dict[str, object],
                                                                    tmp_path: Path) -> None:
    """At standard the profile requires multi-node testing. node-08 alone has no peer in its pool:
    not accepted. Waived by name with a reason, it is accepted, and the waiver, who gave it and
    why are in its acceptance record and in the JSON, JUnit and HTML reports."""
    alone = lab.racklife("accept", "--nodes", "node-08", "--level", "standard", "--json",
                         "--report-dir", str(tmp_path / "r1"), "--operator", "ops@example", timeout=600)
    assert alone.returncode == 1, alone.stdout + alone.stderr
    [v] = json.loads(alone.stdout)["nodes"]
    assert v["state"] == "quarantined"
    assert any(r.startswith("multi_node.required: multi-node testing is required at level standard")
               and "no second node" in r for r in v["reasons"]), v["reasons"]
    no_reason = lab.racklife("accept", "--nodes", "node-08", "--level", "standard", "--waive", "multi-node")
    assert no_reason.returncode == 2 and "--reason" in no_reason.stderr
    waived = lab.racklife("accept", "--nodes", "node-08", "--level", "standard", "--json",
                          "--report-dir", str(tmp_path / "r2"), "--waive", "multi-node",
                          "--reason", "peer node-07 out for RMA", timeout=600, env_extra={"USER": "carol", "LOGNAME": "carol"})
    assert waived.returncode == 0, waived.stdout + waived.stderr
    [v] = json.loads(waived.stdout)["nodes"]
    assert v["state"] == "accepted"
    shown = json.loads(lab.racklife("node", "show", "node-08", "--json").stdout)["acceptance"][0]
    assert shown["passed"] and shown["level"] == "standard"
    assert shown["waivers"] == [{"check": "multi-node", "by": "carol", "reason": "peer node-07 out for RMA",
                                 "at": shown["waivers"][0]["at"]}]
    report = json.loads((tmp_path / "r2" / "report.json").read_text())
    assert report["waivers"][0]["by"] == "carol" and report["waivers"][0]["nodes"] == ["node-08"]
    assert 'name="waiver.multi-node"' in (tmp_path / "r2" / "junit.xml").read_text()
    assert "waived by carol" in (tmp_path / "r2" / "report.html").read_text()

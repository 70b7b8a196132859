"""`racklife decommission` on a built 5-node lab: real Slurm, the Redfish emulator, the Kubernetes stand-in.

node-01..04 serve the training pool (Slurm), node-05 the inference pool
(Kubernetes, an IPMI BMC). node-04 stays in Slurm throughout: slurmctld does
not start on a slurm.conf that defines no node, so the lab's hook never takes
out the last one. In order, on one lab:

- a job runs on node-03: the decommission is refused (exit 5), nothing
  changes, the job keeps running; with ``--force --erase --reset-bmc`` the job
  is requeued (and named), the node is network-booted into the minimal image
  (the boot server, a phone-home) and 64 sampled blocks of each drive are
  read with ``dd`` over SSH, both drives are erased through the BMC's Tasks,
  the node is booted again and each drive's NVMe Sanitize Status log is read
  (the lab's ``nvme``, whose log the emulator's erase changed) with the same
  blocks (the drive files the erase zeroed): the certificate names both
  read-backs and keeps every block's hashes, passes ``racklife evidence verify``, Slurm no longer knows
  the node (the lab's slurm.conf hook), the BMC powered it off, and the node
  is ``decommissioned`` with its history;
- node-02 drained by an admin is refused even with ``--force``; then its
  emulated BMC lies (``erase-not-done``: Tasks Completed, drives healthy,
  nothing sent to the drives): the read-back finds them never sanitized and
  every sampled block unchanged, so ``--erase`` ends exit 1, not erased, not decommissioned; then its
  emulated BMC fails its tasks: ``--erase`` ends exit 1, the node is
  ``decommission_failed`` (not decommissioned), its certificate says
  ``not-erased``; healthy again, with drives that keep no sanitize log
  (``no-sanitize-log``), the same command finishes it on the samples alone
  (method ``sampled-read``);
- node-05's IPMI BMC cannot erase: refused by name; a pod on it refuses the
  decommission until ``--force`` evicts it (named in the report); it leaves
  Kubernetes and its Node object is deleted.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from lifecycle.drivers.kube.api import KubeApiDriver
from lifecycle.lab.kube.run import KubeAdmin
from tests.e2e.conftest import RunningLab, built_lab
from tests.e2e.test_roleswap_lab import history, job_state, node, sbatch, wait_for

pytestmark = [pytest.mark.xdist_group("lab-b"), pytest.mark.slow]


@pytest.fixture(scope="module")
def lab(minimal_image: Path) -> Iterator[RunningLab]:
    with built_lab(5, minimal_image, extra=("--ipmi-every", "5")) as running:
        yield running


def decommission(lab: RunningLab, *args: str) -> tuple[int, Any]:
    res = lab.racklife("decommission", *args, "--json", timeout=900)
    assert "Traceback" not in res.stderr, res.stderr
    return res.returncode, json.loads(res.stdout)


def slurm_knows(lab: RunningLab, name: str) -> bool:
    done = subprocess.run(["scontrol", "show", "node", name], env=lab.env, capture_output=True, text=True,
                          timeout=30, check=False)
    return done.returncode == 0 and f"NodeName={name}" in done.stdout


def verify(lab: RunningLab, bundle: str) -> subprocess.CompletedProcess[str]:
    return lab.racklife("evidence", "verify", bundle, "--json")


def power(lab: RunningLab, name: str) -> str:
    return str(next(n for n in lab.status()["nodes"] if n["name"] == name)["power"])


def test_decommission_in_the_lab(lab: RunningLab, tmp_path: Path, minimal_image: Path) -> None:
    images = ("--images", str(minimal_image))
    _refused_while_a_job_runs_then_forced_with_a_verified_erase(lab, tmp_path, images)
    _an_erase_the_bmc_fails_is_not_a_decommission(lab, images)
    _ipmi_cannot_erase_and_a_kubernetes_node_leaves_the_node_list(lab)
    _apply_decommissions_a_node_removed_from_the_inventory_and_its_name_is_reused(lab, tmp_path)


def _refused_while_a_job_runs_then_forced_with_a_verified_erase(lab: RunningLab, tmp_path: Path,
                                                                images: tuple[str, ...]) -> None:
    # Kept off the others (not pinned to node-03: a job naming a node Slurm no longer has is dropped).
    job = sbatch(lab, "-x", "node-01,node-02,node-04", "--wrap", "sleep 300")
    wait_for(lambda: job_state(lab, job)[0] == "RUNNING", 30, "the job to run")
    before = len(history(lab, "node-03"))
    code, out = decommission(lab, "node-03", "--erase", *images)
    assert code == 5, out
    assert out[0]["refused"] and job in out[0]["reason"], out
    assert node(lab, "node-03")["state"] == "in_service" and len(history(lab, "node-03")) == before
    assert job_state(lab, job) == ("RUNNING", "node-03")

    boots = next(n for n in lab.status()["nodes"] if n["name"] == "node-03")["boots"]
    code, out = decommission(lab, "node-03", "--erase", "--force", "--reset-bmc", *images)
    assert code == 0, out
    [o] = out
    assert o["ok"] and o["state"] == "decommissioned", o
    assert [(j["job_id"], j["action"]) for j in o["leave"]["report"]["jobs"]] == [(job, "requeued")], o["leave"]
    wait_for(lambda: job_state(lab, job)[0] == "PENDING", 60, "the requeued job to be pending")  # not lost
    subprocess.run(["scancel", job], env=lab.env, check=True, timeout=15)
    assert o["scheduler"]["config"] == "removed" and "training" in o["scheduler"]["partitions_left"], o["scheduler"]
    assert not slurm_knows(lab, "node-03")
    assert o["bmc"]["power"] == "off" and "ResetToDefaults ResetAll" in o["bmc"]["reset"], o["bmc"]
    wait_for(lambda: power(lab, "node-03") == "Off", 30, "node-03 to power off")
    assert len(o["erase"]["drives"]) == 2 and all(d["verified"] for d in o["erase"]["drives"]), o["erase"]
    cert_dir = Path(o["erase"]["certificate"])
    cert = json.loads((cert_dir / "certificate.json").read_text())
    assert cert["result"] == "erased" and cert["serial"] and cert["method"] == "Drive.SecureErase"
    assert {d["result"] for d in cert["drives"]} == {"erased"} and all(d["task"]["state"] == "Completed"
                                                                      for d in cert["drives"])
    # Read back from the node itself: a maintenance boot of the minimal image, then nvme sanitize-log over SSH.
    assert cert["schema_version"] == 3 and "sanitize-log" in cert["verifier"], cert["verifier"]
    assert "sampled reads" in cert["verifier"] and cert["sampled"]["before"]["ok"], cert["sampled"]
    assert cert["sampled"]["samples"] == 64 and len(cert["sampled"]["seed"]) == 32, cert["sampled"]
    assert cert["readback"]["ok"] and cert["readback"]["image"] == "minimal", cert["readback"]
    # Two boots of one run: the one after the erase numbers its attempts after the first's (a reused attempt 1
    # would cycle nothing and take the first boot's phone-home).
    assert cert["sampled"]["before"]["boot"] == ["boot attempt 1"], cert["sampled"]
    assert cert["readback"]["boot"] == ["boot attempt 3"], cert["readback"]
    assert sorted(d["readback"]["device"] for d in cert["drives"]) == ["/dev/nvme0", "/dev/nvme1"]
    for d in cert["drives"]:
        back = d["readback"]
        assert back["verified"] and back["method"] == "block-erase", back
        assert "(SSTAT) :  0x101" in back["sanitize_log"], back["sanitize_log"]
        # The same 64 blocks before the erase (random, as a used drive) and after it (zeros: a block erase).
        sampled = back["sampled"]
        assert sampled["verified"] and sampled["seed"] == cert["sampled"]["seed"], sampled
        assert sampled["before"]["device"] == sampled["after"]["device"], sampled
        assert sampled["after"]["device"].endswith(f"{back['device']}n1"), sampled  # the lab's drive files
        blocks = sampled["blocks"]
        assert len(blocks) == 64 and {b["result"] for b in blocks} == {"pattern"}, blocks[:3]
        assert len({b["before"] for b in blocks}) == 64 and len({b["after"] for b in blocks}) == 1
    # The lab counts power-ons: the two maintenance boots (the power off after them is not).
    assert next(n for n in lab.status()["nodes"] if n["name"] == "node-03")["boots"] == boots + 2
    checked = verify(lab, str(cert_dir))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert {a["kind"]: a["ok"] for a in json.loads(checked.stdout)["anchors"]}.get("signature") is True
    forged = tmp_path / "forged"
    shutil.copytree(cert_dir, forged)
    text = (forged / "certificate.json").read_text()
    (forged / "certificate.json").write_text(text.replace('"verified": true', '"verified": false', 1))
    tampered = verify(lab, str(forged))
    assert tampered.returncode == 1 and "certificate.json" in json.loads(tampered.stdout)["tampered"], tampered.stdout
    events = [h["event"] for h in history(lab, "node-03")]
    assert events[-4:] == ["drain", "drain_done", "decommission", "decommission_done"], events
    # Done is done: again, nothing happens and it is success.
    code, out = decommission(lab, "node-03")
    assert code == 0 and out[0]["reason"] == "decommissioned already"


def _an_erase_the_bmc_fails_is_not_a_decommission(lab: RunningLab, images: tuple[str, ...]) -> None:
    # Someone else's drain first: never acted through, not even with --force.
    scontrol = ["scontrol", "update", "nodename=node-02"]
    subprocess.run([*scontrol, "state=drain", "reason=admin: bad DIMM"], env=lab.env, check=True, timeout=15)
    code, out = decommission(lab, "node-02", "--force")
    assert code == 5 and "bad DIMM" in out[0]["reason"], out
    assert node(lab, "node-02")["state"] == "in_service"
    subprocess.run([*scontrol, "state=resume"], env=lab.env, check=True, timeout=15)
    # A BMC that lies: its Tasks end Completed, its drives read back healthy, and nothing reached them.
    lied = lab.racklife("lab", "fault", "node-02", "erase-not-done", "--dir", str(lab.dir))
    assert lied.returncode == 0, lied.stdout + lied.stderr
    code, out = decommission(lab, "node-02", "--erase", *images)
    assert code == 1, out
    [o] = out
    assert not o["ok"] and o["state"] == "decommission_failed", o
    assert "not erased" in o["reason"] and "never been sanitized" in o["reason"], o["reason"]
    assert all(d["task"] == "Completed" and not d["verified"] for d in o["erase"]["drives"]), o["erase"]
    cert = json.loads((Path(o["erase"]["certificate"]) / "certificate.json").read_text())
    assert cert["result"] == "not-erased" and cert["readback"]["ok"], cert["readback"]
    assert all("never been sanitized" in d["readback"]["reason"] for d in cert["drives"]), cert["drives"]
    # The samples say the same of the data: every block read back as it was before the erase.
    assert all("64 of 64 sampled blocks unchanged" in d["readback"]["sampled"]["reason"]
               for d in cert["drives"]), [d["readback"]["sampled"]["reason"] for d in cert["drives"]]
    assert node(lab, "node-02")["state"] == "decommission_failed"
    checked = verify(lab, o["erase"]["certificate"])  # certified as not erased, and signed all the same
    assert checked.returncode == 0, checked.stdout + checked.stderr
    faulted = lab.racklife("lab", "fault", "node-02", "bmc-tasks-fail", "--dir", str(lab.dir))
    assert faulted.returncode == 0, faulted.stdout + faulted.stderr
    code, out = decommission(lab, "node-02", "--erase", *images)
    assert code == 1, out
    [o] = out
    assert not o["ok"] and not o["refused"] and o["state"] == "decommission_failed", o
    assert "not erased" in o["reason"] and "Exception" in o["reason"], o["reason"]
    assert node(lab, "node-02")["state"] == "decommission_failed"
    cert = json.loads((Path(o["erase"]["certificate"]) / "certificate.json").read_text())
    assert cert["result"] == "not-erased" and not any(d["verified"] for d in cert["drives"])
    assert not cert["readback"]["ok"] and "did not succeed" in cert["readback"]["reason"]  # no boot for it
    assert power(lab, "node-02") == "On"  # the run stopped before power off
    healed = lab.racklife("lab", "fault", "node-02", "bmc-healthy", "--dir", str(lab.dir))
    assert healed.returncode == 0, healed.stderr
    # Drives with no sanitize log (as SATA drives, or QEMU's NVMe): the samples alone verify the erase.
    no_log = lab.racklife("lab", "fault", "node-02", "no-sanitize-log", "--dir", str(lab.dir))
    assert no_log.returncode == 0, no_log.stdout + no_log.stderr
    code, out = decommission(lab, "node-02", "--erase", *images)
    assert code == 0 and out[0]["state"] == "decommissioned", out
    for d in out[0]["erase"]["drives"]:
        back = d["readback"]
        assert d["verified"] and back["method"] == "sampled-read", back
        assert "no sanitize log: nvme sanitize-log" in back["reason"] and back["sampled"]["verified"], back
    checked = verify(lab, out[0]["erase"]["certificate"])
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert out[0]["scheduler"]["config"] == "not known to Slurm"  # removed by the first attempt


def _ipmi_cannot_erase_and_a_kubernetes_node_leaves_the_node_list(lab: RunningLab) -> None:
    code, out = decommission(lab, "node-05", "--erase")
    assert code == 5 and "the ipmi driver offers" in out[0]["reason"], out
    assert node(lab, "node-05")["state"] == "in_service"
    kube = KubeApiDriver.from_kubeconfig(Path(lab.env["KUBECONFIG"]))
    assert "node-05" in {n.name for n in kube.nodes()}
    KubeAdmin.from_kubeconfig(Path(lab.env["KUBECONFIG"])).create_pod(
        "llm-0", "node-05", labels={"app": "llm"}, owner_kind="ReplicaSet")
    code, out = decommission(lab, "node-05")
    assert code == 5 and "pod default/llm-0" in out[0]["reason"], out
    assert node(lab, "node-05")["state"] == "in_service"
    code, out = decommission(lab, "node-05", "--force")
    assert code == 0, out
    assert out[0]["leave"]["report"]["evicted"] == ["default/llm-0"], out[0]["leave"]
    assert out[0]["scheduler"] == {"node_object": "deleted", "gone": True}, out[0]["scheduler"]
    assert "node-05" not in {n.name for n in kube.nodes()}
    kube.close()
    assert node(lab, "node-05")["state"] == "decommissioned"


def _apply_decommissions_a_node_removed_from_the_inventory_and_its_name_is_reused(lab: RunningLab,
                                                                                  tmp_path: Path) -> None:
    doc = yaml.safe_load(lab.inventory.read_text())
    old = next(n for n in doc["nodes"] if n["name"] == "node-01")
    without = tmp_path / "without-node-01.yaml"
    without.write_text(yaml.safe_dump({**doc, "nodes": [n for n in doc["nodes"] if n["name"] != "node-01"]}))
    planned = lab.racklife("plan", str(without), "--json")
    steps = {n["node"]: n["steps"] for n in json.loads(planned.stdout)["nodes"]}
    assert [(s["action"], s["implemented"]) for s in steps["node-01"]] == [("decommission", True)], planned.stdout
    applied = lab.racklife("apply", str(without), "--yes", "--json", timeout=900)
    assert "Traceback" not in applied.stderr, applied.stderr
    assert applied.returncode == 0, applied.stdout + applied.stderr
    done = [d for d in json.loads(applied.stdout)["done"] if d["node"] == "node-01"]
    assert [(d["action"], d["ok"]) for d in done] == [("decommission", True)], applied.stdout
    assert node(lab, "node-01")["state"] == "decommissioned" and not slurm_knows(lab, "node-01")
    again = json.loads(lab.racklife("plan", str(without), "--json").stdout)
    assert "node-01" not in {n["node"] for n in again["nodes"]}  # done: nothing more to plan
    # A new server may now take the name; the old one's record and history stay under NAME~SERIAL.
    reused = tmp_path / "node-01-replaced.yaml"
    reused.write_text(yaml.safe_dump({**doc, "nodes": [{**n, "serial": "LABNEW0001"} if n["name"] == "node-01" else n
                                                       for n in doc["nodes"]]}))
    imported = lab.racklife("inventory", "import", str(reused))
    assert imported.returncode == 0, imported.stdout + imported.stderr
    assert node(lab, "node-01")["state"] == "enrolled"
    kept = f"node-01~{old['serial']}"
    assert node(lab, kept)["state"] == "decommissioned"
    assert [h["event"] for h in history(lab, kept)][-3:] == ["decommission", "decommission_done", "rename"]

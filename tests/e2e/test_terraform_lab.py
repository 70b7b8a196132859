"""`terraform init/plan/apply/destroy` with racklife's provider on a 4-node lab: the real engine, the real lab.

The example module (stacks/terraform/examples/lab) builds the lab from
nothing: the first apply enrols, provisions, accepts and joins the four
nodes (Slurm for node-01..03, Kubernetes for node-04) and a second plan says
"no changes". Moving node-03 to the inference pool is an in-place update that
the apply carries out as a role swap. node-01 powered off by hand through its
BMC emulator shows in the next plan as an update whose `steps` hold the
power-on, which the apply performs. Raising the training pool's min_nodes
makes a move out of it a refused update. Pinning node-01 to version 2 of
its image (``image = "minimal:2"``, a second build published beside the
first) is an in-place update that the apply carries out as the planner's
reimage (racklife's drain, reprovisioned with version 2, re-tested, back in
its partition); the next plan says "no changes". A firmware baseline on
node-01 (``firmware``, ``firmware_files``) is an in-place update that the
apply carries out as the planner's update-firmware (the iDRAC tree pulls the
image, the version is read back, the node is in service again); then "no
changes". Destroying node-02 is
refused while a Slurm job runs on it (it stays in service and in the
Terraform state), and with it idle it is decommissioned and leaves the state.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lifecycle.drivers.bmc.base import PowerAction, PowerState
from lifecycle.drivers.bmc.factory import driver_for
from lifecycle.lab.redfish_emulator.update_service import make_image
from lifecycle.model.inventory import load_inventory
from lifecycle.planner.plan import NOT_YET, Action
from tests.e2e.conftest import RunningLab, firmware_version, publish_version, wait_for
from tests.terraform.tfhelp import Workdir, terraform_bin

pytestmark = [pytest.mark.xdist_group("lab-b"), pytest.mark.slow]
POOLS = {"node-01": "training", "node-02": "training", "node-03": "training", "node-04": "inference"}
NODE_02 = 'racklife_node.node["node-02"]'


@pytest.fixture(scope="module")
def lab() -> Iterator[RunningLab]:
    terraform_bin()  # no terraform, no lab: fail at once with the message
    running = RunningLab(4)
    try:
        yield running
    finally:
        running.down()


def nodes(lab: RunningLab) -> dict[str, dict[str, Any]]:
    return {n["name"]: n for n in json.loads(lab.racklife("nodes", "list", "--json").stdout)}


def ok(done: subprocess.CompletedProcess[str], code: int = 0) -> str:
    """The output with its runs of blanks made one (Terraform aligns attributes by the longest name)."""
    assert done.returncode == code, f"exit {done.returncode}, wanted {code}\n{done.stdout}\n{done.stderr}"
    return " ".join((done.stdout + done.stderr).split())


def set_vars(w: Workdir, images: Path, pools: dict[str, str], min_nodes: int = 1,
             node_images: dict[str, str] | None = None, firmware: dict[str, dict[str, str]] | None = None,
             files: dict[str, str] | None = None) -> None:
    w.write("terraform.tfvars.json", json.dumps({"images": str(images), "node_pools": pools,
                                                 "training_min_nodes": min_nodes, "node_images": node_images or {},
                                                 "node_firmware": firmware or {}, "firmware_files": files or {}}))


def sinfo(lab: RunningLab, name: str) -> str:
    return subprocess.run(["sinfo", "-h", "-N", "-n", name, "-o", "%T"], env=lab.env, capture_output=True,
                          text=True, timeout=15, check=True).stdout.strip()


def test_terraform_builds_changes_and_refuses_on_the_lab(lab: RunningLab, minimal_image: Path,
                                                        tmp_path: Path) -> None:
    w = Workdir(tmp_path, env=lab.env)
    w.copy_example()
    set_vars(w, minimal_image, POOLS)
    ok(w.tf("init", "-no-color"))
    assert "6 to add" in ok(w.tf("plan", "-detailed-exitcode", "-no-color"), 2)

    # The build: one apply takes the nodes from the inventory to in service in their pools.
    ok(w.tf("apply", "-auto-approve", "-no-color"))
    seen = nodes(lab)
    assert {n: (seen[n]["state"], seen[n]["pool"]) for n in POOLS} == {n: ("in_service", p) for n, p in POOLS.items()}
    out = json.loads(w.tf("output", "-json", "nodes").stdout)
    assert out["node-04"]["kube"] is True and out["node-01"]["slurm"] == "idle", out
    assert all(not o["steps"] and not o["drift"] for o in out.values()), out
    assert "No changes" in ok(w.tf("plan", "-detailed-exitcode", "-no-color"))

    # A pool change is an update, and the apply performs the role swap.
    moved = POOLS | {"node-03": "inference"}
    set_vars(w, minimal_image, moved)
    plan = ok(w.tf("plan", "-detailed-exitcode", "-no-color"), 2)
    assert 'pool = "training" -> "inference"' in plan and "1 to change" in plan, plan
    ok(w.tf("apply", "-auto-approve", "-no-color"))
    assert (nodes(lab)["node-03"]["state"], nodes(lab)["node-03"]["pool"]) == ("in_service", "inference")
    swaps = [h for h in json.loads(lab.racklife("node", "history", "node-03", "--json").stdout)
             if h["event"] == "role-swap"]
    assert swaps and swaps[-1]["from"] == "training" and swaps[-1]["to"] == "inference", swaps
    ok(w.tf("plan", "-detailed-exitcode", "-no-color"))

    # Drift: node-01 powered off behind racklife's back shows in the plan; the apply powers it on.
    bmc = driver_for(load_inventory(lab.inventory).node("node-01").bmc)
    try:
        bmc.power(PowerAction.OFF)
        wait_for(lambda: bmc.power_state() == PowerState.OFF, 60, "node-01 to power off")
        plan = ok(w.tf("plan", "-detailed-exitcode", "-no-color"), 2)
        assert 'racklife_node.node["node-01"] will be updated in-place' in plan, plan
        assert 'power = "off" -> (known after apply)' in plan and '- "power-on' in plan, plan
        ok(w.tf("apply", "-auto-approve", "-no-color"))
        assert bmc.power_state() == PowerState.ON
    finally:
        bmc.close()
    ok(w.tf("plan", "-detailed-exitcode", "-no-color"))

    # A pool's floor is an attribute of racklife_pool: at min_nodes 2, moving node-02 out of training (which
    # would leave node-01 alone) is refused, and node-02 keeps serving Slurm.
    set_vars(w, minimal_image, moved | {"node-02": "inference"}, min_nodes=2)
    plan = ok(w.tf("plan", "-detailed-exitcode", "-no-color"), 2)
    assert "min_nodes = 1 -> 2" in plan and 'pool = "training" -> "inference"' in plan, plan
    text = ok(w.tf("apply", "-auto-approve", "-no-color"), 1)
    assert "racklife could not update node-02" in text and "pool-floor" in text, text
    assert (nodes(lab)["node-02"]["state"], nodes(lab)["node-02"]["pool"]) == ("in_service", "training")
    assert sinfo(lab, "node-02") == "idle"  # not drained

    set_vars(w, minimal_image, moved)
    ok(w.tf("apply", "-auto-approve", "-no-color"))  # the floor back to 1; nothing else to do
    ok(w.tf("plan", "-detailed-exitcode", "-no-color"))

    # The image's version per node: node-01 pinned to minimal:2 is an in-place update; the apply reimages it.
    images = publish_version(minimal_image, tmp_path / "images", "2")
    pinned = {"node-01": "minimal:2"}
    set_vars(w, images, moved, node_images=pinned)
    plan = ok(w.tf("plan", "-detailed-exitcode", "-no-color"), 2)
    assert 'racklife_node.node["node-01"] will be updated in-place' in plan, plan
    assert 'image = "minimal" -> "minimal:2"' in plan and "0 to add, 1 to change, 0 to destroy" in plan, plan
    ok(w.tf("apply", "-auto-approve", "-no-color"))
    row = nodes(lab)["node-01"]
    assert (row["state"], row["pool"]) == ("in_service", "training"), row
    assert sinfo(lab, "node-01") == "idle"
    out = json.loads(w.tf("output", "-json", "nodes").stdout)
    assert (out["node-01"]["image"], out["node-01"]["version"]) == ("minimal", "2"), out["node-01"]
    assert out["node-02"]["version"] == "1", out["node-02"]  # the others keep theirs
    events = [h["event"] for h in json.loads(lab.racklife("node", "history", "node-01", "--json").stdout)]
    at = events.index("reprovision")  # the planner's reimage: one run that leaves, reprovisions, re-tests, rejoins
    assert events[at - 2:at + 6] == ["drain", "drain_done", "reprovision", "reprovision_done", "burn_in", "accept",
                                     "join", "join_done"], events
    assert "No changes" in ok(w.tf("plan", "-detailed-exitcode", "-no-color"))

    # A firmware baseline on node-01 (iDRAC tree): an in-place update; the apply is the planner's update-firmware.
    image = make_image(tmp_path / "fw-5.tar", "BMC", "5.0.0")
    assert firmware_version(lab, "node-01", "BMC") != "5.0.0"
    set_vars(w, images, moved, node_images=pinned, firmware={"node-01": {"BMC": "5.0.0"}}, files={"BMC": str(image)})
    plan = ok(w.tf("plan", "-detailed-exitcode", "-no-color"), 2)
    assert 'racklife_node.node["node-01"] will be updated in-place' in plan, plan
    assert '+ firmware = { + "BMC" = "5.0.0" }' in plan and "0 to add, 1 to change, 0 to destroy" in plan, plan
    ok(w.tf("apply", "-auto-approve", "-no-color"))
    assert firmware_version(lab, "node-01", "BMC") == "5.0.0"
    assert nodes(lab)["node-01"]["state"] == "in_service" and sinfo(lab, "node-01") == "idle"
    history = lab.racklife("node", "history", "node-01", "--json").stdout
    assert "firmware" in history and "5.0.0" in history, history
    assert "No changes" in ok(w.tf("plan", "-detailed-exitcode", "-no-color"))

    # Destroy: refused while a Slurm job runs on the node; nothing is done and the state keeps it.
    job = subprocess.run(["sbatch", "--parsable", "--chdir=/tmp", "--output=/dev/null", "-p", "training", "-w",
                          "node-02", "--wrap", "sleep 120"], env=lab.env, capture_output=True, text=True,
                         check=True, timeout=15).stdout.strip()
    squeue = ["squeue", "-h", "-j", job, "-o", "%T"]
    wait_for(lambda: subprocess.run(squeue, env=lab.env, capture_output=True, text=True, timeout=15
                                    ).stdout.strip() == "RUNNING", 30, "the job to run")
    refused = ok(w.tf("destroy", "-auto-approve", "-no-color", "-target", NODE_02), 1)
    assert f"Slurm job(s) {job} running on node-02" in refused, refused
    assert NODE_02 in w.tf("state", "list").stdout
    assert nodes(lab)["node-02"]["state"] == "in_service"
    subprocess.run(["scancel", job], env=lab.env, check=True, timeout=15)
    wait_for(lambda: not subprocess.run(squeue, env=lab.env, capture_output=True, text=True, timeout=15
                                        ).stdout.strip(), 60, "the job to end")

    # Idle: decommissioned, or refused with the reason while racklife has no decommission workflow.
    done = w.tf("destroy", "-auto-approve", "-no-color", "-target", NODE_02)
    if Action.DECOMMISSION in NOT_YET:
        text = ok(done, 1)
        assert "racklife cannot decommission node-02 yet, so nothing was done" in text, text
        assert NODE_02 in w.tf("state", "list").stdout
        assert nodes(lab)["node-02"]["state"] == "in_service"
    else:
        ok(done)
        assert NODE_02 not in w.tf("state", "list").stdout
        assert nodes(lab)["node-02"]["state"] == "decommissioned"

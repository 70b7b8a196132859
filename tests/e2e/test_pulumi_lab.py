"""The Pulumi providers against a 4-node lab: the real provider host over gRPC, then the whole stack program.

First the host (`python -m pulumi.dynamic`, the process Pulumi's engine
starts) is driven as the engine drives it, for each dynamic resource, on
node-03, with each side effect checked in the lab:

- ``BareMetalNode`` Check refuses a bad MAC on its property; Create enrols,
  provisions and accepts (and stops there: not in service); Read reports it;
  Diff says an image change is an update and a serial change a replacement;
  the image Update is refused (minimal2 is not built) and the node is left
  in service, not drained;
- ``PoolMembership`` Create joins Slurm's partition; Update to ``inference``
  is the role swap (in service in Kubernetes, labelled); Delete drains it out
  with racklife's cordon;
- ``SlurmNodeRegistration`` Create checks slurmctld lists it in the
  partition (a wrong partition is refused); Read follows Slurm;
- ``BareMetalNode`` Delete decommissions it (the planner's step for a node the
  inventory no longer lists); Read then says it is gone.

Then the stack program runs with Pulumi's mocks routing every dynamic
resource to its provider (unpickled from the resource's ``__provider`` input,
as the host does): every lab node ends in service in its pool. The tests run
in one function because each phase starts where the last left the nodes.
"""

from __future__ import annotations

import base64
import copy
import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import dill
import pytest
import yaml
from pulumi.dynamic import ConfigureRequest
from pulumi.dynamic.config import Config
from pulumi.runtime import MockResourceArgs

from lifecycle.model.inventory import load_inventory
from stacks.racklife_pulumi.components import node_props
from stacks.racklife_pulumi.program import StackConfig
from stacks.racklife_pulumi.providers import (
    BareMetalNodeProvider,
    PoolMembershipProvider,
    SlurmNodeRegistrationProvider,
)
from tests.e2e.conftest import RunningLab
from tests.e2e.host import HostError, ProviderHost, host_env
from tests.stacks.mocks import Recorder, Seen, kind, run_program

pytestmark = [pytest.mark.xdist_group("lab"), pytest.mark.slow]


@pytest.fixture(scope="module")
def lab() -> Iterator[RunningLab]:
    running = RunningLab(4)
    try:
        yield running
    finally:
        running.down()


def nodes(lab: RunningLab) -> dict[str, dict[str, Any]]:
    return {n["name"]: n for n in json.loads(lab.racklife("nodes", "list", "--json").stdout)}


def events(lab: RunningLab, name: str) -> list[str]:
    return [h["event"] for h in json.loads(lab.racklife("node", "history", name, "--json").stdout)]


def sinfo(lab: RunningLab, name: str) -> tuple[str, str]:
    out = subprocess.run(["sinfo", "-h", "-N", "-n", name, "-o", "%T %P"], env=lab.env, capture_output=True,
                         text=True, timeout=15, check=True).stdout.split()
    return (out[0], out[1].rstrip("*")) if out else ("absent", "")


def kube_node(lab: RunningLab, cache: Path, name: str) -> dict[str, Any]:
    binary = shutil.which("kubectl")
    if binary is None:
        pytest.fail("kubectl is not on PATH: this test needs the real client")
    done = subprocess.run([binary, "--kubeconfig", lab.env["KUBECONFIG"], "--cache-dir", str(cache),
                           "--request-timeout=20s", "get", "node", name, "-o", "json"],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    out: dict[str, Any] = json.loads(done.stdout)
    return out


def kube_has(lab: RunningLab, cache: Path, name: str) -> bool:
    binary = shutil.which("kubectl") or "kubectl"
    done = subprocess.run([binary, "--kubeconfig", lab.env["KUBECONFIG"], "--cache-dir", str(cache),
                           "--request-timeout=20s", "get", "node", name, "-o", "name"],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0 or "NotFound" in done.stderr, done.stderr
    return done.returncode == 0


def power(lab: RunningLab, name: str) -> str:
    return str(next(n for n in lab.status()["nodes"] if n["name"] == name)["power"])


def wait_for(done: Callable[[], bool], seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not done():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)


def _the_host_drives_each_resource(lab: RunningLab, config: dict[str, str], tmp: Path) -> None:
    inv = load_inventory(lab.inventory)
    env = host_env(lab.env)
    node = ProviderHost(env, BareMetalNodeProvider(), "BareMetalNode", tmp / "node-host.log")
    pool = ProviderHost(env, PoolMembershipProvider(), "PoolMembership", tmp / "pool-host.log")
    slurm = ProviderHost(env, SlurmNodeRegistrationProvider(), "SlurmNodeRegistration", tmp / "slurm-host.log")
    try:
        for host in (node, pool, slurm):
            assert host.configure(config) is False  # the host takes no secrets: outputs carry none
        props = node_props(inv, inv.node("node-03"))
        bad = copy.deepcopy(props)
        bad["spec"]["nics"][0]["mac"] = "zz:zz"
        assert [p for p, _ in node.check("node-03", bad)[1]] == ["spec.nics[0].mac"]
        inputs, failures = node.check("node-03", props)
        assert failures == []

        built = node.create("node-03", inputs)
        assert built.id == inv.node("node-03").serial
        assert built.outs["state"] == "accepted" and built.outs["acceptance_record"], built.outs
        assert nodes(lab)["node-03"]["state"] == "accepted"  # stopped before the join: the membership's
        assert {"enroll", "inspect_done", "provision_done", "accept"} <= set(events(lab, "node-03")), \
            events(lab, "node-03")
        assert "join_done" not in events(lab, "node-03")
        again = node.read("node-03", built.id, built.outs)
        assert again.id == built.id and again.outs["state"] == "accepted"

        member_in, failures = pool.check("node-03", {**props, "pool": "training",
                                                     "acceptance_record": built.outs["acceptance_record"]})
        assert failures == []
        member = pool.create("node-03", member_in)
        assert member.outs["in_service"] is True, member.outs
        assert sinfo(lab, "node-03") == ("idle", "training")
        assert nodes(lab)["node-03"]["state"] == "in_service"

        reg_in, failures = slurm.check("node-03", {"node": "node-03", "partition": "training",
                                                   "membership": "training"})
        assert failures == []
        reg = slurm.create("node-03", reg_in)
        assert reg.outs["slurm_state"].lower().startswith("idle") and "training" in reg.outs["partitions"]
        assert slurm.read("node-03", reg.id, reg.outs).id == reg.id
        with pytest.raises(HostError, match="not in partition gpu"):
            slurm.create("node-03", {**reg_in, "partition": "gpu"})

        reimaged = copy.deepcopy(inputs)
        reimaged["spec"]["image"] = "minimal2"
        reimaged["images"] = [{"name": "minimal2", "version": "2"}]
        assert node.diff("node-03", built.id, built.outs, reimaged) == ("DIFF_SOME", [])
        other = copy.deepcopy(inputs)
        other["spec"]["serial"] = "LAB99999"
        assert node.diff("node-03", built.id, built.outs, other) == ("DIFF_SOME", ["spec.serial"])
        assert node.diff("node-03", built.id, built.outs, inputs)[0] == "DIFF_NONE"
        # Refused before anything runs: the boot server has no build of minimal2.
        with pytest.raises(HostError, match=r"reimage.*(is not built|not published)"):
            node.update("node-03", built.id, built.outs, reimaged)
        assert nodes(lab)["node-03"]["state"] == "in_service" and sinfo(lab, "node-03")[0] == "idle"

        moved_in = {**member_in, "pool": "inference"}
        assert pool.diff("node-03", member.id, member.outs, moved_in) == ("DIFF_SOME", [])
        moved = pool.update("node-03", member.id, member.outs, moved_in)
        assert moved["in_service"] is True and moved["observed_pool"] == "inference", moved
        row = nodes(lab)["node-03"]
        assert (row["state"], row["pool"]) == ("in_service", "inference")
        k = kube_node(lab, tmp / "kcache", "node-03")
        assert k["metadata"]["labels"].get("racklife.io/pool") == "inference"
        assert not k["spec"].get("unschedulable")
        after = slurm.read("node-03", reg.id, reg.outs)
        assert after.id == "" or "training" not in after.outs["partitions"], after.outs

        pool.delete("node-03", member.id, moved)
        assert nodes(lab)["node-03"]["state"] == "drained"
        assert kube_node(lab, tmp / "kcache", "node-03")["spec"].get("unschedulable") is True

        node.delete("node-03", built.id, built.outs)
        assert nodes(lab)["node-03"]["state"] == "decommissioned"
        assert "decommission_done" in events(lab, "node-03")
        assert not kube_has(lab, tmp / "kcache", "node-03")  # out of Kubernetes' node list
        wait_for(lambda: power(lab, "node-03") == "Off", 30, "node-03 to power off")
        assert node.read("node-03", built.id, built.outs).id == ""  # gone from the fleet
    finally:
        for host in (node, pool, slurm):
            host.close()


class Routed(Recorder):
    """Dynamic resources go to their real providers (unpickled from ``__provider``, as the host does)."""

    def __init__(self, config: dict[str, str]) -> None:
        super().__init__()
        self.config = config

    def new_resource(self, args: MockResourceArgs) -> tuple[str, dict[str, Any]]:
        if not args.typ.startswith("pulumi-python:dynamic/"):
            return super().new_resource(args)
        self.seen.append(Seen(args.typ, args.name, dict(args.inputs), len(self.seen)))
        provider = dill.loads(base64.b64decode(args.inputs["__provider"]))
        provider.configure(ConfigureRequest(Config(raw_config=self.config, project_name="racklife")))
        inputs = {k: v for k, v in args.inputs.items() if k != "__provider"}
        checked = provider.check({}, inputs)
        assert not checked.failures, [(f.property, f.reason) for f in checked.failures]
        created = provider.create(checked.inputs)
        return created.id, created.outs


def _the_whole_program_leaves_every_node_in_service(lab: RunningLab, config: dict[str, str], tmp: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    doc = yaml.safe_load(lab.inventory.read_text())
    doc["nodes"] = [n for n in doc["nodes"] if n["name"] != "node-03"]  # decommissioned by the host phase
    inventory = tmp / "inventory.yaml"
    inventory.write_text(yaml.safe_dump(doc))
    for key in list(os.environ):
        if key.startswith(("RACKLIFE_", "SLURM_")) and key not in lab.env:
            monkeypatch.delenv(key)
    for key, value in lab.env.items():
        monkeypatch.setenv(key, value)
    routed = Routed(config)
    run_program(StackConfig(inventory), routed)
    assert sorted(s.inputs["node"] for s in routed.of("PoolMembership")) == ["node-01", "node-02", "node-04"]
    assert all(kind(s.typ) != "NodePatch" for s in routed.seen)
    want = {n["name"]: n["pool"] for n in doc["nodes"]}
    got = {name: (row["state"], row["pool"]) for name, row in nodes(lab).items() if name in want}
    assert got == {name: ("in_service", p) for name, p in want.items()}, got
    assert nodes(lab)["node-03"]["state"] == "decommissioned"
    for name, p in want.items():
        if p == "training":
            assert sinfo(lab, name) == ("idle", "training")


def test_pulumi_providers_on_the_lab(lab: RunningLab, minimal_image: Path, tmp_path: Path,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    config = {"racklife:imagesDir": str(minimal_image), "racklife:level": "quick", "racklife:bootTimeoutS": "60",
              "racklife:operator": "pulumi-test"}
    _the_host_drives_each_resource(lab, config, tmp_path)
    _the_whole_program_leaves_every_node_in_service(lab, config, tmp_path, monkeypatch)

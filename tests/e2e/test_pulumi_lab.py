"""The Pulumi providers against a 4-node lab: the real provider host over gRPC, then the whole stack program.

First the host (`python -m pulumi.dynamic`, the process Pulumi's engine
starts) is driven as the engine drives it, for each dynamic resource, on
node-03, with each side effect checked in the lab:

- ``BareMetalNode`` Check refuses a bad MAC on its property; two Creates sent
  at once (node-03 and node-04) run side by side in the one host (their
  builds overlap in time); each enrols, provisions and accepts (and stops
  there: not in service); Read reports it; Diff says a serial change is a
  replacement; (after the membership below) a new host, configured with an
  images directory holding version 2 of the image, refuses an Update to
  version 9 (not built) leaving the node in service, and carries out the
  Update to version 2 (Diff: an update, not a replacement) as the planner's
  reimage: drained, reprovisioned, re-tested, idle in its partition, and
  Read reports version 2; then a firmware baseline added to its spec is an
  update that is the planner's update-firmware (the image pushed to the
  OpenBMC tree's UpdateService, the version read back, in service again);
- ``PoolMembership`` Create joins Slurm's partition; Update to ``inference``
  is the role swap (in service in Kubernetes, labelled); Delete drains it out
  with racklife's cordon;
- ``SlurmNodeRegistration`` Create checks slurmctld lists it in the
  partition (a partition slurm.conf lacks is refused by the lab's hook);
  Read follows Slurm; for node-04, which slurm.conf does not define, Create
  puts its ``NodeName=`` line into the lab's slurm.conf and its partition
  (the lab's registration hook, slurmctld restarted: ``scontrol show node``
  lists it in the partition), and Delete takes it out again (``scontrol``
  no longer knows it);
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
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import dill
import pytest
import yaml
from pulumi.dynamic import ConfigureRequest
from pulumi.dynamic.config import Config
from pulumi.runtime import MockResourceArgs

from lifecycle.lab.redfish_emulator.update_service import make_image
from lifecycle.model.inventory import load_inventory
from stacks.racklife_pulumi.components import node_props
from stacks.racklife_pulumi.program import StackConfig
from stacks.racklife_pulumi.providers import (
    BareMetalNodeProvider,
    PoolMembershipProvider,
    SlurmNodeRegistrationProvider,
)
from tests.e2e.conftest import RunningLab, firmware_version, publish_version, wait_for
from tests.e2e.host import Created, HostError, ProviderHost, host_env
from tests.stacks.mocks import Recorder, Seen, kind, run_program

pytestmark = [pytest.mark.xdist_group("lab"), pytest.mark.slow]
OPENBMC_PART = "5d0869c4"  # node-03's BMC firmware in the lab's OpenBMC tree (its id's last part)


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


def build_span(lab: RunningLab, name: str) -> tuple[str, str]:
    """When the node's build began (its enrolment) and when its acceptance was recorded (ISO 8601, UTC)."""
    rows = json.loads(lab.racklife("node", "history", name, "--json").stdout)
    start = min(r["at"] for r in rows if r["event"] == "enroll")
    return start, max(r["at"] for r in rows if r["event"] == "accept")


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
        inputs_04, failures = node.check("node-04", node_props(inv, inv.node("node-04")))
        assert failures == []

        # Two Creates at once in one host, as the engine sends independent resources: they run side by side
        # (each node's build, enrol to acceptance, overlaps the other's), not one after the other.
        with ThreadPoolExecutor(2) as pool_:
            both = [pool_.submit(node.create, "node-03", inputs), pool_.submit(node.create, "node-04", inputs_04)]
            built, built_04 = (f.result() for f in both)
        assert built_04.outs["state"] == "accepted", built_04.outs
        spans = {n: build_span(lab, n) for n in ("node-03", "node-04")}
        assert spans["node-03"][0] < spans["node-04"][1] and spans["node-04"][0] < spans["node-03"][1], spans
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
        with pytest.raises(HostError, match=r"registration hook failed .*slurm\.conf has no partition gpu"):
            slurm.create("node-03", {**reg_in, "partition": "gpu"})
        _registration_edits_slurm_conf(lab, slurm)

        other = copy.deepcopy(inputs)
        other["spec"]["serial"] = "LAB99999"
        assert node.diff("node-03", built.id, built.outs, other) == ("DIFF_SOME", ["spec.serial"])
        assert node.diff("node-03", built.id, built.outs, inputs)[0] == "DIFF_NONE"
        built = _new_image_and_firmware(lab, config, env, inputs, built, tmp)

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
        # Still in slurm.conf (the registration's), drained there by racklife (the swap's leave).
        assert after.id == reg.id and "DRAIN" in after.outs["slurm_state"] and after.outs["owner"] == "racklife", \
            after.outs

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


def scontrol_node(lab: RunningLab, name: str) -> str | None:
    """``scontrol show node NAME`` from the lab's real slurmctld; None when Slurm does not know the node."""
    done = subprocess.run(["scontrol", "show", "node", "-o", name], env=lab.env, capture_output=True, text=True,
                          timeout=15, check=False)
    if done.returncode != 0:
        assert "not found" in (done.stdout + done.stderr).lower(), done.stdout + done.stderr
        return None
    return done.stdout


def _registration_edits_slurm_conf(lab: RunningLab, slurm: ProviderHost) -> None:
    """node-04 (an inference node: slurm.conf does not define it) registered in partition training through the
    lab's registration hook (slurmctld restarted with its NodeName line), then taken out again by Delete."""
    assert scontrol_node(lab, "node-04") is None
    conf = Path(lab.env["SLURM_CONF"])
    assert "NodeName=node-04 " not in conf.read_text()
    inputs, failures = slurm.check("node-04", {"node": "node-04", "partition": "training", "membership": "training"})
    assert failures == []
    reg = slurm.create("node-04", inputs)
    shown = scontrol_node(lab, "node-04")
    assert shown is not None and "NodeName=node-04 " in shown and "Partitions=training" in shown, shown
    assert "training" in reg.outs["partitions"], reg.outs
    assert "NodeName=node-04 " in conf.read_text()
    assert slurm.read("node-04", reg.id, reg.outs).id == reg.id
    slurm.delete("node-04", reg.id, reg.outs)
    assert scontrol_node(lab, "node-04") is None
    assert "node-04" not in conf.read_text()
    assert slurm.read("node-04", reg.id, reg.outs).id == ""  # gone from Slurm: gone


def _new_image_and_firmware(lab: RunningLab, config: dict[str, str], env: dict[str, str], inputs: dict[str, Any],
                            built: Created, tmp: Path) -> Created:
    """A new `pulumi up` (a new host) with an images directory holding version 2 of the image in the stack's
    configuration: the version raised, then a firmware baseline added, each an update of node-03."""
    images = publish_version(Path(config["racklife:imagesDir"]), tmp / "images", "2")
    host = ProviderHost(env, BareMetalNodeProvider(), "BareMetalNode", tmp / "node-host-2.log")
    try:
        host.configure({**config, "racklife:imagesDir": str(images)})
        v2, built = _reimage(lab, host, inputs, built)
        return _firmware(lab, host, v2, built, tmp)
    finally:
        host.close()


def _reimage(lab: RunningLab, host: ProviderHost, inputs: dict[str, Any], built: Created
             ) -> tuple[dict[str, Any], Created]:
    """The image's version raised to 2: an update, not a replacement, that reimages node-03."""
    unbuilt = copy.deepcopy(inputs)
    unbuilt["spec"]["image"], unbuilt["images"] = "minimal", [{"name": "minimal", "version": "9"}]
    # Refused before anything runs: the boot server has no build of version 9; node-03 stays in service.
    with pytest.raises(HostError, match=r"reimage.*(is not built|not published)"):
        host.update("node-03", built.id, built.outs, unbuilt)
    assert nodes(lab)["node-03"]["state"] == "in_service" and sinfo(lab, "node-03")[0] == "idle"

    v2 = copy.deepcopy(inputs)
    v2["spec"]["image"], v2["images"] = "minimal", [{"name": "minimal", "version": "2"}]
    assert host.diff("node-03", built.id, built.outs, v2) == ("DIFF_SOME", [])  # an update, not a replacement
    outs = host.update("node-03", built.id, built.outs, v2)
    assert (outs["state"], outs["booted_image"], outs["booted_version"]) == ("in_service", "minimal", "2"), outs
    events = [h["event"] for h in json.loads(lab.racklife("node", "history", "node-03", "--json").stdout)]
    at = events.index("reprovision")  # the planner's reimage: leave, reprovision, re-test, rejoin
    assert events[at - 2:at + 6] == ["drain", "drain_done", "reprovision", "reprovision_done", "burn_in",
                                     "accept", "join", "join_done"], events
    assert sinfo(lab, "node-03") == ("idle", "training")
    again = host.read("node-03", built.id, outs)
    assert (again.id, again.outs["booted_version"], again.outs["state"]) == (built.id, "2", "in_service")
    assert host.diff("node-03", built.id, again.outs, v2)[0] == "DIFF_NONE"
    return v2, Created(built.id, again.outs)


def _firmware(lab: RunningLab, host: ProviderHost, v2: dict[str, Any], built: Created, tmp: Path) -> Created:
    """A firmware baseline in the node's spec (the inventory's): an update that is the planner's update-firmware
    (node-03's OpenBMC tree: the image pushed to its UpdateService, the version read back, in service again)."""
    image = make_image(tmp / "fw-5.tar", "BMC", "5.0.0")
    assert firmware_version(lab, "node-03", OPENBMC_PART) != "5.0.0"
    based = copy.deepcopy(v2)
    based["spec"]["firmware"] = [{"component": OPENBMC_PART, "version": "5.0.0", "file": str(image)}]
    assert host.diff("node-03", built.id, built.outs, based) == ("DIFF_SOME", [])
    outs = host.update("node-03", built.id, built.outs, based)
    assert firmware_version(lab, "node-03", OPENBMC_PART) == "5.0.0"
    assert outs["state"] == "in_service" and sinfo(lab, "node-03") == ("idle", "training"), outs
    history = lab.racklife("node", "history", "node-03", "--json").stdout
    assert "firmware" in history and "5.0.0" in history, history
    assert host.diff("node-03", built.id, outs, based)[0] == "DIFF_NONE"
    return Created(built.id, outs)


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

"""The cluster stack of the 16-node example under Pulumi's mocks: its resources, their inputs, and two policies.

Policies: no secret reaches a plain input (the Slinky keys are secret
Outputs; BMC credentials are references; the pickled providers carry
nothing), and every scheduler membership waits for its node's acceptance
(its ``acceptance_record`` is the node's output, so it is registered after
the node; Slurm registrations and pool labels come after the membership).
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest

from lifecycle.drivers.kube.manifests import gpu_operator
from lifecycle.model.inventory import load_inventory
from stacks.racklife_pulumi.program import SLINKY_SECRET_KEYS, StackConfig
from tests.stacks.mocks import Recorder, kind, run_program

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "site-h100-2rack.yaml"
SECRET_VALUES = {name: f"sentinel-secret-{i}-do-not-leak" for i, name in enumerate(SLINKY_SECRET_KEYS)}
SECRET_SIG = "1b47061264138c4ac30d75fd1eb44270"  # how Pulumi's wire format marks a secret value


@pytest.fixture(scope="module")
def recorded() -> Recorder:
    mocks = Recorder()
    run_program(StackConfig(EXAMPLE, kubeconfig="/etc/racklife/kubeconfig", gpu_operator=True, slinky=True,
                            slinky_secrets=dict(SECRET_VALUES)), mocks)
    return mocks


def test_every_node_pool_and_scheduler_object_is_there(recorded: Recorder) -> None:
    inv = load_inventory(EXAMPLE)
    assert len(inv.nodes) == 16
    training = sorted(n.name for n in inv.nodes if inv.pool(n.pool).scheduler == "slurm")
    inference = sorted(n.name for n in inv.nodes if inv.pool(n.pool).scheduler == "kubernetes")
    assert training and inference
    nodes = {s.inputs["node"]: s for s in recorded.of("BareMetalNode")}
    assert sorted(nodes) == sorted(n.name for n in inv.nodes)
    for n in inv.nodes:
        spec = nodes[n.name].inputs["spec"]
        assert spec == json.loads(n.model_dump_json(exclude_none=True)), n.name
        assert nodes[n.name].inputs["rack"]["name"] == n.rack
        assert spec["bmc"]["credentials"].startswith("env:")  # a reference, resolved by the drivers
    members = {s.inputs["node"]: s.inputs["pool"] for s in recorded.of("PoolMembership")}
    assert members == {n.name: n.pool for n in inv.nodes}
    regs = {s.inputs["node"]: s.inputs["partition"] for s in recorded.of("SlurmNodeRegistration")}
    assert regs == {n: inv.pool(inv.node(n).pool).partition for n in training}
    patches = {s.inputs["metadata"]["name"]: s.inputs for s in recorded.of("NodePatch")}
    assert sorted(patches) == inference
    pool = inv.pool("inference")
    for p in patches.values():
        assert p["metadata"]["labels"] == {**pool.labels, "racklife.io/pool": "inference"}
        assert [f"{t['key']}={t['value']}:{t['effect']}" for t in p["spec"]["taints"]] == pool.taints
    releases = {s.inputs["chart"]: s.inputs for s in recorded.of("Release")}
    assert releases["gpu-operator"]["values"] == gpu_operator.CHART_VALUES
    assert releases["gpu-operator"]["version"] == gpu_operator.RELEASE
    assert {"oci://ghcr.io/slinkyproject/charts/slurm-operator",
            "oci://ghcr.io/slinkyproject/charts/slurm-operator-crds"} <= set(releases)
    custom = sorted(kind(s.typ) for s in recorded.seen if s.typ.split(":")[1].split("/")[0] in
                    ("nvidia.com", "slinky.slurm.net"))
    assert custom == sorted(["ClusterPolicy", "Accounting", "Controller", "LoginSet", "RestApi",
                             *["NodeSet"] * len({inv.node(n).pool for n in training})])
    components = sorted(kind(s.typ) for s in recorded.seen if s.typ.startswith("racklife:index:"))
    assert components == sorted(["Cluster", "Rack", "Rack", "SlurmCluster", "InferenceCluster", "SlinkySlurm"])


def _plain_strings(value: Any, path: str = "") -> list[tuple[str, str]]:
    """Every string in ``value`` outside a secret, with its path."""
    if isinstance(value, dict):
        if value.get("4dabf18193072939515e22adb298388d") == SECRET_SIG:
            return []
        return [x for k, v in value.items() for x in _plain_strings(v, f"{path}.{k}")]
    if isinstance(value, list):
        return [x for i, v in enumerate(value) for x in _plain_strings(v, f"{path}[{i}]")]
    return [(path, value)] if isinstance(value, str) else []


def leaks(recorded: Recorder) -> list[tuple[str, str]]:
    """(resource, input path) of every secret value found in a plain input."""
    return [(s.name, path) for s in recorded.seen for path, text in _plain_strings(s.inputs)
            if any(secret in text for secret in SECRET_VALUES.values())]


def test_the_leak_check_finds_a_secret_in_a_plain_input() -> None:
    import pulumi_kubernetes as k8s

    planted = Recorder()
    run_program(StackConfig(EXAMPLE), planted, lambda _cfg: k8s.core.v1.ConfigMap(
        "planted", data={"key": next(iter(SECRET_VALUES.values()))}).id)
    assert leaks(planted) == [("planted", ".data.key")]


def test_no_secret_reaches_a_plain_input(recorded: Recorder) -> None:
    assert leaks(recorded) == []
    secrets = recorded.of("Secret")
    assert sorted(s.inputs["metadata"]["name"] for s in secrets) == sorted(SECRET_VALUES)
    for s in secrets:
        data = s.inputs["stringData"]  # the whole map is secret (Pulumi marks the containing value)
        assert data["4dabf18193072939515e22adb298388d"] == SECRET_SIG, s.name
        assert list(data["value"].values()) == [SECRET_VALUES[s.inputs["metadata"]["name"]]]
    for s in recorded.of("BareMetalNode") + recorded.of("PoolMembership") + recorded.of("SlurmNodeRegistration"):
        blob = base64.b64decode(s.inputs["__provider"])
        assert b"stacks.racklife_pulumi.providers" in blob  # pickled by reference: the host imports it
        assert not any(v.encode() in blob for v in SECRET_VALUES.values())
        assert len(blob) < 2000, f"{s.name}: the provider pickles {len(blob)} bytes: it carries state"


def test_every_scheduler_membership_waits_for_its_nodes_acceptance(recorded: Recorder) -> None:
    built = {s.inputs["node"]: s for s in recorded.of("BareMetalNode")}
    members = {s.inputs["node"]: s for s in recorded.of("PoolMembership")}
    for node, m in members.items():
        assert m.inputs["acceptance_record"] == f"acc-{node}", m.inputs.get("acceptance_record")
        assert m.order > built[node].order
    for reg in recorded.of("SlurmNodeRegistration"):
        assert reg.order > members[reg.inputs["node"]].order
        assert reg.inputs["membership"] == members[reg.inputs["node"]].inputs["pool"]
    for patch in recorded.of("NodePatch"):
        assert patch.order > members[patch.inputs["metadata"]["name"]].order


def test_a_stack_without_kubernetes_has_no_kubernetes_object() -> None:
    mocks = Recorder()
    run_program(StackConfig(EXAMPLE), mocks)
    assert not [s for s in mocks.seen if s.typ.startswith("kubernetes:") or s.typ.startswith("pulumi:providers")]
    assert len(mocks.of("PoolMembership")) == 16


def test_slinky_without_its_secrets_fails_naming_them() -> None:
    with pytest.raises(Exception, match="no value for Secret"):
        run_program(StackConfig(EXAMPLE, kubeconfig="/k", slinky=True), Recorder())

"""`racklife build` ends in service for both pools: inference nodes Ready in Kubernetes with every GPU.

A 4-node lab (three training nodes, node-04 inference) is built with the real
command; the real kubectl then lists the inference pool by its label. Each
inference node must be Ready, with ``nvidia.com/gpu`` allocatable 8 (the lab
SKU's count), schedulable, without racklife's cordon, and ``in_service`` in
racklife with the transition naming Kubernetes. A node someone else cordons
afterwards is never uncordoned by ``racklife kube join``.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import RunningLab

pytestmark = [pytest.mark.xdist_group("lab"), pytest.mark.slow]


@pytest.fixture(scope="module")
def built(minimal_image: Path) -> Iterator[RunningLab]:
    lab = RunningLab(4)
    try:
        res = lab.racklife("build", str(lab.inventory), "--images", str(minimal_image), "--boot-timeout", "60",
                           timeout=1500)
        assert res.returncode == 0, res.stdout + res.stderr
        yield lab
    finally:
        lab.down()


def kubectl(lab: RunningLab, cache: Path, *args: str) -> Any:
    binary = shutil.which("kubectl")
    if binary is None:
        pytest.fail("kubectl is not on PATH: this test needs the real client")
    done = subprocess.run([binary, "--kubeconfig", lab.env["KUBECONFIG"], "--cache-dir", str(cache),
                           "--request-timeout=20s", *args, "-o", "json"],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout)


def test_build_leaves_every_inference_node_ready_with_its_gpus(built: RunningLab, tmp_path: Path) -> None:
    inference = sorted(n["name"] for n in built.status()["nodes"] if n["pool"] == "inference")
    assert inference == ["node-04"]
    listed = kubectl(built, tmp_path, "get", "nodes", "-l", "racklife.io/pool=inference")["items"]
    assert sorted(n["metadata"]["name"] for n in listed) == inference
    for node in listed:
        conditions = {c["type"]: c["status"] for c in node["status"]["conditions"]}
        assert conditions["Ready"] == "True", node["status"]
        assert node["status"]["allocatable"]["nvidia.com/gpu"] == "8"
        assert not node["spec"].get("unschedulable"), node["spec"]
        assert all(t["key"] != "racklife.io/maintenance" for t in node["spec"].get("taints", []))
        assert "racklife.io/cordoned-by" not in node["metadata"].get("annotations", {})
    states = {n["name"]: n["state"] for n in json.loads(built.racklife("nodes", "list", "--json").stdout)}
    assert set(states.values()) == {"in_service"}, states
    history = json.loads(built.racklife("node", "history", "node-04", "--json").stdout)
    joined = [h for h in history if h["event"] == "join_done"]
    assert joined and joined[-1]["reason"].startswith("in service in Kubernetes pool inference"), history


def test_a_foreign_cordon_is_never_lifted(built: RunningLab, tmp_path: Path) -> None:
    binary = shutil.which("kubectl")
    assert binary is not None
    base = [binary, "--kubeconfig", built.env["KUBECONFIG"], "--cache-dir", str(tmp_path)]
    subprocess.run([*base, "cordon", "node-04"], check=True, capture_output=True, timeout=60)
    try:
        res = built.racklife("kube", "join", "node-04", "--json")
        assert res.returncode == 5, res.stdout + res.stderr
        out = json.loads(res.stdout)[0]
        assert not out["ok"] and "cordoned by someone else" in out["reason"], out
        node = kubectl(built, tmp_path, "get", "node", "node-04")
        assert node["spec"]["unschedulable"] is True
    finally:
        subprocess.run([*base, "uncordon", "node-04"], check=True, capture_output=True, timeout=60)

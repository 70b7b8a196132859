"""`racklife kube render|validate` as an operator runs them: documents on stdout, exit codes, JSON errors."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from tests.kube_manifests.inventories import EXAMPLES


def racklife(*args: str) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("racklife") or str(Path(sys.executable).with_name("racklife"))
    return subprocess.run([exe, *args], capture_output=True, text=True, timeout=120, check=False)


def test_render_prints_documents_kubectl_takes_and_names_the_secrets(tmp_path: Path) -> None:
    out = racklife("kube", "render", "slinky", "--inventory", str(EXAMPLES[0]))
    assert out.returncode == 0, out.stderr
    docs = list(yaml.safe_load_all(out.stdout))
    assert [d["kind"] for d in docs] == ["Namespace", "ConfigMap", "Accounting", "Controller", "NodeSet",
                                         "LoginSet", "RestApi"]
    assert "needs Secret slurm/slurm-auth-slurm key slurm.key" in out.stderr
    saved = tmp_path / "slinky.yaml"
    saved.write_text(out.stdout)
    again = racklife("kube", "validate", str(saved), "--json")
    assert again.returncode == 0, again.stdout
    assert json.loads(again.stdout)["valid"] is True

    policy = racklife("kube", "render", "gpu-operator", "--inventory", str(EXAMPLES[0]), "-o", "json",
                      "--mig-strategy", "mixed")
    assert policy.returncode == 0, policy.stderr
    items = json.loads(policy.stdout)["items"]
    assert items[1]["kind"] == "ClusterPolicy" and items[1]["spec"]["mig"]["strategy"] == "mixed"


def test_validate_refuses_a_broken_file_with_each_field(tmp_path: Path) -> None:
    out = racklife("kube", "render", "gpu-operator", "--inventory", str(EXAMPLES[0]))
    docs = list(yaml.safe_load_all(out.stdout))
    docs[1]["spec"]["mig"]["strategy"] = "all"
    docs[1]["spec"]["toolkit"]["path"] = "/usr"
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump_all(docs))
    res = racklife("kube", "validate", str(bad), "--json")
    assert res.returncode == 1
    errors = json.loads(res.stdout)["errors"]
    assert [(e["object"], e["field"]) for e in errors] == [
        ("ClusterPolicy/cluster-policy", "spec.mig.strategy"), ("ClusterPolicy/cluster-policy", "spec.toolkit.path")]
    human = racklife("kube", "validate", str(bad))
    assert human.returncode == 1 and "spec.toolkit.path: unknown field" in human.stderr
    assert "Traceback" not in human.stderr


def test_bad_input_exits_2_without_a_traceback(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text("kind: [unclosed\n")
    res = racklife("kube", "validate", str(broken))
    assert res.returncode == 2 and "cannot read manifests" in res.stderr and "Traceback" not in res.stderr
    inv = yaml.safe_load(EXAMPLES[0].read_text())
    inv["nodes"][0]["sku"] = "h200-sxm-8"
    mixed = tmp_path / "mixed.yaml"
    mixed.write_text(yaml.safe_dump(inv))
    res = racklife("kube", "render", "slinky", "--inventory", str(mixed))
    assert res.returncode == 2 and "pools.training: mixes SKUs" in res.stderr and res.stdout == ""
    res = racklife("kube", "render", "slinky", "--inventory", str(tmp_path / "missing.yaml"))
    assert res.returncode == 2 and "Traceback" not in res.stderr

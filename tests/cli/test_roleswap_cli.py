"""`racklife role-swap` refuses bad input with one line and exit 2, and a dry run refuses a node not in service.

No lab: the store is the example inventory imported; nothing is in service,
so the dry run's first pre-check fails (exit 5) and nothing is recorded.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from lifecycle.cli.roleswap import parse_duration
from lifecycle.store import Store

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "site-h100-2rack.yaml"


def racklife(home: Path, *args: str, kubeconfig: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("RACKLIFE_DB", "KUBECONFIG", "RACKLIFE_KUBECONFIG")}
    env |= {"RACKLIFE_HOME": str(home)} | ({"KUBECONFIG": str(kubeconfig)} if kubeconfig else {})
    exe = shutil.which("racklife") or str(Path(sys.executable).with_name("racklife"))
    return subprocess.run([exe, *args], env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(("text", "seconds"), [("90", 90.0), ("90s", 90.0), ("30m", 1800.0), ("1.5h", 5400.0)])
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "30 minutes", "-5m", "5d", "m"])
def test_bad_durations(text: str) -> None:
    with pytest.raises(ValueError, match="--deadline"):
        parse_duration(text)


def test_bad_input_is_exit_2_and_changes_nothing(tmp_path: Path) -> None:
    assert racklife(tmp_path, "inventory", "import", str(EXAMPLE)).returncode == 0
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\n")
    cases = [
        (["role-swap", "r01-n01", "--to", "inference"], None, "no kubeconfig"),
        (["role-swap", "r01-n01", "--to", "inference", "--policy", "cancel"], kubeconfig, "--policy"),
        (["role-swap", "r01-n01", "--to", "inference", "--deadline", "soon"], kubeconfig, "--deadline"),
        (["role-swap", "nope", "--to", "inference"], kubeconfig, "nope"),
        (["role-swap", "r01-n01", "--to", "nowhere"], kubeconfig, "nowhere"),
        (["role-swap", "r01-n01", "--to", "inference", "--image", "minimal:2"], kubeconfig, "only for --reimage"),
        (["role-swap", "r01-n01", "--to", "inference", "--reimage"], kubeconfig, "names no image"),
        (["role-swap", "r01-n01", "--to", "inference", "--reimage", "--image", "minimal:9", "--images",
          str(tmp_path / "no-images")], kubeconfig, "no built images"),
    ]
    for args, kc, needle in cases:
        res = racklife(tmp_path, *args, kubeconfig=kc)
        assert res.returncode == 2 and needle in res.stderr and "Traceback" not in res.stderr, (args, res.stderr)


def test_a_dry_run_of_a_node_not_in_service_is_refused_and_records_nothing(tmp_path: Path) -> None:
    assert racklife(tmp_path, "inventory", "import", str(EXAMPLE)).returncode == 0
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\n")
    res = racklife(tmp_path, "role-swap", "r01-n01", "--to", "inference", "--dry-run", "--json",
                   kubeconfig=kubeconfig)
    assert res.returncode == 5, res.stdout + res.stderr
    [plan] = json.loads(res.stdout)["nodes"]
    checks = {c["name"]: c for c in plan["checks"]}
    assert not checks["in service in the other pool"]["ok"]
    assert "node is enrolled in pool training" in checks["in service in the other pool"]["detail"]
    store = Store(f"sqlite:///{tmp_path / 'racklife.sqlite'}")
    try:
        assert [t.event for t in store.history("r01-n01")] == ["enroll"]
        assert store.get("r01-n01").pool == "training"
    finally:
        store.close()


def test_each_node_of_a_request_is_re_tested_in_its_own_folder(tmp_path: Path) -> None:
    """Two swaps of one request re-test at the same time: one shared folder made the second's evidence
    bundle fail ("written once") and left its node between pools (seen by bench/roleswap.py)."""
    from lifecycle.cli.roleswap import node_settings
    from lifecycle.workflows.accept import AcceptSettings
    from lifecycle.workflows.kube_pool import KubeSettings
    from lifecycle.workflows.roleswap_checks import SwapSettings

    work = tmp_path / "role-swap-1"
    s = SwapSettings(target="inference", operator="op", kube=KubeSettings(str(tmp_path / "kubeconfig")),
                     accept=AcceptSettings(level="quick", work_dir=str(work), report_dir=str(work / "reports"),
                                           operator="op", ssh_config=str(tmp_path / "ssh")),
                     batch=("node-01", "node-02"))
    dirs = {n: Path(node_settings(s, n).accept.work_dir) for n in s.batch}
    assert dirs == {"node-01": work / "node-01", "node-02": work / "node-02"}
    assert {Path(node_settings(s, n).accept.report_dir) for n in s.batch} == {d / "reports" for d in dirs.values()}
    assert node_settings(s, "node-01").batch == s.batch  # the floor still counts the whole request

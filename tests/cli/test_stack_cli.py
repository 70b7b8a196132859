"""`racklife up|preview|destroy --stack NAME` without the Pulumi CLI: exit 2 with how to install it.

The PATH given to the command leaves out every directory holding a `pulumi`,
so the test means the same on a machine that has the CLI.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

EXE = shutil.which("racklife") or str(Path(sys.executable).with_name("racklife"))


def racklife(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    path = [d for d in os.environ.get("PATH", "").split(os.pathsep) if d and not (Path(d) / "pulumi").exists()]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RACKLIFE_", "PULUMI_"))}
    env |= {"RACKLIFE_HOME": str(home), "PATH": os.pathsep.join(path), "PULUMI_CONFIG_PASSPHRASE": "unused"}
    return subprocess.run([EXE, *args], env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("verb", [["up"], ["preview"], ["destroy", "--yes"]])
def test_without_the_pulumi_cli_it_says_how_to_install_it(tmp_path: Path, verb: list[str]) -> None:
    res = racklife(tmp_path, *verb, "--stack", "lab")
    assert res.returncode == 2, res.stdout + res.stderr
    assert "Traceback" not in res.stderr
    text = " ".join(res.stderr.split())
    assert "Pulumi CLI" in text and "get.pulumi.com" in text, res.stderr
    assert not (tmp_path / "pulumi").exists()  # no backend was created: nothing started


def test_json_error_under_json(tmp_path: Path) -> None:
    res = racklife(tmp_path, "preview", "--stack", "lab", "--json")
    assert res.returncode == 2
    out = json.loads(res.stdout)["error"]
    assert out["exit_code"] == 2 and "get.pulumi.com" in out["message"]


def test_destroy_asks_for_yes(tmp_path: Path) -> None:
    res = racklife(tmp_path, "destroy", "--stack", "lab")
    assert res.returncode == 2 and "--yes" in res.stderr


def test_stack_is_required(tmp_path: Path) -> None:
    res = racklife(tmp_path, "up")
    assert res.returncode == 2 and "--stack" in res.stderr

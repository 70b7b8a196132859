"""`racklife config view`: each setting's value and where it came from; secrets never shown.

Before there was no way to see which store a command read (an empty default
store answered `nodes list` with an empty table and exit 0).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

EXE = shutil.which("racklife") or str(Path(sys.executable).with_name("racklife"))


def view(*args: str, **env: str) -> dict[str, dict[str, str | None]]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("RACKLIFE_", "SLURM_", "KUBECONFIG"))}
    res = subprocess.run([EXE, *args, "config", "view", "--json"], env=base | env, capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0, res.stderr
    assert "s3cret" not in res.stdout + res.stderr and "hunter22" not in res.stdout + res.stderr
    return {r["setting"]: r for r in json.loads(res.stdout)}


def test_each_setting_says_where_it_came_from(tmp_path: Path) -> None:
    rows = view(RACKLIFE_HOME=str(tmp_path), RACKLIFE_LAB_DIR="/tmp/rl-lab", RACKLIFE_SLURM_JWT="s3cret")
    assert rows["store"] == {"setting": "store", "value": f"sqlite:///{tmp_path / 'racklife.sqlite'}",
                             "source": "env RACKLIFE_HOME"}
    assert rows["lab directory"]["value"] == "/tmp/rl-lab" and rows["lab directory"]["source"] == "env RACKLIFE_LAB_DIR"
    assert rows["slurmrestd token"]["value"] == "(set)"
    assert rows["inventory"]["source"] == "unset" and rows["burn-in python"]["source"] == "default"
    assert rows["service"]["source"] == "no store yet"
    assert not (tmp_path / "racklife.sqlite").exists()  # looking makes nothing


def test_the_command_line_wins_and_a_password_is_masked(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'other.sqlite'}"
    assert view("--db", url, RACKLIFE_DB=f"sqlite:///{tmp_path / 'env.sqlite'}")["store"]["source"] == "--db"
    assert view(RACKLIFE_DB=url)["store"] == {"setting": "store", "value": url, "source": "env RACKLIFE_DB"}
    pg = view("--db", "postgresql://racklife:hunter22@127.0.0.1:1/racklife")
    assert pg["store"]["value"] == "postgresql://racklife:***@127.0.0.1:1/racklife"
    assert pg["service"]["source"].startswith("unknown: StoreUnavailable")

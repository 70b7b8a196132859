"""`racklife status`: the store's pools, capacity and states, and a running workflow with its step and nodes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests.service import scripted

RACKLIFE = [sys.executable, "-c", "from lifecycle.cli import main; main()"]


def status(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*RACKLIFE, "status", *args], env=os.environ | {"RACKLIFE_DB": url, "COLUMNS": "120"},
                          capture_output=True, text=True, timeout=120)


def test_status_json_and_view_show_the_store(repo_dir: Path, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'rl.sqlite'}"
    scripted.build(repo_dir, url).close()
    done = status(url, "--json")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    pools = {p["name"]: p for p in doc["pools"]}
    assert pools["training"]["capacity"] == {"in_service": 8, "lent": 8, "draining": 0, "quarantined": 8,
                                                 "failed": 0, "maintenance": 0, "bringup": 72, "retired": 0}
    assert pools["training"]["states"] == {"enrolled": 8, "provisioning": 1, "quarantined": 1, "in_service": 1,
                                           "lent": 1}
    assert pools["inference"]["gpus"] == 32 and pools["spare"]["nodes"] == 0
    assert doc["running"] == [] and doc["drift"] == 1 and doc["unobserved"] == 14
    view = status(url)
    assert view.returncode == 0, view.stderr
    assert "training" in view.stdout and "running workflows (0)" in view.stdout
    assert "enrolled 8, provisioning 1, quarantined 1, in_service 1, lent 1" in view.stdout


def test_a_running_workflow_shows_its_steps_and_leased_nodes(repo_dir: Path, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'rl.sqlite'}"
    scripted.build(repo_dir, url).close()
    work = tmp_path / "work"
    work.mkdir()
    app = subprocess.Popen([sys.executable, "-m", "tests.service.runs_app", url, "hold",
                            str(work)], env=os.environ | {"RACKLIFE_DB": url},
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=repo_dir)
    try:
        deadline = time.monotonic() + 60
        while not (work / "holding").exists():
            assert app.poll() is None and time.monotonic() < deadline, app.communicate()
            time.sleep(0.1)
        doc = json.loads(status(url, "--json").stdout)
        running: list[dict[str, Any]] = doc["running"]
        assert [(r["workflow"], r["status"], r["nodes"]) for r in running] == [("metrics_hold", "PENDING",
                                                                                ["r02-n02"])]
        # two steps journaled (the lease, look); the third is running and not journaled yet
        assert running[0]["steps_done"] == 2 and running[0]["last_step"] == "look"
        (work / "go").touch()
        _out, err = app.communicate(timeout=60)
        assert app.returncode == 0, err
    finally:
        if app.poll() is None:
            app.kill()
            app.communicate()
    assert json.loads(status(url, "--json").stdout)["running"] == []

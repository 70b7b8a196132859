"""`lab down` and `lab up` touch only their own lab; `lab env` exports the lab's directory; a stopped lab says so.

Before, `lab down` of a directory holding no lab tore down every namespace of
the prefix, another lab's included, and `lab up` did the same before it
started; `lab env` did not export RACKLIFE_LAB_DIR (the next `lab fault`
looked in the default directory); `lab status` of a stopped lab listed its
nodes as powered on. "Another lab" here is one namespace this test makes with
its own prefix (and removes), so nothing of any other lab on the machine is
at risk; no daemon is started.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from lifecycle.lab import netns

EXE = shutil.which("racklife") or str(Path(sys.executable).with_name("racklife"))


def racklife(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("RACKLIFE_")}
    return subprocess.run([EXE, *args], env=base | env, capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL)


@pytest.fixture
def other_lab() -> Iterator[str]:
    """A namespace of a lab that is not in any directory this test names: its prefix."""
    assert os.geteuid() == 0, "this lab test needs root (a network namespace)"
    prefix = f"rlo{os.getpid() % 100000}-"
    subprocess.run(["ip", "netns", "add", f"{prefix}hub"], check=True, timeout=30)
    try:
        yield prefix
    finally:
        subprocess.run(["ip", "netns", "delete", f"{prefix}hub"], check=False, timeout=30)


def test_down_and_up_leave_another_labs_namespaces(other_lab: str, tmp_path: Path) -> None:
    down = racklife("lab", "down", "--dir", str(tmp_path / "empty"), "--prefix", other_lab, "--yes", "--json")
    assert down.returncode == 5, down.stdout + down.stderr
    assert "belong to another lab" in json.loads(down.stdout)["error"]["message"]
    assert netns.running(other_lab) == [f"{other_lab}hub"]
    up = racklife("lab", "up", "--nodes", "1", "--dir", str(tmp_path / "mine"), "--prefix", other_lab, "--json")
    assert up.returncode == 5 and "belong to another lab" in up.stderr
    assert netns.running(other_lab) == [f"{other_lab}hub"]
    assert not (tmp_path / "mine").exists()  # refused before anything was made


def test_down_of_no_lab_stops_nothing_and_asks_first(tmp_path: Path) -> None:
    res = racklife("lab", "down", "--dir", str(tmp_path), "--prefix", "rlnone-", "--json")
    assert res.returncode == 0 and json.loads(res.stdout) == {"lab_dir": str(tmp_path), "removed": []}
    # A lab that stopped (its supervisor gone): down asks first, a dry run says what it would remove.
    state = {"phase": "ready", "pid": 2 ** 22 + 1, "prefix": "rlnone-", "lab_dir": str(tmp_path),
             "nodes": [{"name": "node-01", "pool": "training", "power": "on", "state": "idle"}]}
    (tmp_path / "state.json").write_text(json.dumps(state))
    refused = racklife("lab", "down", "--dir", str(tmp_path), "--json")
    assert refused.returncode == 5 and "without --yes" in json.loads(refused.stdout)["error"]["message"]
    dry = racklife("lab", "down", "--dir", str(tmp_path), "--dry-run", "--json")
    assert dry.returncode == 0 and json.loads(dry.stdout)["action"] == "tear down the lab"
    status = racklife("lab", "status", "--json", RACKLIFE_LAB_DIR=str(tmp_path))  # the directory from the env
    assert status.returncode == 0, status.stderr
    doc = json.loads(status.stdout)
    assert doc["running"] is False and doc["nodes"] == [{"name": "node-01", "pool": "training"}]
    text = racklife("lab", "status", RACKLIFE_LAB_DIR=str(tmp_path))
    assert "not running" in text.stdout and " on " not in text.stdout


def test_lab_env_exports_the_lab_dir(tmp_path: Path) -> None:
    """The exports name the lab's directory, so `lab fault` after `eval "$(racklife lab env)"` finds it."""
    from lifecycle.cli.lab import parse_exports

    # A process that passes for the lab's supervisor (its command line names lifecycle.lab.rack): the
    # state file is what `lab env` reads; no daemon of the lab is needed to print it.
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", "lifecycle.lab.rack"])
    try:
        state = {"phase": "ready", "pid": sleeper.pid, "prefix": "rlenv-", "lab_dir": str(tmp_path),
                 "slurm_conf": str(tmp_path / "slurm.conf"), "inventory": str(tmp_path / "inventory.yaml"),
                 "ssh_config": str(tmp_path / "ssh_config"),
                 "nodes": [{"name": "node-01", "pool": "training", "dir": str(tmp_path / "node-01")}]}
        (tmp_path / "state.json").write_text(json.dumps(state))
        res = racklife("lab", "env", "--dir", str(tmp_path))
        assert res.returncode == 0, res.stderr
        exports = parse_exports(res.stdout)
        assert exports["RACKLIFE_LAB_DIR"] == str(tmp_path)
        fault = racklife("lab", "fault", "node-02", "xid79", "--json", **exports)  # no --dir: the exported one
        assert fault.returncode == 2 and "no simulated node 'node-02'" in json.loads(fault.stdout)["error"]["message"]
    finally:
        sleeper.kill()
        sleeper.wait(10)

"""`node show` says why a node is where it is; `lab up` gives a new lab a new controller store."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from lifecycle.model.states import Actor
from lifecycle.store import Store

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "site-h100-2rack.yaml"


def racklife(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "RACKLIFE_DB"} | {"RACKLIFE_HOME": str(home)}
    exe = shutil.which("racklife") or str(Path(sys.executable).with_name("racklife"))
    return subprocess.run([exe, *args], env=env, capture_output=True, text=True, timeout=120)


def test_node_show_gives_the_reason_for_the_current_state(tmp_path: Path) -> None:
    assert racklife(tmp_path, "inventory", "import", str(EXAMPLE)).returncode == 0
    store = Store(f"sqlite:///{tmp_path / 'racklife.sqlite'}")
    try:
        for event in ("inspect", "inspect_done", "provision", "provision_done", "burn_in"):
            store.transition("r01-n02", event, Actor.WORKFLOW, f"test {event}", run_id="accept-r01-7")
        store.transition("r01-n02", "quarantine", Actor.WORKFLOW,
                         "gpu 3: XID 79 (fallen off the bus) during burn-in [dcgm level 3]", run_id="accept-r01-7")
    finally:
        store.close()
    res = racklife(tmp_path, "node", "show", "r01-n02", "--json")
    assert res.returncode == 0, res.stderr
    why = json.loads(res.stdout)["why"]
    assert why["reason"] == "gpu 3: XID 79 (fallen off the bus) during burn-in [dcgm level 3]"
    assert (why["event"], why["actor"], why["run_id"]) == ("quarantine", "workflow", "accept-r01-7")
    text = racklife(tmp_path, "node", "show", "r01-n02").stdout
    assert "why: gpu 3: XID 79 (fallen off the bus) during burn-in [dcgm level 3] " \
           "(quarantine by workflow, run accept-r01-7)" in " ".join(text.split())
    enrolled = json.loads(racklife(tmp_path, "node", "show", "r01-n01", "--json").stdout)["why"]
    assert enrolled["event"] == "enroll" and enrolled["reason"].startswith("inventory import from ")


def test_a_new_lab_gets_a_new_controller_store(tmp_path: Path) -> None:
    from lifecycle.cli.lab import CONTROLLER_DIR, fresh_controller_store

    home = tmp_path / CONTROLLER_DIR
    assert racklife(home, "inventory", "import", str(EXAMPLE)).returncode == 0
    note = fresh_controller_store(tmp_path, keep=False)
    assert not home.exists()
    aside = [p for p in tmp_path.iterdir() if p.name.startswith(f"{CONTROLLER_DIR}.")]
    assert len(aside) == 1 and (aside[0] / "racklife.sqlite").exists()  # moved, never deleted
    assert f"the previous lab's is in {aside[0]}" in note
    # the new lab's first import adds every node instead of finding the old lab's
    assert "16 added" in racklife(home, "inventory", "import", str(EXAMPLE)).stdout


def test_keep_store_keeps_it(tmp_path: Path) -> None:
    from lifecycle.cli.lab import CONTROLLER_DIR, fresh_controller_store

    home = tmp_path / CONTROLLER_DIR
    assert racklife(home, "inventory", "import", str(EXAMPLE)).returncode == 0
    note = fresh_controller_store(tmp_path, keep=True)
    assert "kept" in note and (home / "racklife.sqlite").exists()
    assert [p.name for p in tmp_path.iterdir()] == [CONTROLLER_DIR]

"""`racklife upgrade` refuses bad input with exit 2 and changes nothing; a dry run prints batches and who is left out.

No lab: the store is the example inventory imported, so no node is in service:
the dry run leaves every node out, with its state, and plans no batch.
"""

from __future__ import annotations

import json
from pathlib import Path

from lifecycle.store import Store
from tests.cli.test_roleswap_cli import EXAMPLE, racklife


def test_bad_input_is_exit_2_and_changes_nothing(tmp_path: Path) -> None:
    assert racklife(tmp_path, "inventory", "import", str(EXAMPLE)).returncode == 0
    cases = [
        (["upgrade", "--image", "minimal:2"], "name the nodes: --pool P"),
        (["upgrade", "--pool", "training", "--nodes", "r01-n01", "--image", "minimal:2"], "name the nodes one way"),
        (["upgrade", "--pool", "training"], "--image"),
        (["upgrade", "--pool", "training", "--image", "minimal:"], "--image"),
        (["upgrade", "--pool", "training", "--image", "minimal:2", "--max-unavailable", "0%"], "--max-unavailable"),
        (["upgrade", "--pool", "training", "--image", "minimal:2", "--window", "25:00-01:00"], "--window"),
        (["upgrade", "--pool", "training", "--image", "minimal:2", "--policy", "cancel"], "--policy"),
        (["upgrade", "--pool", "training", "--image", "minimal:2", "--halt-after", "3"], "--halt-after"),
        (["upgrade", "--pool", "training", "--image", "minimal:2", "--deadline", "soon"], "--deadline"),
        (["upgrade", "--pool", "nowhere", "--image", "minimal:2"], "unknown pool(s): nowhere (pools in the store: "),
        (["upgrade", "--nodes", "r01-n01,nope", "--image", "minimal:2"], "nope"),
        (["upgrade", "status", "upgrade-000000000000"], "no upgrade run"),
        (["upgrade", "pause", "upgrade-000000000000"], "no upgrade run"),
    ]
    for args, needle in cases:
        res = racklife(tmp_path, *args)
        assert res.returncode == 2 and needle in res.stderr and "Traceback" not in res.stderr, (args, res.stderr)
    store = Store(f"sqlite:///{tmp_path / 'racklife.sqlite'}")
    try:
        assert [t.event for t in store.history("r01-n01")] == ["enroll"]
    finally:
        store.close()


def test_a_dry_run_names_every_node_left_out(tmp_path: Path) -> None:
    assert racklife(tmp_path, "inventory", "import", str(EXAMPLE)).returncode == 0
    res = racklife(tmp_path, "upgrade", "--pool", "training", "--image", "minimal:2", "--dry-run", "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    doc = json.loads(res.stdout)
    assert doc["dry_run"] and doc["batches"] == [] and doc["change"] == "image minimal:2"
    assert doc["skipped"] and all("enrolled: only a node in service" in why for why in doc["skipped"].values())
    assert doc["pools"]["training"]["in_service"] == 0 and doc["hold_after_canary"]

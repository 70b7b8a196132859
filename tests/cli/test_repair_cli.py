"""`racklife repair`: the table's action for an XID and the breaker's numbers in a dry run; bad input is exit 2.

No lab: the store is the example inventory imported; nothing is in service, so
a dry run shows the plan and is refused (exit 5), and nothing is recorded.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "site-h100-2rack.yaml"


def racklife(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("RACKLIFE_DB", "KUBECONFIG", "RACKLIFE_KUBECONFIG")}
    env |= {"RACKLIFE_HOME": str(home)}
    exe = shutil.which("racklife") or str(Path(sys.executable).with_name("racklife"))
    return subprocess.run([exe, *args], env=env, capture_output=True, text=True, timeout=120)


def test_bad_input_is_exit_2(tmp_path: Path) -> None:
    assert racklife(tmp_path, "inventory", "import", str(EXAMPLE)).returncode == 0
    cases = [
        (["repair", "r01-n01"], "exactly one of --action or --from-xid"),
        (["repair", "r01-n01", "--action", "reboot", "--from-xid", "79"], "exactly one"),
        (["repair", "r01-n01", "--action", "pray"], "--action must be one of"),
        (["repair", "r01-n01", "--from-xid", "-3"], "--from-xid"),
        (["repair", "nope", "--action", "reboot"], "nope"),
        (["repair", "r01-n01", "--action", "reboot", "--image", "x"], "--image is only for a reimage"),
        (["repair-status", "nope"], "pool 'nope' is not in the store"),
    ]
    for args, needle in cases:
        res = racklife(tmp_path, *args)
        assert res.returncode == 2 and needle in res.stderr and "Traceback" not in res.stderr, (args, res.stderr)


def test_dry_run_from_xid_shows_the_action_and_the_breaker_and_changes_nothing(tmp_path: Path) -> None:
    assert racklife(tmp_path, "inventory", "import", str(EXAMPLE)).returncode == 0
    res = racklife(tmp_path, "repair", "r01-n01", "--from-xid", "79", "--dry-run", "--json")
    assert res.returncode == 5, res.stdout + res.stderr
    plan = json.loads(res.stdout)
    assert plan["dry_run"] and plan["action"] == "reboot" and "RESTART_BM" in plan["reason"]
    assert plan["breaker"].startswith("pool training: 0 of ") and "breaker closed" in plan["breaker"]
    assert "needs it in service" in plan["refused"]
    # An unknown XID fails closed to rma, which is built; the node not in service refuses it too.
    res = racklife(tmp_path, "repair", "r01-n01", "--from-xid", "99999", "--dry-run")
    assert res.returncode == 5 and "repair rma" in res.stdout and "not in NVIDIA's XID catalog" in res.stdout
    # An application's fault: nothing to repair.
    res = racklife(tmp_path, "repair", "r01-n01", "--from-xid", "13")
    assert res.returncode == 5 and "nothing to repair" in res.stderr, res.stderr
    res = racklife(tmp_path, "node", "history", "r01-n01", "--json")
    assert res.returncode == 0 and [h["to"] for h in json.loads(res.stdout)] == ["enrolled"], res.stdout


def _in_service(home: Path, node: str) -> None:
    from datetime import UTC, datetime, timedelta

    from lifecycle.model.states import Actor
    from lifecycle.store import AcceptanceRecord, Store

    store = Store(f"sqlite:///{home / 'racklife.sqlite'}")
    try:
        for event in ("inspect", "inspect_done", "provision", "provision_done", "burn_in", "accept"):
            store.transition(node, event, Actor.WORKFLOW, f"test {event}")
        now = datetime.now(UTC)
        rec = AcceptanceRecord(f"acc-{node}", node, True, "quick", "h100-sxm-8", now, now + timedelta(days=1),
                               "policy:test", None, {}, None, None)
        store.add_acceptance_record(rec)
        store.transition(node, "join", Actor.WORKFLOW, "join", acceptance_record=rec.id)
        store.transition(node, "join_done", Actor.WORKFLOW, "joined")
    finally:
        store.close()


def test_rma_from_an_xid_quarantines_the_in_service_node_as_a_durable_run(tmp_path: Path) -> None:
    """Xid 54 (CHECK_MECHANICALS) → rma: a repair run quarantines the node with the reason, lease released."""
    assert racklife(tmp_path, "inventory", "import", str(EXAMPLE)).returncode == 0
    _in_service(tmp_path, "r01-n01")
    res = racklife(tmp_path, "repair", "r01-n01", "--from-xid", "54", "--dry-run", "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    assert json.loads(res.stdout)["refused"] == "" and json.loads(res.stdout)["action"] == "rma"
    res = racklife(tmp_path, "repair", "r01-n01", "--from-xid", "54", "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    out = json.loads(res.stdout)
    assert (out["action"], out["state"]) == ("rma", "quarantined"), out
    assert "CHECK_MECHANICALS" in out["reason"] and "breaker closed" in out["breaker"], out
    hist = json.loads(racklife(tmp_path, "node", "history", "r01-n01", "--json").stdout)
    assert hist[-1]["to"] == "quarantined" and "repair (rma)" in hist[-1]["reason"], hist[-1]
    # The run is over and its lease released; a second rma of the quarantined node is refused, exit 5.
    res = racklife(tmp_path, "repair", "r01-n01", "--action", "rma")
    assert res.returncode == 5 and "quarantined already" in res.stderr, res.stderr
    # An operator may repair the quarantined node with an action: the plan has nothing to leave.
    res = racklife(tmp_path, "repair", "r01-n01", "--action", "reset-gpu", "--dry-run", "--json")
    assert res.returncode == 0 and json.loads(res.stdout)["refused"] == "", res.stdout + res.stderr
    res = racklife(tmp_path, "repair", "r01-n01", "--action", "reimage", "--dry-run")  # the node's own image
    assert res.returncode == 0 and "image debian12-gpu;" not in res.stdout and "image debian12-gpu" in res.stdout
    res = racklife(tmp_path, "repair", "r01-n01", "--action", "reimage", "--image", "minimal:1", "--dry-run")
    assert res.returncode == 0 and "image minimal:1" in res.stdout, res.stdout
    res = racklife(tmp_path, "repair-status", "training")
    assert res.returncode == 0 and "breaker closed" in res.stdout and "no health events" in res.stdout, res.stdout

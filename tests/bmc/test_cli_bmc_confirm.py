"""`bmc power off|cycle|reset` and `bmc sel --clear` ask first, dry-run, and refuse a node in service.

Before, they acted the moment they were typed, and `bmc power cycle` of an
in-service node went around the store and Slurm (the node came back drained
and the next join failed); with --force it is now the power workflow. The BMC is the project's Redfish emulator on
loopback serving a captured tree; the CLI is the real one, with no terminal
(so no one can be asked: without --yes it must refuse).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from lifecycle.cli import app
from lifecycle.model.inventory import load_inventory
from lifecycle.model.states import Actor
from lifecycle.store import AcceptanceRecord, Store
from tests.bmc.ipmi_fixtures import PASSWORD

ENV = "RACKLIFE_TEST_BMC_PASSWORD"


@pytest.fixture
def bmc(fixtures_dir: Path) -> Iterator[str]:
    from lifecycle.lab.redfish_emulator import BmcConfig, RedfishEmulator

    config = BmcConfig(name="rf", tree=fixtures_dir / "redfish" / "dmtf-public-rackmount1",
                       username="admin", password=PASSWORD)
    with RedfishEmulator([config]) as emu:
        yield emu.urls["rf"]


def run(home: Path, *args: str) -> Result:
    return CliRunner().invoke(app, ["bmc", *args], env={ENV: PASSWORD, "RACKLIFE_HOME": str(home),
                                                       "RACKLIFE_DB": None})


def direct(url: str) -> list[str]:
    return ["--address", url, "--driver", "redfish", "--user", "admin", "--password-env", ENV]


def power(home: Path, url: str) -> str:
    return str(json.loads(run(home, "power", "status", *direct(url), "--json").stdout)["power"])


def test_power_off_asks_dry_runs_and_goes_with_yes(bmc: str, tmp_path: Path) -> None:
    assert power(tmp_path, bmc) == "on"
    refused = run(tmp_path, "power", "off", *direct(bmc), "--json")
    assert refused.exit_code == 5, refused.output
    err = json.loads(refused.stdout)["error"]
    assert err["code"] == "refused" and "without --yes" in err["message"] and "--dry-run" in err["hint"]
    assert power(tmp_path, bmc) == "on"
    dry = run(tmp_path, "power", "cycle", *direct(bmc), "--dry-run", "--json")
    assert dry.exit_code == 0 and json.loads(dry.stdout) == {
        "dry_run": True, "action": "power cycle", "targets": [bmc], "effects": ["power is on now"]}
    assert power(tmp_path, bmc) == "on"
    done = run(tmp_path, "power", "off", *direct(bmc), "--yes", "--json")
    assert done.exit_code == 0 and json.loads(done.stdout)["changed"] is True


def test_sel_clear_asks_first(bmc: str, tmp_path: Path) -> None:
    before = json.loads(run(tmp_path, "sel", *direct(bmc), "--json").stdout)["entries"]
    assert before  # the captured log has entries
    assert run(tmp_path, "sel", "--clear", *direct(bmc)).exit_code == 5
    dry = run(tmp_path, "sel", "--clear", "--dry-run", *direct(bmc))
    assert dry.exit_code == 0 and f"would clear the event log: {bmc}" in dry.stdout
    assert json.loads(run(tmp_path, "sel", *direct(bmc), "--json").stdout)["entries"] == before
    assert run(tmp_path, "sel", "--clear", "--yes", *direct(bmc)).exit_code == 0


def test_a_node_in_service_is_not_power_cycled_without_force(bmc: str, tmp_path: Path, repo_dir: Path) -> None:
    inv = load_inventory(repo_dir / "examples" / "site-h100-2rack.yaml")
    nodes = [n.model_copy(update={"bmc": n.bmc.model_copy(update={"address": bmc})}) if n.name == "r01-n01" else n
             for n in inv.nodes]
    store = Store(f"sqlite:///{tmp_path / 'racklife.sqlite'}")
    try:
        store.import_inventory(inv.model_copy(update={"nodes": nodes}))
        for e in ("inspect", "inspect_done", "provision", "provision_done", "burn_in", "accept"):
            store.transition("r01-n01", e, Actor.WORKFLOW, f"test {e}")
        now = datetime.now(UTC)
        rec = AcceptanceRecord("acc-r01-n01", "r01-n01", True, "quick", "h100-sxm-8", now, now + timedelta(days=30),
                               "policy:test", None, {}, None, None)
        store.add_acceptance_record(rec)
        store.transition("r01-n01", "join", Actor.WORKFLOW, "join", acceptance_record=rec.id)
        store.transition("r01-n01", "join_done", Actor.WORKFLOW, "joined")
    finally:
        store.close()
    refused = run(tmp_path, "power", "cycle", *direct(bmc), "--yes", "--json")
    assert refused.exit_code == 5, refused.output
    err = json.loads(refused.stdout)["error"]
    assert "r01-n01 (in_service)" in err["message"] and "--force" in err["hint"]
    assert power(tmp_path, bmc) == "on"
    # Asking is no reason to refuse: status and a dry run still answer.
    assert run(tmp_path, "power", "status", *direct(bmc)).exit_code == 0
    # --force is no longer "straight to the BMC": it is the power workflow (leave, act, rejoin: the lab test
    # tests/e2e/test_refresh_lab.py runs it against Slurm), planned here by its dry run.
    forced = run(tmp_path, "power", "off", *direct(bmc), "--force", "--dry-run", "--policy", "requeue", "--json")
    assert forced.exit_code == 0, forced.output
    plan = json.loads(forced.stdout)
    assert plan["action"] == "power off in service, through a workflow" and plan["targets"] == ["r01-n01"]
    assert "racklife's drain or cordon (policy requeue)" in plan["effects"][0]
    assert power(tmp_path, bmc) == "on"
    bad = run(tmp_path, "power", "off", *direct(bmc), "--force", "--yes", "--policy", "yank", "--json")
    said = " ".join(bad.output.replace("│", " ").split())  # the usage error's box, unwrapped
    assert bad.exit_code == 2 and "Invalid value for '--policy'" in said and "'wait', 'requeue'." in said, said
    assert power(tmp_path, bmc) == "on"

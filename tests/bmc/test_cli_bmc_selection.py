"""`racklife bmc …` names nodes the one way: names, hostlists, --rack, --pool, --all, --selector, from the store.

Before, a bmc command talked to one BMC named by `--node NAME --inventory FILE`
(or `--address`); `bmc power status 'r01-n[01-02]'` was a usage error. Here
three nodes of the example inventory are imported into a store: two with BMCs
the Redfish emulator serves (captured trees) and one whose BMC does not answer
(a closed loopback port), so a selection's outcome is one per node, and the
exit code is docs/output.md's for several nodes. The CLI is the real one.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner, Result

from lifecycle.cli import app
from lifecycle.lab.redfish_emulator import RedfishEmulator
from lifecycle.model.inventory import load_inventory
from lifecycle.store import Store
from tests.bmc.conftest import PASSWORD, USER, bmc_config

ENV = "RACKLIFE_TEST_SELECT_BMC"
TREES = {"r01-n01": "dmtf-public-rackmount1", "r01-n02": "openbmc-stock"}
DEAD = "r01-n03"


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def site(redfish_dir: Path, repo_dir: Path, tmp_path: Path) -> Iterator[tuple[RedfishEmulator, Path]]:
    """A store holding r01-n01..03 (their BMCs on loopback only); yields the emulator and the store's URL dir."""
    configs = [bmc_config(tree, redfish_dir / tree) for tree in TREES.values()]
    with RedfishEmulator(configs) as emu:
        data = yaml.safe_load((repo_dir / "examples" / "site-h100-2rack.yaml").read_text())
        data["nodes"] = [n for n in data["nodes"] if n["name"] in (*TREES, DEAD)]
        for node in data["nodes"]:
            address = emu.urls[TREES[node["name"]]] if node["name"] in TREES else f"http://127.0.0.1:{_closed_port()}"
            node["bmc"] = {"driver": "redfish", "address": address, "credentials": f"env:{ENV}", "verify_tls": False}
        inventory = tmp_path / "inventory.yaml"
        inventory.write_text(yaml.safe_dump(data), encoding="utf-8")
        store = Store(f"sqlite:///{tmp_path / 'racklife.sqlite'}")
        try:
            store.import_inventory(load_inventory(inventory))
        finally:
            store.close()
        yield emu, tmp_path


def run(home: Path, *args: str) -> Result:
    result = CliRunner().invoke(app, ["bmc", *args], env={
        ENV: f"{USER}:{PASSWORD}", "RACKLIFE_DB": f"sqlite:///{home / 'racklife.sqlite'}",
        "RACKLIFE_INVENTORY": None})
    for text in (result.stdout, result.stderr):
        assert PASSWORD not in text
    return result


def test_a_hostlist_and_a_rack_read_each_node(site: tuple[RedfishEmulator, Path]) -> None:
    _, home = site
    both = run(home, "power", "status", "r01-n[01-02]", "--json")
    assert both.exit_code == 0, both.output
    assert json.loads(both.stdout) == [{"bmc": "r01-n01", "power": "on"}, {"bmc": "r01-n02", "power": "off"}]
    # One BMC that does not answer is that node's outcome, not the command's end: exit 1, the others read.
    rack = run(home, "power", "status", "--rack", "r01", "--json")
    assert rack.exit_code == 1, rack.output
    out = {d["bmc"]: d for d in json.loads(rack.stdout)}
    assert (out["r01-n01"]["power"], out["r01-n02"]["power"]) == ("on", "off")
    assert out[DEAD]["error"]["code"] == "unreachable" and out[DEAD]["error"]["exit_code"] == 3
    table = run(home, "sensors", "--selector", "rack=r01,pool=training")
    assert table.exit_code == 1 and "r01-n01:\n" in table.stdout and f"{DEAD}: UNREACHABLE" in table.stdout
    # One node alone keeps the one-node document and its own exit code.
    assert json.loads(run(home, "inventory", "r01-n02", "--json").stdout)["bmc"] == "r01-n02"
    assert run(home, "power", "status", DEAD).exit_code == 3
    # The deprecated --node still names one node.
    assert json.loads(run(home, "power", "status", "--node", "r01-n01", "--json").stdout)["power"] == "on"
    listed = run(home, "firmware", "list", "r01-n01", "r01-n02", "--json")
    assert listed.exit_code == 0, listed.output
    assert [d["node"] for d in json.loads(listed.stdout)] == ["r01-n01", "r01-n02"]


@pytest.mark.parametrize(("args", "words"), [
    (["power", "status", "r09-n01"], "unknown node(s): r09-n01"),
    (["power", "status", "--pool", "gaming"], "pools in the store: training"),
    (["sel", "--rack", "r01", "--all"], "name the nodes one way"),
    (["power", "status"], "name the BMCs"),
    (["power", "status", "r01-n01", "--address", "http://127.0.0.1:1"], "not both"),
    (["bios", "set", "r01-n01"], "KEY=VALUE"),
])
def test_an_unknown_or_doubled_selection_is_exit_2(site: tuple[RedfishEmulator, Path], args: list[str],
                                                   words: str) -> None:
    _, home = site
    result = run(home, *args, "--json")
    assert result.exit_code == 2, result.output
    assert words in json.loads(result.stdout)["error"]["message"]


def test_a_power_change_on_several_nodes_asks_once_and_reports_each(site: tuple[RedfishEmulator, Path]) -> None:
    _, home = site
    dry = run(home, "power", "off", "r01-n[01-02]", "--dry-run", "--json")
    assert dry.exit_code == 0, dry.output
    assert json.loads(dry.stdout) == {"dry_run": True, "action": "power off", "targets": ["r01-n01", "r01-n02"],
                                      "effects": ["r01-n01: power is on now",
                                                  "r01-n02: power is off now: nothing to do"]}
    assert run(home, "power", "off", "r01-n[01-02]", "--json").exit_code == 5  # no terminal, no --yes
    off = run(home, "power", "off", "r01-n[01-02]", "--yes", "--json")
    assert off.exit_code == 0, off.output
    assert [(d["bmc"], d["changed"]) for d in json.loads(off.stdout)] == [("r01-n01", True), ("r01-n02", False)]
    status = json.loads(run(home, "power", "status", "r01-n01", "r01-n02", "--json").stdout)
    assert {d["power"] for d in status} <= {"off", "powering_off"}

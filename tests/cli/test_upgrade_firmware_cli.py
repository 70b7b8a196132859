"""`racklife upgrade --firmware FILE --component C` and `--bios KEY=VALUE`: bad input is exit 2;
a dry run leaves a node whose BMC cannot take the change (IPMI) out, with the reason.

No lab: the example inventory imported, two nodes set in service in the store. No BMC is
contacted (a firmware change without --firmware-version needs no read to plan; the IPMI node
is left out from its inventory entry).
"""

from __future__ import annotations

import json
from pathlib import Path

import sqlalchemy as sa

from lifecycle.lab.redfish_emulator.update_service import make_image
from lifecycle.store import Store
from lifecycle.store import db as dbm
from tests.cli.test_roleswap_cli import EXAMPLE, racklife

REDFISH_NODE, IPMI_NODE = "r01-n01", "r01-n08"


def _in_service(home: Path) -> None:
    store = Store(f"sqlite:///{home / 'racklife.sqlite'}")
    try:
        with store.engine.begin() as conn:
            conn.execute(sa.update(dbm.nodes).values(state="in_service"))  # every node: the pools have room
    finally:
        store.close()


def test_bad_firmware_and_bios_requests_are_exit_2(tmp_path: Path) -> None:
    assert racklife(tmp_path, "inventory", "import", str(EXAMPLE)).returncode == 0
    image = make_image(tmp_path / "fw.tar", "BMC", "2")
    base = ["upgrade", "--nodes", REDFISH_NODE]
    cases = [
        ([*base, "--firmware", str(image)], "--firmware needs --component"),
        ([*base, "--firmware", str(tmp_path / "nope.tar"), "--component", "BMC"], "no such file"),
        ([*base, "--component", "BMC", "--image", "minimal:2"], "go with --firmware"),
        ([*base, "--image", "minimal:2", "--bios", "A=1"], "exactly one change"),
        ([*base, "--bios", "NoEquals"], "expected KEY=VALUE"),
        ([*base, "--bios", "A=1", "--bios", "A=2"], "each KEY once"),
    ]
    for args, needle in cases:
        res = racklife(tmp_path, *args)
        text = " ".join(res.stderr.split())
        assert res.returncode == 2 and needle in text and "Traceback" not in text, (args, res.stderr)


def test_a_dry_run_leaves_the_ipmi_node_out_with_the_reason(tmp_path: Path) -> None:
    assert racklife(tmp_path, "inventory", "import", str(EXAMPLE)).returncode == 0
    _in_service(tmp_path)
    image = make_image(tmp_path / "fw.tar", "BMC", "2")
    res = racklife(tmp_path, "upgrade", "--nodes", f"{REDFISH_NODE},{IPMI_NODE}", "--firmware", str(image),
                   "--component", "BMC", "--canary", "0", "--dry-run", "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    doc = json.loads(res.stdout)
    assert doc["change"] == "firmware BMC" and doc["batches"] == [[REDFISH_NODE]]
    assert doc["skipped"] == {IPMI_NODE: "a firmware update needs a BMC with the firmware interface; the ipmi "
                                         "driver offers boot, inventory, power (use Redfish for this node)"}
    bios = racklife(tmp_path, "upgrade", "--nodes", IPMI_NODE, "--bios", "SriovGlobalEnable=Enabled",
                    "--dry-run", "--json")
    assert bios.returncode == 0, bios.stdout + bios.stderr
    assert json.loads(bios.stdout)["skipped"][IPMI_NODE].startswith("a BIOS change needs a BMC with the bios")

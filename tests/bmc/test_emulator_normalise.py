"""The emulator's load-time normalisation: what it changes, what it must leave alone.

The DMTF validator (``test_emulator_validator.py``) proves the normalised trees
conform; these fast tests prove the normalisation is the documented one: every
table entry still matches the capture, no link dangles, the data the driver's
vendor quirks and the inventory tests read is untouched, and a tree served
``as_captured`` still shows the driver real vendor breakage.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from lifecycle.drivers.bmc.redfish import RedfishDriver
from lifecycle.lab.redfish_emulator import BmcConfig, RedfishEmulator
from lifecycle.lab.redfish_emulator.normalise import (
    Convert,
    CopyFrom,
    Default,
    Drop,
    Fix,
    Relocate,
    Rename,
    Set,
    normalise,
)
from lifecycle.lab.redfish_emulator.tree import VendorTree, load_tree, norm
from lifecycle.lab.redfish_emulator.vendor_fixes import TABLES
from tests.bmc.conftest import PASSWORD, USER, VENDOR_TREES

MakeDriver = Callable[..., RedfishDriver]


def _links(node: Any) -> Iterator[str]:
    """Navigation links (objects that are only an @odata.id) and link-valued annotations."""
    if isinstance(node, dict):
        if set(node) == {"@odata.id"} and isinstance(node["@odata.id"], str):
            yield node["@odata.id"]
        for name, value in node.items():
            if name in {"@Redfish.ActionInfo", "DataSourceUri"} and isinstance(value, str):
                yield value
            else:
                yield from _links(value)
    elif isinstance(node, list):
        for item in node:
            yield from _links(item)


def _captured(redfish_dir: Path, tree: str, path: str) -> Any:
    return json.loads((redfish_dir / tree / path.lstrip("/") / "index.json").read_text())


def test_every_tree_has_a_table_and_every_entry_still_matches(redfish_dir: Path) -> None:
    assert set(TABLES) == set(VENDOR_TREES)
    for name in VENDOR_TREES:
        tree = load_tree(redfish_dir / name)
        assert tree.normalisation is not None
        assert tree.normalisation.unused == [], name
        for entry in TABLES[name]:
            assert entry.captured and entry.why, entry


@pytest.mark.parametrize("name", VENDOR_TREES)
def test_no_local_link_dangles_in_a_normalised_tree(redfish_dir: Path, name: str) -> None:
    tree = load_tree(redfish_dir / name)
    live = {"/redfish/v1/sessionservice/sessions"}  # served from the emulator's sessions
    dangling = {(path, link) for path, res in tree.resources.items()
                for link in _links(res) if link.startswith("/") and "#" not in link
                and norm(link) not in tree.resources and norm(link) not in tree.raw_files
                and norm(link) not in live and not norm(link).endswith("/entries")}
    assert dangling == set()


def test_captured_trees_really_need_it(redfish_dir: Path) -> None:
    """Served as captured, the same trees link what they do not hold."""
    raw = VendorTree.load(redfish_dir / "dell-idrac-bmclib", normalised=False)
    assert raw.normalisation is None
    system = raw.resources[norm("/redfish/v1/Systems/System.Embedded.1")]
    assert system["Processors"] == {"@odata.id": "/redfish/v1/Systems/System.Embedded.1/Processors"}
    assert norm(system["Processors"]["@odata.id"]) not in raw.resources
    fixed = load_tree(redfish_dir / "dell-idrac-bmclib")
    assert "Processors" not in fixed.resources[norm("/redfish/v1/Systems/System.Embedded.1")]
    assert fixed.normalisation is not None
    assert len(fixed.normalisation.pruned) > 100  # 32 PCIe devices and their functions, …


def test_data_the_driver_quirks_and_inventory_read_is_kept(redfish_dir: Path) -> None:
    dell = load_tree(redfish_dir / "dell-idrac-bmclib")
    system = dell.resources[norm("/redfish/v1/Systems/System.Embedded.1")]
    assert system["SerialNumber"] == "CNCMU0005400IJ"
    assert system["MemorySummary"]["TotalSystemMemoryGiB"] == 64
    assert "VirtualMedia" not in system  # unlinked, and still served
    assert norm("/redfish/v1/Systems/System.Embedded.1/VirtualMedia") in dell.resources
    assert norm("/redfish/v1/Managers/iDRAC.Embedded.1/LogServices/Sel") in dell.resources

    hpe = load_tree(redfish_dir / "hpe-ilo5-dl325")
    system = hpe.resources[norm("/redfish/v1/Systems/1")]
    assert system["Oem"]["Hpe"]["Links"]["PCIDevices"] == \
        _captured(redfish_dir, "hpe-ilo5-dl325", "redfish/v1/Systems/1")["Oem"]["Hpe"]["Links"][
            "PCIDevices"]
    assert hpe.resources[norm("/redfish/v1/Systems/1/PCIDevices/2")]["ClassCode"] == 3
    bios = hpe.resources[norm("/redfish/v1/Systems/1/Bios")]
    assert system["Bios"] == {"@odata.id": "/redfish/v1/Systems/1/Bios"}
    assert bios["@Redfish.Settings"]["SettingsObject"]["@odata.id"] == \
        "/redfish/v1/systems/1/bios/settings/"  # iLO's lowercase path, answered as iLO does
    nic = hpe.resources[norm("/redfish/v1/Systems/1/EthernetInterfaces/1")]
    assert (nic["MACAddress"], nic["SpeedMbps"], nic["IPv4Addresses"]) == \
        ("94:40:c9:5c:86:bc", 25000, [])
    function = hpe.resources[norm("/redfish/v1/Chassis/1/PCIeDevices/137/PCIeFunctions/1")]
    assert (function["VendorId"], function["DeviceId"], function["ClassCode"]) == \
        ("0x102b", "0x0538", "0x030000")
    assert "RevisionId" not in function
    assert norm("/redfish/v1/Systems/1/LogServices/IML") in hpe.resources
    assert norm("/redfish/v1/Managers/1/LogServices/IEL") in hpe.resources

    dmtf = load_tree(redfish_dir / "dmtf-public-rackmount1")
    roles = [dmtf.resources[norm(f"/redfish/v1/AccountService/Roles/{r}")]["RoleId"]
             for r in ("Administrator", "Operator", "ReadOnly")]
    assert roles == ["Administrator", "Operator", "ReadOnly"]
    subscription = dmtf.resources[norm("/redfish/v1/EventService/Subscriptions/2")]
    assert subscription["SubscriptionType"] == "SNMPInform"  # as captured


def test_the_captured_files_are_never_written(redfish_dir: Path) -> None:
    before = (redfish_dir / "hpe-ilo5-dl325/redfish/v1/Chassis/1/PCIeDevices/137/PCIeFunctions/1"
              / "index.json").read_bytes()
    VendorTree.load(redfish_dir / "hpe-ilo5-dl325")
    after = (redfish_dir / "hpe-ilo5-dl325/redfish/v1/Chassis/1/PCIeDevices/137/PCIeFunctions/1"
             / "index.json").read_bytes()
    assert before == after and b'"VendorId": "4139"' in after


def test_an_as_captured_bmc_still_shows_the_driver_dangling_links(
        redfish_dir: Path, make_driver: MakeDriver) -> None:
    """The driver reads a link the BMC advertises but answers 404 for as absent."""
    config = BmcConfig(name="raw", tree=redfish_dir / "dell-idrac-bmclib", username=USER,
                       password=PASSWORD, as_captured=True)
    with RedfishEmulator([config]) as emu:
        inv = make_driver(emu.urls["raw"]).inventory()
        requests = emu.call(lambda: dict(emu.states["raw"].requests))
    assert inv.system.serial == "CNCMU0005400IJ"
    assert inv.cpus == [] and inv.nics == [] and inv.drives == [] and inv.firmware == []
    assert any(path.lower().endswith("/system.embedded.1/processors")
               for (_method, path) in requests)  # asked, got 404, carried on


def test_changes_and_their_bookkeeping() -> None:
    resources: dict[str, dict[str, Any]] = {
        "/redfish/v1": {"@odata.id": "/redfish/v1", "Systems": {"@odata.id": "/redfish/v1/Systems"},
                        "Gone": {"@odata.id": "/redfish/v1/Gone"}},
        "/redfish/v1/systems": {"@odata.id": "/redfish/v1/Systems",
                                "Members": [{"@odata.id": "/redfish/v1/Systems/1"},
                                            {"@odata.id": "/redfish/v1/Systems/2"}],
                                "Members@odata.count": 2},
        "/redfish/v1/systems/1": {"@odata.id": "/redfish/v1/Systems/1", "Id": "x", "Name": None,
                                  "Typo": 1, "Vendor": "4139", "Bad": True,
                                  "Old": {"@odata.id": "/redfish/v1/systems/1/old/"},
                                  "Keep": "kept", "List": [{"A": "1"}, {"A": "2"}]},
        "/redfish/v1/systems/1/old": {"@odata.id": "/redfish/v1/systems/1/old/"},
        "/redfish/v1/error": {"error": {"code": "Base.1.0.GeneralError"}},
    }
    table = (
        Fix("/redfish/v1/Systems/*", "Id", Set("1"), captured="x", why="uri"),
        Fix("/redfish/v1/Systems/*", "Name", CopyFrom("Id"), captured="null", why="req"),
        Fix("/redfish/v1/Systems/*", "Keep", Default("other"), captured="-", why="-"),
        Fix("/redfish/v1/Systems/*", "Typo", Rename("Fixed"), captured="typo", why="-"),
        Fix("/redfish/v1/Systems/*", "Vendor", Convert(lambda v: hex(int(v)), "hex"),
            captured="dec", why="-"),
        Fix("/redfish/v1/Systems/*", "Bad", Drop(), captured="-", why="-"),
        Fix("/redfish/v1/Systems/*", "List/*/A", Set("z"), captured="-", why="-"),
        Fix("/redfish/v1/Nowhere", "Id", Drop(), captured="-", why="-"),
        Relocate("/redfish/v1/systems/1/old", "/redfish/v1/Systems/1/New", captured="-",
                 why="-"),
    )
    report = normalise("t", resources, table, lambda key: False)
    system = resources["/redfish/v1/systems/1"]
    assert system == {"@odata.id": "/redfish/v1/Systems/1", "Id": "1", "Name": "1",
                      "Fixed": 1, "Vendor": "0x102b", "Keep": "kept",
                      "Old": {"@odata.id": "/redfish/v1/Systems/1/New"},
                      "List": [{"A": "z"}, {"A": "z"}]}
    assert "/redfish/v1/systems/1/new" in resources and "/redfish/v1/systems/1/old" not in \
        resources
    assert resources["/redfish/v1/systems"]["Members"] == [{"@odata.id": "/redfish/v1/Systems/1"}]
    assert resources["/redfish/v1/systems"]["Members@odata.count"] == 1
    assert "Gone" not in resources["/redfish/v1"]
    assert report.error_bodies == ["/redfish/v1/error"]
    # Default left "kept" alone, and nothing lives at /redfish/v1/Nowhere: both unused.
    assert [e.where for e in report.unused if isinstance(e, Fix)] == [
        "/redfish/v1/Systems/*", "/redfish/v1/Nowhere"]
    assert {target for _, _, target in report.pruned} == {"/redfish/v1/Gone",
                                                          "/redfish/v1/Systems/2"}


def test_docs_list_every_table_entry(repo_dir: Path) -> None:
    """docs/redfish.md shows the tables; an entry added or changed here must show there."""
    docs = (repo_dir / "docs" / "redfish.md").read_text(encoding="utf-8")
    missing = [(name, entry.captured) for name, table in TABLES.items() for entry in table
               if entry.captured not in docs or entry.why not in docs]
    assert missing == []

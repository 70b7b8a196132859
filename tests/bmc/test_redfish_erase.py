"""Secure erase through Redfish against the emulator (a real HTTP peer) on every captured vendor tree.

Each tree gets two synthetic NVMe drives; ``RedfishErase`` posts
``Drive.SecureErase``, follows the Task the emulator answers with (202, a
TaskMonitor, tasks finishing after three polls) and reads the Task and the
Drive back. A task that fails, and an erase the BMC calls done but whose drive
reads back degraded, are unverified erases: ``ok`` is false and the problem is
named, never raised past the caller.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from lifecycle.drivers.bmc.base import Credentials, EraseInterface, TaskProgress, require
from lifecycle.drivers.bmc.ipmi import IpmiDriver
from lifecycle.drivers.bmc.redfish_erase import read_back
from lifecycle.drivers.errors import NotSupported
from lifecycle.lab.redfish_emulator import ExtraHardware, RedfishEmulator
from tests.bmc.conftest import VENDOR_TREES, DriverFactory, bmc_config


@pytest.fixture
def drives_emulator(redfish_dir: Path) -> Iterator[RedfishEmulator]:
    bmcs = [bmc_config(name, redfish_dir / name, task_polls=3, hardware=ExtraHardware(drives=2))
            for name in VENDOR_TREES]
    with RedfishEmulator(bmcs) as emu:
        yield emu


@pytest.mark.parametrize("tree", VENDOR_TREES)
def test_every_drive_is_erased_and_read_back_on_every_tree(drives_emulator: RedfishEmulator,
                                                          make_driver: DriverFactory, tree: str) -> None:
    drv = make_driver(drives_emulator.urls[tree])
    eraser = drv
    found = eraser.drives()
    drives = [d for d in found if d.id in ("0", "1")]
    assert len(drives) == 2 and all(d.serial for d in drives)
    # The DMTF mockup also lists SATA bays under SimpleStorage: drives with no Drive resource, so no
    # SecureErase. They are drives of the system all the same: listed, and refused when asked to erase.
    for other in [d for d in found if d not in drives]:
        assert tree == "dmtf-public-rackmount1"
        with pytest.raises(NotSupported):
            eraser.erase_drive(other.id)
    seen: list[TaskProgress] = []
    results = [eraser.erase_drive(d.id, progress=seen.append) for d in drives]
    assert all(r.ok and r.verified and r.task_state == "Completed" for r in results), results
    assert "Task /redfish/v1/TaskService/Tasks/" in results[0].verification
    assert "Status Enabled/OK" in results[0].verification and "Operations pending: none" in results[0].verification
    assert [p.percent for p in seen][:4] == [0, 33, 66, 100]
    # The TaskService is linked from the root on every tree (the iDRAC capture has none of its own).
    tasks = drv.transport.get(drv.transport.root["Tasks"]["@odata.id"])
    assert tasks["Tasks"]["@odata.id"] == "/redfish/v1/TaskService/Tasks"
    listed = drv.transport.get("/redfish/v1/TaskService/Tasks")
    assert {m["@odata.id"] for m in listed["Members"]} >= {f"/redfish/v1/TaskService/Tasks/{r.task_id}"
                                                            for r in results}


def test_a_drive_under_erase_lists_the_sanitize_until_its_task_ends(drives_emulator: RedfishEmulator,
                                                                   make_driver: DriverFactory) -> None:
    drv = make_driver(drives_emulator.urls["openbmc-stock"])
    drive = "/redfish/v1/Systems/system/Storage/NVMe/Drives/0"
    reply = drv.transport.request("POST", f"{drive}/Actions/Drive.SecureErase", {})
    assert reply.status == 202
    during = drv.transport.get(drive)
    assert during["Status"]["State"] == "Updating" and during["Operations"][0]["Operation"] == "Sanitize"
    ok, words = read_back(during, None)
    assert not ok and "Operations pending: Sanitize" in words
    monitor = reply.headers["location"]
    for _ in range(3):
        drv.transport.request("GET", monitor)
    after = drv.transport.get(drive)
    assert after["Operations"] == [] and after["Status"] == {"State": "Enabled", "Health": "OK"}


@pytest.mark.parametrize(("fault", "state", "needle"), [
    ({"fail_tasks": True}, "Exception", "ended Exception"),
    ({"erase_leaves_data": True}, "Completed", "Status Enabled/Critical"),
])
def test_a_failed_or_unverified_erase_is_not_ok(drives_emulator: RedfishEmulator, make_driver: DriverFactory,
                                                fault: dict[str, bool], state: str, needle: str) -> None:
    drives_emulator.set_fault("dell-idrac-bmclib", **fault)
    result = make_driver(drives_emulator.urls["dell-idrac-bmclib"]).erase_drive("0")
    assert not result.ok and not result.verified and result.task_state == state
    assert any(needle in p for p in result.problems), result.problems


def test_a_tree_without_drives_reports_none(emulator: RedfishEmulator, make_driver: DriverFactory) -> None:
    eraser = make_driver(emulator.urls["openbmc-stock"])
    assert eraser.drives() == []
    with pytest.raises(NotSupported):
        eraser.erase_drive("0")


def test_ipmi_has_no_erase_interface() -> None:
    with pytest.raises(NotSupported, match="erase"):
        require(IpmiDriver("127.0.0.1:1", Credentials("u", "p")), EraseInterface)  # type: ignore[type-abstract]


def test_reset_to_defaults_where_the_manager_offers_it(emulator: RedfishEmulator, make_driver: DriverFactory) -> None:
    from lifecycle.drivers.bmc.redfish_reset import reset_support, reset_to_defaults

    openbmc = make_driver(emulator.urls["openbmc-stock"])
    assert reset_support(openbmc) == ""
    assert reset_to_defaults(openbmc) == "/redfish/v1/Managers/bmc: ResetToDefaults ResetAll"
    assert any("reset to defaults (ResetAll)" in e.message for e in openbmc.event_log())
    dell = make_driver(emulator.urls["dell-idrac-bmclib"])
    assert "offers no Manager.ResetToDefaults" in reset_support(dell)
    with pytest.raises(NotSupported):
        reset_to_defaults(dell)


@pytest.mark.parametrize(("fault", "seen"), [({}, [("EMUNVME0000", True)]),
                                             ({"fail_tasks": True}, [("EMUNVME0000", False)]),
                                             ({"erase_not_done": True}, [])])
def test_the_drive_hears_of_an_erase_only_when_the_bmc_sent_it(redfish_dir: Path, make_driver: DriverFactory,
                                                               fault: dict[str, bool],
                                                               seen: list[tuple[str, bool]]) -> None:
    """``on_erase`` is the drive's side of the erase (the lab writes its Sanitize Status log from it): a BMC
    that lies (``erase_not_done``) reports the erase Completed and healthy, and the drive never heard of it."""
    heard: list[tuple[str, bool]] = []
    cfg = bmc_config("dell-idrac-bmclib", redfish_dir / "dell-idrac-bmclib", task_polls=3,
                     hardware=ExtraHardware(drives=1))
    with RedfishEmulator([cfg], on_erase=lambda _bmc, serial, ok: heard.append((serial, ok))) as emu:
        emu.set_fault("dell-idrac-bmclib", **fault)
        result = make_driver(emu.urls["dell-idrac-bmclib"]).erase_drive("0")
    assert result.ok is (not fault.get("fail_tasks")) and heard == seen, (result, heard)

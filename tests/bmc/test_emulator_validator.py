"""DMTF conformance: redfish-service-validator against the emulator, schemas from shared/.

The validator walks every resource reachable from the service root, including
what the emulator builds itself (sessions, tasks, log entries, added GPUs and
drives, a synthetic FirmwareInventory and Bios settings) after the BMC has done some work
(power off and on, a boot override, a firmware update, a staged BIOS change, an
erase Task where there is a drive), and must report zero failures, for every
captured vendor tree. The trees are served normalised (``vendor_fixes.py``):
the captures as they are fail 52 to 216 checks each. The schemas come from
``shared/redfish-schemas``; nothing is fetched. On failure the assertion message
is the validator's report: its summary and every FAIL line, by resource.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from lifecycle.drivers.bmc.base import BootDevice, PowerAction
from lifecycle.drivers.bmc.firmware import update_firmware
from lifecycle.drivers.bmc.redfish import RedfishDriver
from lifecycle.drivers.boot.image_serve import serve_image
from lifecycle.lab.redfish_emulator import BmcConfig, ExtraHardware, RedfishEmulator
from lifecycle.lab.redfish_emulator.update_service import make_image

MakeDriver = Callable[..., RedfishDriver]
USER, PASSWORD = "racklife", "emulator-S3cret!"
SUMMARY = re.compile(r"\|\s+(\d+)\s+\|\s+(\d+)\s+\|\s+(\d+)\s+\|\s+(\d+)\s+\|")


@dataclass(frozen=True)
class Case:
    """One tree under the validator: the resources it must have reached (what the driver's
    tests read, and what the emulator generated), so that a normalisation that cut the tree
    down cannot pass unnoticed, and a floor on how many it validated."""

    must_reach: tuple[str, ...]
    at_least: int
    hardware: ExtraHardware = field(default_factory=ExtraHardware)
    live_prefixes: tuple[str, ...] = ()  # generated at run time: something under each


CASES: dict[str, Case] = {
    "dell-idrac-bmclib": Case(("/redfish/v1/Systems/System.Embedded.1",
                               "/redfish/v1/Systems/System.Embedded.1/Bios",
                               "/redfish/v1/Managers/iDRAC.Embedded.1/LogServices/Sel/Entries/1",
                               "/redfish/v1/UpdateService",
                               "/redfish/v1/UpdateService/FirmwareInventory/BMC",
                               # The capture has no TaskService: the emulator's own, and a drive mid-erase.
                               "/redfish/v1/TaskService",
                               "/redfish/v1/Systems/System.Embedded.1/Storage/NVMe/Drives/1"), 12,
                              ExtraHardware(drives=2), ("/redfish/v1/TaskService/Tasks/",)),
    # Synthetic GPUs in the PCIeDevices shape (a display-class PCIeFunction).
    "dmtf-public-rackmount1": Case(
        ("/redfish/v1/Systems/437XR1138R2/Processors/CPU1",
         "/redfish/v1/Systems/437XR1138R2/PCIeDevices/GPU1/PCIeFunctions/0",
         "/redfish/v1/Systems/437XR1138R2/EthernetInterfaces/12446A3B0411",
         "/redfish/v1/Chassis/1U/Sensors/PS1Out3V",
         "/redfish/v1/UpdateService/FirmwareInventory/BIOS"), 200,
        ExtraHardware(gpus=2, gpu_source="pcie")),
    "hpe-ilo5-dl325": Case(("/redfish/v1/Systems/1/EthernetInterfaces/1",
                            "/redfish/v1/Systems/1/Bios",
                            "/redfish/v1/Chassis/1/Thermal",
                            "/redfish/v1/Managers/1/SerialInterfaces/1"), 200),
    # An HGX-like node: GPUs as Processors, a drive erased by a Task, event log entries.
    "openbmc-stock": Case(
        ("/redfish/v1/Systems/system/Processors/GPU0",
         "/redfish/v1/Systems/system/Storage/NVMe/Drives/0",
         "/redfish/v1/Systems/system/LogServices/EventLog/Entries",
         "/redfish/v1/Systems/system/Bios",
         "/redfish/v1/UpdateService/FirmwareInventory/5d0869c4"), 30,
        ExtraHardware(gpus=2, gpu_source="processors", drives=1),
        ("/redfish/v1/SessionService/Sessions/", "/redfish/v1/TaskService/Tasks/",
         "/redfish/v1/Systems/system/LogServices/EventLog/Entries/")),
}


def validate(url: str, schemas: Path, logdir: Path) -> tuple[str, str]:
    """Run the validator; return (its stdout, its debug log)."""
    validator = Path(sys.executable).with_name("rf_service_validator")
    assert validator.is_file(), "pip install redfish-service-validator"
    result = subprocess.run(
        [str(validator), "--rhost", url, "--user", USER, "--password", PASSWORD,
         "--authtype", "Session", "--schema_directory", str(schemas), "--skipschema",
         "--logdir", str(logdir), "--timeout", "10"],
        capture_output=True, text=True, timeout=600, check=False)
    logs = sorted(logdir.rglob("RedfishServiceValidatorDebug*.log"))
    assert logs, result.stdout + result.stderr
    return result.stdout, logs[-1].read_text(encoding="utf-8")


def failures_by_uri(debug_log: str) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    current = "?"
    for line in debug_log.splitlines():
        validating = re.search(r" - Validating (\S+?)\.\.\.$", line)
        if validating:
            current = validating.group(1)
        elif " - FAIL - " in line:
            found.setdefault(current, []).append(line.split(" - FAIL - ", 1)[1])
    return found


def validated_uris(debug_log: str) -> set[str]:
    return set(re.findall(r" - Validating (\S+?)\.\.\.$", debug_log, re.MULTILINE))


def report(stdout: str, failures: dict[str, list[str]], logdir: Path) -> str:
    """The validator's findings, for an assertion message."""
    summary = SUMMARY.search(stdout)
    lines = [f"validator summary (pass, warn, fail, not tested): "
             f"{summary.groups() if summary else stdout[-1500:]}",
             f"full reports (HTML, debug log) under {logdir}"]
    for uri, fails in sorted(failures.items()):
        lines.append(uri)
        lines.extend(f"    FAIL {f}" for f in fails)
    return "\n".join(lines)


def test_report_lists_every_failure_by_resource() -> None:
    log = ("x - Validating /redfish/v1/A...\n"
           "x - FAIL - /Id (1): Invalid Identifier Error\n"
           "x - Validating /redfish/v1/B...\n"
           "x - PASS - fine\n"
           "x - Validating /redfish/v1/C...\n"
           "x - FAIL - /Name ([Not Present]): Required Property Error\n"
           "x - FAIL - /Id ([Not Present]): Required Property Error\n")
    failures = failures_by_uri(log)
    assert failures == {"/redfish/v1/A": ["/Id (1): Invalid Identifier Error"],
                        "/redfish/v1/C": ["/Name ([Not Present]): Required Property Error",
                                          "/Id ([Not Present]): Required Property Error"]}
    text = report("|  10  |  2  |  3  |  4  |", failures, Path("/tmp/x"))
    assert "('10', '2', '3', '4')" in text and "    FAIL /Id (1)" in text
    assert validated_uris(log) == {"/redfish/v1/A", "/redfish/v1/B", "/redfish/v1/C"}


@pytest.mark.slow
@pytest.mark.parametrize("tree", sorted(CASES))
def test_every_vendor_tree_passes_the_dmtf_validator(
        tree: str, redfish_dir: Path, shared_dir: Path, tmp_path: Path,
        make_driver: MakeDriver) -> None:
    case = CASES[tree]
    config = BmcConfig(name=tree, tree=redfish_dir / tree, username=USER, password=PASSWORD,
                       task_polls=1, hardware=case.hardware)
    with RedfishEmulator([config]) as emu:
        drv = make_driver(emu.urls[tree])
        drv.power(PowerAction.OFF)  # log entries written by the emulator
        drv.power(PowerAction.ON)
        drv.set_boot(BootDevice.PXE)  # the system served from this BMC's own copy
        if case.hardware.drives:
            drv.secure_erase("0")  # a finished Task
        if case.hardware.drives > 1:  # an erase still running: the drive Updating, a Sanitize in Operations
            drive = next(d for d in drv.transport.get(f"{drv.system_path()}/Storage/NVMe")["Drives"]
                         if d["@odata.id"].endswith("/1"))["@odata.id"]
            assert drv.transport.request("POST", f"{drive}/Actions/Drive.SecureErase", {}).status == 202
        # A firmware update (FirmwareInventory changed by a Task) and a BIOS change staged.
        component = drv.firmware_inventory()[0]
        update_firmware(drv, component.name, make_image(tmp_path / "fw.tar", "BMC", "9.9.9"),
                        serve=serve_image)
        name, value = next(iter(drv.bios_attributes().items()))
        drv.set_bios_attributes({name: f"{value}x" if isinstance(value, str) else value})
        stdout, debug_log = validate(emu.urls[tree], shared_dir / "redfish-schemas", tmp_path)
    failures = failures_by_uri(debug_log)
    assert failures == {}, report(stdout, failures, tmp_path)
    summary = SUMMARY.search(stdout)
    assert summary is not None and summary.group(3) == "0", stdout[-2000:]
    validated = validated_uris(debug_log)
    assert [uri for uri in case.must_reach if uri not in validated] == []
    for prefix in case.live_prefixes:
        assert any(uri.startswith(prefix) for uri in validated), f"nothing under {prefix}"
    assert len(validated) >= case.at_least, f"only {len(validated)} resources validated"

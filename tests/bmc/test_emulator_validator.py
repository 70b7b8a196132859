"""DMTF conformance: redfish-service-validator against the emulator, schemas from shared/.

The validator walks every resource reachable from the service root, including
what the emulator builds itself (sessions, tasks, log entries, added GPUs and
drives) after the BMC has done some work, and must report zero failures.
The schemas come from ``shared/redfish-schemas``; nothing is fetched.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from lifecycle.drivers.bmc.base import BootDevice, PowerAction
from lifecycle.drivers.bmc.redfish import RedfishDriver
from lifecycle.lab.redfish_emulator import BmcConfig, ExtraHardware, RedfishEmulator

MakeDriver = Callable[..., RedfishDriver]
USER, PASSWORD = "racklife", "emulator-S3cret!"


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


@pytest.mark.slow
def test_openbmc_tree_with_live_state_passes_the_dmtf_validator(
        redfish_dir: Path, shared_dir: Path, tmp_path: Path, make_driver: MakeDriver) -> None:
    config = BmcConfig(name="hgx", tree=redfish_dir / "openbmc-stock", username=USER,
                       password=PASSWORD, task_polls=1,
                       hardware=ExtraHardware(gpus=2, gpu_source="processors", drives=1))
    with RedfishEmulator([config]) as emu:
        drv = make_driver(emu.urls["hgx"])
        drv.power(PowerAction.ON)  # log entries
        drv.set_boot(BootDevice.PXE)
        drv.secure_erase("0")  # a finished Task
        stdout, debug_log = validate(emu.urls["hgx"], shared_dir / "redfish-schemas", tmp_path)
    validated = set(re.findall(r" - Validating (\S+?)\.\.\.$", debug_log, re.MULTILINE))
    for generated in ("/redfish/v1/Systems/system/Processors/GPU0",
                      "/redfish/v1/Systems/system/Storage/NVMe/Drives/0",
                      "/redfish/v1/Systems/system/LogServices/EventLog/Entries"):
        assert generated in validated, f"the validator never reached {generated}"
    for prefix in ("/redfish/v1/SessionService/Sessions/", "/redfish/v1/TaskService/Tasks/",
                   "/redfish/v1/Systems/system/LogServices/EventLog/Entries/"):
        assert any(uri.startswith(prefix) for uri in validated), f"nothing under {prefix}"
    assert failures_by_uri(debug_log) == {}
    assert re.search(r"\|\s+\d+\s+\|\s+\d+\s+\|\s+0\s+\|", stdout), stdout[-2000:]

"""`racklife bmc …` end to end: the real CLI, the real drivers, emulated BMCs on loopback.

Checks exit codes (0 ok, 2 bad input, 3 unreachable, 4 auth failed, 5 refused) and that the
password never appears in anything printed.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from lifecycle.cli import app
from lifecycle.drivers.bmc.factory import driver_for, driver_from_args
from lifecycle.drivers.bmc.ipmi import IpmiDriver
from lifecycle.drivers.errors import AuthFailed
from lifecycle.model.inventory import BmcSpec
from tests.bmc.ipmi_fixtures import (  # noqa: F401 - fixtures
    PASSWORD,
    POWER_DELAY_S,
    BlackHole,
    Lab,
    black_hole_fixture,
    ipmi_lab_fixture,
)

ENV = "RACKLIFE_TEST_BMC_PASSWORD"


def run(*args: str, password: str = PASSWORD, user: str | None = None) -> Result:
    """Run `racklife bmc ARGS` with the password (or ``user:password``) in the environment."""
    value = f"{user}:{password}" if user else password
    result = CliRunner().invoke(app, ["bmc", *args], env={ENV: value})
    for text in (result.stdout, result.stderr):
        assert password not in text
    return result


def direct(lab: Lab) -> list[str]:
    return ["--address", lab.address, "--driver", "ipmi", "--user", "admin",
            "--password-env", ENV]


def test_power_status_on_and_idempotence(ipmi_lab: Lab) -> None:
    result = run("power", "status", *direct(ipmi_lab), "--json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout) == {"bmc": ipmi_lab.address, "power": "off"}
    result = run("power", "on", *direct(ipmi_lab))
    assert result.exit_code == 0
    assert "power on requested (was off)" in result.stdout
    ipmi_lab.clock.advance(POWER_DELAY_S)
    result = run("power", "on", *direct(ipmi_lab), "--json")
    assert json.loads(result.stdout)["changed"] is False
    assert ipmi_lab.bmc.calls[(0x00, 0x02)] == 1


def test_boot_inventory_sel_and_sensors(ipmi_lab: Lab) -> None:
    result = run("boot", "pxe", *direct(ipmi_lab), "--json")
    assert json.loads(result.stdout) == {"bmc": ipmi_lab.address, "boot": "pxe", "once": True,
                                         "mode": "uefi"}
    assert ipmi_lab.bmc.boot_flags[:2] == bytes([0xA0, 0x04])
    assert run("boot", "disk", "--persistent", *direct(ipmi_lab)).exit_code == 0
    assert ipmi_lab.bmc.boot_flags[0] & 0x40
    inv = json.loads(run("inventory", *direct(ipmi_lab), "--json").stdout)
    assert inv["system"]["serial"] == "S4Z1X0042"
    assert inv["system"]["uuid"] == "6f1c7e64-2b1d-4e8a-9c55-0c2f8a9b1d42"
    sel = json.loads(run("sel", "--clear", "--yes", *direct(ipmi_lab), "--json").stdout)
    assert sel["entries"][0]["message"] == "CPU0 Temp: Upper critical"
    assert sel["cleared"] is True and ipmi_lab.bmc.sel == []
    sensors = json.loads(run("sensors", *direct(ipmi_lab), "--json").stdout)
    assert sensors["health"]["overall"] == "OK"
    assert {s["name"]: s["value"] for s in sensors["sensors"]}["FAN1"] == 7200.0
    table = run("sensors", *direct(ipmi_lab))
    assert table.exit_code == 0 and "Inlet Temp" in table.stdout


def test_refusals_are_exit_5(ipmi_lab: Lab) -> None:
    result = run("boot", "http", *direct(ipmi_lab))
    assert result.exit_code == 5
    assert "HTTP boot" in result.stderr
    ipmi_lab.spec.refuse_power = True
    assert run("power", "on", *direct(ipmi_lab)).exit_code == 5


def test_wrong_password_is_exit_4_and_never_printed(ipmi_lab: Lab) -> None:
    result = run("power", "status", *direct(ipmi_lab), password="Hunter2-wrong")
    assert result.exit_code == 4
    assert "refused the user or password" in result.stderr


def test_unreachable_is_exit_3(black_hole: BlackHole) -> None:
    result = run("power", "status", "--address", f"127.0.0.1:{black_hole.port}", "--driver",
                 "ipmi", "--user", "admin", "--password-env", ENV)
    assert result.exit_code == 3
    assert "no answer" in result.stderr


@pytest.mark.parametrize("args", [
    ["power", "status"],  # no target at all
    ["power", "status", "--address", "127.0.0.1", "--driver", "ipmi"],  # no user
    ["power", "status", "--address", "127.0.0.1", "--driver", "ipmi", "--user", "admin",
     "--password-env", "RACKLIFE_TEST_UNSET_VARIABLE"],
    ["power", "status", "--address", "127.0.0.1:99999", "--driver", "ipmi", "--user", "admin",
     "--password-env", ENV],
    ["power", "status", "--address", "127.0.0.1", "--driver", "ipmi", "--user", "admin",
     "--password-env", ENV, "--system", "System.Embedded.1"],
    ["power", "sideways", "--address", "127.0.0.1"],
    ["boot", "floppy", "--address", "127.0.0.1"],
    ["power", "status", "--node", "gpu-001"],  # --node without --inventory
    ["power", "status", "--node", "gpu-001", "--address", "127.0.0.1"],
])
def test_bad_input_is_exit_2(args: list[str]) -> None:
    assert run(*args).exit_code == 2


def _inventory(tmp_path: Path, address: str) -> Path:
    path = tmp_path / "inventory.yaml"
    path.write_text(f"""site: {{name: lab}}
racks: [{{name: r01}}]
pools: {{training: {{scheduler: slurm, partition: train}}}}
nodes:
  - name: gpu-001
    serial: SN00001
    rack: r01
    u: 2
    sku: h100-sxm-8
    pool: training
    bmc: {{driver: ipmi, address: "{address}", credentials: "env:{ENV}"}}
    nics: [{{name: eno1, mac: "02:00:00:00:00:01", role: boot}}]
""", encoding="utf-8")
    return path


def test_node_from_the_inventory(ipmi_lab: Lab, tmp_path: Path) -> None:
    inventory = _inventory(tmp_path, ipmi_lab.address)
    result = run("power", "status", "--inventory", str(inventory), "--node", "gpu-001", "--json",
                 user="admin")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout) == {"bmc": "gpu-001", "power": "off"}
    assert run("power", "status", "--inventory", str(inventory), "--node", "gpu-999").exit_code == 2
    (tmp_path / "broken.yaml").write_text("site: [", encoding="utf-8")
    assert run("power", "status", "--inventory", str(tmp_path / "broken.yaml"), "--node",
               "gpu-001").exit_code == 2
    unresolved = CliRunner().invoke(app, ["bmc", "power", "status", "--inventory", str(inventory),
                                          "--node", "gpu-001"], env={ENV: None})
    assert unresolved.exit_code == 4  # credentials reference does not resolve


def test_factory_builds_ipmi_and_resolves_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = BmcSpec(driver="ipmi", address="10.0.0.5:6230", credentials=f"env:{ENV}")
    monkeypatch.setenv(ENV, "admin:s3cret")
    driver = driver_for(spec)
    assert isinstance(driver, IpmiDriver)
    assert (driver.host, driver.port, driver.target) == ("10.0.0.5", 6230, "ipmi://10.0.0.5:6230")
    assert "s3cret" not in repr(vars(driver))
    monkeypatch.delenv(ENV)
    with pytest.raises(AuthFailed, match=f"env:{ENV}"):
        driver_for(spec)
    with pytest.raises(ValueError, match="unknown BMC driver"):
        driver_from_args("snmp", "10.0.0.5", driver._credentials)


@pytest.fixture
def redfish_bmc(fixtures_dir: Path) -> Iterator[str]:
    """The project's Redfish emulator serving the captured DMTF rackmount tree (plain HTTP)."""
    from lifecycle.lab.redfish_emulator import BmcConfig, RedfishEmulator

    config = BmcConfig(name="rf", tree=fixtures_dir / "redfish" / "dmtf-public-rackmount1",
                       username="admin", password=PASSWORD)
    with RedfishEmulator([config]) as emu:
        yield emu.urls["rf"]


def test_redfish_driver_through_the_cli(redfish_bmc: str) -> None:
    args = ["--address", redfish_bmc, "--driver", "redfish", "--user", "admin",
            "--password-env", ENV]
    status = run("power", "status", *args, "--json")
    assert status.exit_code == 0, status.stderr
    assert json.loads(status.stdout)["power"] == "on"  # as captured
    inv = json.loads(run("inventory", *args, "--json").stdout)
    assert inv["system"]["serial"] == "437XR1138R2"
    assert run("boot", "pxe", *args).exit_code == 0
    assert run("power", "status", *args, password="Hunter2-wrong").exit_code == 4

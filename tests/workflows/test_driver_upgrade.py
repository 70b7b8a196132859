"""The ``driver`` change kind without a lab: the version vocabulary, the site's install hook, the lab's hook,
the row of the change table, and `racklife upgrade --driver` refusing bad input or no hook and planning.

The hooks are real commands run with an argv list; the store is a real one (the example inventory
imported); the dry run contacts no BMC and no node.
"""

from __future__ import annotations

import json
import shlex
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

from lifecycle.drivers import nvidia_driver
from lifecycle.drivers.errors import NotSupported, OperationFailed, Unreachable
from lifecycle.lab import driver_install
from lifecycle.lab.faults import Fault, write_fault
from lifecycle.store import AcceptanceRecord, Store
from lifecycle.store import db as dbm
from lifecycle.workflows import changes, driver_upgrade
from tests.cli.test_roleswap_cli import EXAMPLE, racklife

REDFISH_NODE, IPMI_NODE = "r01-n01", "r01-n08"


@pytest.mark.parametrize("text", ["550.127.08", "570.86.15", " 535.183.01 ", "570.86"])
def test_versions_as_nvidia_smi_prints_them(text: str) -> None:
    assert nvidia_driver.check_version(text) == text.strip()


@pytest.mark.parametrize("text", ["", "550", "latest", "550.127.08; reboot", "550.127.08\nx", "../550.127.08",
                                  "5500.1.1", "cuda-12.4"])
def test_other_versions_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="--driver must be an NVIDIA driver version"):
        nvidia_driver.check_version(text)


def test_the_hook_is_an_argv_with_node_and_version_and_its_output_redacted() -> None:
    script = ('import os, sys; print(os.environ["RACKLIFE_DRIVER_VERSION"], *sys.argv[1:], "password=hunter2"); '
              'print("token=s3cret", file=sys.stderr); sys.exit(len(sys.argv) > 3)')
    hook = nvidia_driver.InstallHook.from_env({nvidia_driver.INSTALL_CMD_ENV: shlex.join([sys.executable, "-c",
                                                                                          script])})
    said = hook.install("node-01", "560.35.03")
    assert said.startswith("560.35.03 node-01 560.35.03") and "hunter2" not in said, said
    with pytest.raises(ValueError, match="not a valid node name"):
        hook.install("node-01; reboot", "560.35.03")
    with pytest.raises(ValueError, match="--driver must be"):
        hook.install("node-01", "$(reboot)")
    with pytest.raises(OperationFailed, match=r"install of 560.35.03 failed \(exit 1\)") as failed:
        nvidia_driver.InstallHook((*hook.argv, "extra")).install("node-01", "560.35.03")
    assert "s3cret" not in failed.value.message
    with pytest.raises(Unreachable, match="no answer within 1s"):
        nvidia_driver.InstallHook((sys.executable, "-c", "import time; time.sleep(30)"), 1).install("node-01",
                                                                                                    "560.35.03")
    with pytest.raises(NotSupported, match="not found"):
        nvidia_driver.InstallHook(("/nonexistent/install-driver",)).install("node-01", "560.35.03")
    with pytest.raises(NotSupported, match="RACKLIFE_DRIVER_INSTALL_CMD"):
        nvidia_driver.InstallHook.from_env({nvidia_driver.INSTALL_CMD_ENV: "  "})


def test_the_change_refuses_before_the_node_leaves_without_the_hook(monkeypatch: pytest.MonkeyPatch) -> None:
    change = driver_upgrade.DriverChange("560.35.03", "/dev/null")
    monkeypatch.delenv(nvidia_driver.INSTALL_CMD_ENV, raising=False)
    assert "RACKLIFE_DRIVER_INSTALL_CMD" in change.precheck()
    monkeypatch.setenv(nvidia_driver.INSTALL_CMD_ENV, "/bin/true")
    assert change.precheck() == ""
    assert "--driver must be" in driver_upgrade.DriverChange("new", "/dev/null").precheck()
    assert change.undo("node-01") is None  # never taken back: a node not on the new driver is quarantined


def test_the_row_builds_the_change_and_needs_only_the_power_interface() -> None:
    spec = changes.ChangeSpec(changes.ChangeKind.DRIVER, "560.35.03")
    assert spec.describe() == "driver 560.35.03"
    built = changes.build(spec, changes.ChangeContext(ssh_config="/etc/racklife/ssh_config"))
    assert isinstance(built, driver_upgrade.DriverChange) and built.version == "560.35.03"
    with pytest.raises(ValueError, match="SSH config"):
        changes.build(spec, changes.ChangeContext())
    assert changes.KINDS[changes.ChangeKind.DRIVER].needs is changes.Capability.POWER


def test_the_lab_hook_installs_for_the_next_boot_and_the_fault_makes_it_lie(tmp_path: Path) -> None:
    node = tmp_path / "nodes" / "node-02"
    node.mkdir(parents=True)
    assert driver_install.installed(node) is None
    assert driver_install.main(["--lab-dir", str(tmp_path), "node-02", "560.35.03"]) == 0
    assert driver_install.installed(node) == "560.35.03"
    write_fault(node, Fault("driver-unapplied"))
    assert driver_install.main(["--lab-dir", str(tmp_path), "node-02", "570.86.15"]) == 0  # says it did
    assert driver_install.installed(node) == "560.35.03"  # but nothing changed
    assert driver_install.main(["--lab-dir", str(tmp_path), "node-09", "570.86.15"]) == 2
    assert driver_install.main(["--lab-dir", str(tmp_path), "node-02", "latest"]) == 2
    log = (tmp_path / driver_install.LOG_FILE).read_text().splitlines()
    assert log == ["node-02 560.35.03 installed", "node-02 570.86.15 unapplied (fault driver-unapplied)"]


def _store(home: Path) -> Store:
    return Store(f"sqlite:///{home / 'racklife.sqlite'}")


def _accepted(home: Path, node: str, driver: str | None) -> None:
    """An acceptance record of ``node`` whose gpu check read ``driver`` (None: no driver finding)."""
    store = _store(home)
    now = datetime.now(UTC)
    findings = [{"check": "gpu.driver", "verdict": "pass", "measured": driver}] if driver else []
    try:
        store.add_acceptance_record(AcceptanceRecord(f"accept-1:{node}", node, True, "quick", "h100-sxm-8", now,
                                                     now + timedelta(days=30), "test", "accept-1",
                                                     {"verdict": "pass", "findings": findings}, None, None))
    finally:
        store.close()


def test_upgrade_cli_refuses_a_bad_version_or_no_hook_and_plans_a_good_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(nvidia_driver.INSTALL_CMD_ENV, raising=False)
    assert racklife(tmp_path, "inventory", "import", str(EXAMPLE)).returncode == 0
    base = ["upgrade", "--nodes", f"{REDFISH_NODE},{IPMI_NODE}"]
    cases = [([*base, "--driver", "newest"], "--driver must be an NVIDIA driver version"),
             ([*base, "--driver", "560.35.03"], "RACKLIFE_DRIVER_INSTALL_CMD"),
             ([*base, "--driver", "560.35.03", "--slurm", "22.05.8"], "exactly one change")]
    for args, needle in cases:
        res = racklife(tmp_path, *args)
        text = " ".join(res.stderr.split())
        assert res.returncode == 2 and needle in text and "Traceback" not in text, (args, res.stderr)
    res = racklife(tmp_path, *base, "--driver", "560.35.03", "--json")
    assert res.returncode == 2 and "RACKLIFE_DRIVER_INSTALL_CMD" in json.loads(res.stdout)["error"]["message"]

    monkeypatch.setenv(nvidia_driver.INSTALL_CMD_ENV, "/bin/false")
    store = _store(tmp_path)
    try:
        with store.engine.begin() as conn:
            conn.execute(sa.update(dbm.nodes).values(state="in_service"))
    finally:
        store.close()
    res = racklife(tmp_path, *base, "--driver", "560.35.03", "--canary", "1", "--dry-run", "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    doc = json.loads(res.stdout)
    # Any BMC can power-cycle its node: the IPMI node is upgraded like the Redfish one.
    assert doc["change"] == "driver 560.35.03" and doc["batches"] == [[REDFISH_NODE], [IPMI_NODE]], doc
    assert not doc["skipped"], doc

    # A node whose last acceptance read the version is already on it; one that read another is not.
    _accepted(tmp_path, REDFISH_NODE, "560.35.03")
    _accepted(tmp_path, IPMI_NODE, "550.127.08")
    res = racklife(tmp_path, *base, "--driver", "560.35.03", "--dry-run", "--json")
    doc = json.loads(res.stdout)
    assert doc["skipped"] == {REDFISH_NODE: "already on 560.35.03"} and doc["batches"] == [[IPMI_NODE]], doc
    text = racklife(tmp_path, *base, "--driver", "560.35.03", "--dry-run")
    assert "upgrade (driver 560.35.03), dry run" in text.stdout and f"left out: {REDFISH_NODE}: already on " \
        "560.35.03" in text.stdout, text.stdout
    store = _store(tmp_path)
    try:
        assert driver_upgrade.reported_driver(store, IPMI_NODE) == "550.127.08"
        assert driver_upgrade.reported_driver(store, "r01-n02") is None  # never accepted: unknown
    finally:
        store.close()


def test_a_failed_ssh_handshake_prints_no_paramiko_traceback() -> None:
    """A node probed while it reboots fails handshakes; paramiko logs each from its thread, with a traceback,
    and without a handler Python printed it on the command's stderr (seen under `racklife upgrade --driver`)."""
    import subprocess

    code = ("import logging, acceptance.ssh_fabric; "
            "logging.getLogger('paramiko.transport').error('Exception (client): Error reading SSH protocol banner')")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert res.returncode == 0 and res.stderr == "", res.stderr

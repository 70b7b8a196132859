"""`lab up --with-vm`: a real QEMU machine network-boots through the lab's dnsmasq, iPXE and HTTP.

Two simulated nodes and ``vm-01``. The real provisioning workflow runs on the
VM: inspection through its Redfish BMC, one-time network boot, power on
(QEMU starts), DHCP from dnsmasq (its reserved address), iPXE chain-loading
the per-MAC script from the boot server, the minimal image's kernel and
initrd over HTTP, and the phone-home with the single-use token. Under TCG the
boot takes about half a minute. Then the same VM is provisioned with the
maintenance image (dropbear, nvme-cli, the NVMe driver): SSH with the key the
image was built with and the host key this boot made (pinned from its
phone-home, as a decommission's read-back does), ``nvme list`` finds QEMU's
NVMe drive by its serial, and ``nvme sanitize-log`` is refused by QEMU's
controller, which has no Sanitize: not verified, with that reason. `lab down`
must leave no QEMU or dnsmasq.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
import yaml

from lifecycle.cli.lab import parse_exports
from lifecycle.lab.dnsmasq import read_leases
from lifecycle.lab.vm import VmSpec
from lifecycle.store import Store, db
from lifecycle.workflows import erase_readback
from lifecycle.workflows import sanitize_log as sl
from lifecycle.workflows.repair_actions import ssh_run
from tests.e2e.conftest import MaintenanceImage, RunningLab, run

pytestmark = [pytest.mark.xdist_group("lab"), pytest.mark.slow]
VM = "vm-01"
HOST_KEY = "racklife: ssh host key "


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def processes_mentioning(text: str) -> list[str]:
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if text in cmdline and "pytest" not in cmdline:
                found.append(f"{proc.name}: {cmdline}")
    return found


def site_ssh_config(lab: RunningLab, vm: dict[str, Any], key: Path, into: Path) -> Path:
    """An ssh_config as a site writes one for its maintenance boots: address, user, key and the lab's relay
    into its hub namespace (the lab's own ProxyCommand), and a known_hosts without the node (the image makes
    its host key at each boot)."""
    (into / "site_known_hosts").touch()
    proxy = next(ln.strip() for ln in (lab.dir / "ssh" / "config").read_text().splitlines()
                 if ln.strip().startswith("ProxyCommand "))
    cfg = into / f"config-{key.name}"
    cfg.write_text("\n".join([
        f"Host {VM}", f"    HostName {vm['address']}", "    User root", f'    IdentityFile "{key}"',
        "    IdentitiesOnly yes", f'    UserKnownHostsFile "{into / "site_known_hosts"}"',
        "    GlobalKnownHostsFile /dev/null", "    PasswordAuthentication no", "    BatchMode yes", "    ConnectTimeout 10",
        f"    {proxy}", ""]))
    cfg.chmod(0o600)
    return cfg


def phone_home_reports(lab: RunningLab) -> list[dict[str, Any]]:
    """What the VM's boots reported, as the boot server recorded it, oldest first."""
    store = Store(f"sqlite:///{Path(lab.env['RACKLIFE_HOME']) / 'racklife.sqlite'}")
    try:
        with store.engine.connect() as conn:
            return [json.loads(r.report) for r in conn.execute(
                sa.select(db.boot_tokens.c.report).where(db.boot_tokens.c.node == VM,
                                                         db.boot_tokens.c.used_at.is_not(None))
                .order_by(db.boot_tokens.c.used_at))]
    finally:
        store.close()


def test_vm_network_boots_and_is_provisioned(minimal_image: Path, maintenance_image: MaintenanceImage,
                                            tmp_path: Path) -> None:
    lab = RunningLab(2, with_vm=True)
    try:
        status = lab.status()
        vm = next(n for n in status["nodes"] if n["name"] == VM)
        assert (vm["kind"], vm["power"], vm["state"], vm["boots"]) == ("vm", "Off", "off", 0)
        assert vm["mac"].startswith("52:54:00:")
        doc = yaml.safe_load(lab.inventory.read_text())
        listed = {n["name"]: n for n in doc["nodes"]}
        assert sorted(listed) == ["node-01", "node-02", VM]
        assert listed[VM]["nics"][0]["mac"] == vm["mac"] and listed[VM]["boot_ip"] == vm["address"]
        assert listed[VM]["pool"] == "spare"
        dhcp = status["dhcp"]
        assert dhcp["pid"] and alive(dhcp["pid"]) and dhcp["leases"] == []

        assert lab.racklife("inventory", "import", str(lab.inventory)).returncode == 0
        res = lab.racklife("provision", VM, "--boot-timeout", "300", "--images", str(minimal_image), "--json",
                           timeout=900)
        console = Path(vm["dir"], "console.log")
        tail = console.read_text(errors="replace")[-3000:] if console.exists() else "(no console)"
        assert res.returncode == 0, f"{res.stdout}\n{res.stderr}\nconsole:\n{tail}"
        outcome = json.loads(res.stdout)[0]
        assert (outcome["node"], outcome["ok"], outcome["state"]) == (VM, True, "provisioned")
        assert outcome["steps"] == ["inspect", "boot attempt 1"]
        hist = json.loads(lab.racklife("node", "history", VM, "--json").stdout)
        assert [h["event"] for h in hist][-2:] == ["provision", "provision_done"]
        assert "phoned home with minimal 1" in hist[-1]["reason"]

        # What the booted image itself reported, as the boot server recorded it.
        reports = phone_home_reports(lab)
        assert len(reports) == 1 and "ssh_host_key" not in reports[0]
        assert (reports[0]["node"], reports[0]["image"], reports[0]["image_version"]) == (VM, "minimal", "1")
        assert vm["mac"] in reports[0]["macs"]

        # dnsmasq leased the VM its reserved address (twice: iPXE, then the image's udhcpc).
        leases = read_leases(Path(dhcp["leases_file"]))
        assert [(x.mac, x.ip, x.hostname) for x in leases] == [(vm["mac"], vm["address"], VM)]
        acks = [line for line in Path(dhcp["log"]).read_text().splitlines() if "DHCPACK(br0)" in line]
        assert len(acks) >= 2 and all(f"{vm['address']} {vm['mac']}" in line for line in acks)
        assert "racklife: phoned home as vm-01" in console.read_text(errors="replace")
        after = next(n for n in lab.status()["nodes"] if n["name"] == VM)
        assert (after["power"], after["state"], after["boots"], after["phoned_home"]) == ("On", "running", 1, True)
        qemu_pid = after["pid"]
        assert qemu_pid and alive(qemu_pid)

        # The lab's slurmrestd: its URL in status and env, a JWT from `lab env` that it accepts.
        status = lab.status()
        rest_url = status["slurm_rest_url"]
        assert rest_url and rest_url == lab.env["RACKLIFE_SLURM_REST_URL"]
        token = lab.env["RACKLIFE_SLURM_JWT"]
        assert token and token not in json.dumps(status)
        assert "SLURM_JWT" not in lab.env  # opt-in: with it set, srun's step launch fails
        with_jwt = parse_exports(run(dict(os.environ), "lab", "env", "--dir", str(lab.dir), "--slurm-jwt").stdout)
        assert with_jwt["SLURM_JWT"] and with_jwt["SLURM_JWT"] != token  # minted per call
        nodes = lab.racklife("slurm", "status", "--rest-url", rest_url, "--json")
        assert nodes.returncode == 0, nodes.stderr
        assert sorted(n["node"] for n in json.loads(nodes.stdout)["nodes"]) == ["node-01", "node-02"]

        # The maintenance image on the same VM (the boot server serves both images), as a decommission
        # boots a node to read its drives back: SSH with the site's key only, the host key this boot made
        # pinned from its phone-home, then nvme list and nvme sanitize-log, judged by the read-back's own
        # parser and table.
        both = tmp_path / "images"
        shutil.copytree(minimal_image, both)
        shutil.copytree(maintenance_image.out, both, dirs_exist_ok=True)
        res = lab.racklife("provision", VM, "--image", "maintenance", "--boot-timeout", "300", "--images", str(both),
                           "--json", timeout=900)
        tail = console.read_text(errors="replace")[-3000:]
        assert res.returncode == 0, f"{res.stdout}\n{res.stderr}\nconsole:\n{tail}"
        hist = json.loads(lab.racklife("node", "history", VM, "--json").stdout)
        assert "phoned home with maintenance 1" in hist[-1]["reason"]
        boot = console.read_text(errors="replace").rsplit("--- racklife lab: power on", 1)[-1]
        assert "racklife: ssh server listening on port 22" in boot, tail
        # The host key it made at this boot: on its console and in its phone-home, the same.
        [printed] = [ln.split(HOST_KEY, 1)[1].strip() for ln in boot.splitlines() if HOST_KEY in ln]
        reported = phone_home_reports(lab)[-1]
        assert (reported["image"], reported["ssh_host_key"]) == ("maintenance", printed)
        assert printed.startswith("ssh-ed25519 ")
        site = site_ssh_config(lab, vm, maintenance_image.key, tmp_path)
        # The site's config alone knows no host key for the node: refused (StrictHostKeyChecking).
        unknown = ssh_run(VM, str(site), ["true"], 60)
        assert unknown.exit_code == 255 and unknown.stderr.startswith("ssh to vm-01: HostKeyRejected"), unknown
        with erase_readback.pinned_config(VM, str(site), reported["ssh_host_key"]) as cfg:
            listed = ssh_run(VM, cfg, list(sl.LIST_CMD), 60)
            assert listed.exit_code == 0, listed
            drives = sl.parse_list(listed.stdout)
            serial = VmSpec(VM).nvme_serial
            assert [(d.device, d.controller, d.serial, d.model) for d in drives] == [
                ("/dev/nvme0n1", "/dev/nvme0", serial, "QEMU NVMe Ctrl")]
            log = ssh_run(VM, cfg, [*sl.SANITIZE_LOG_CMD, "/dev/nvme0"], 60)
        # QEMU's NVMe controller has no Sanitize (SANICAP 0) and refuses the log page.
        refused = "NVMe status: Invalid Field in Command: A reserved coded value or an unsupported value in a " \
                  "defined field(0x4002)"
        assert (log.exit_code, log.stdout, log.stderr.strip()) == (1, "", refused)
        back = {"ok": True, "reads": {"list": asdict(listed), "logs": {"/dev/nvme0": asdict(log)}}}
        assert erase_readback.judge_log(serial, "NVMe", back) == {
            "verified": False, "method": None, "device": "/dev/nvme0", "sanitize_log": "", "absent": True,
            "reason": f"nvme sanitize-log /dev/nvme0 failed (exit 1): {refused}"}
        assert erase_readback.judge_log("NOT-THERE", "NVMe", back)["verified"] is False
        # Only the site's key is accepted: another key (made here, never given to the build) is refused.
        other = tmp_path / "other"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True, timeout=30)
        with erase_readback.pinned_config(VM, str(site_ssh_config(lab, vm, other, tmp_path)), printed) as cfg:
            denied = ssh_run(VM, cfg, ["true"], 60)
        assert (denied.exit_code, denied.stderr) == (255, "ssh to vm-01: authentication failed (key rejected)")
    finally:
        lab.down()
    assert not alive(qemu_pid)
    assert not alive(dhcp["pid"])
    assert processes_mentioning(str(lab.dir)) == []

"""`lab up --with-vm`: a real QEMU machine network-boots through the lab's dnsmasq, iPXE and HTTP.

Two simulated nodes and ``vm-01``. The real provisioning workflow runs on the
VM: inspection through its Redfish BMC, one-time network boot, power on
(QEMU starts), DHCP from dnsmasq (its reserved address), iPXE chain-loading
the per-MAC script from the boot server, the minimal image's kernel and
initrd over HTTP, and the phone-home with the single-use token. Under TCG the
boot takes about half a minute. `lab down` must leave no QEMU or dnsmasq.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import sqlalchemy as sa
import yaml

from lifecycle.cli.lab import parse_exports
from lifecycle.lab.dnsmasq import read_leases
from lifecycle.store import Store, db
from tests.e2e.conftest import RunningLab, run

pytestmark = [pytest.mark.xdist_group("lab"), pytest.mark.slow]
VM = "vm-01"


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


def test_vm_network_boots_and_is_provisioned(minimal_image: Path) -> None:
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
        store = Store(f"sqlite:///{Path(lab.env['RACKLIFE_HOME']) / 'racklife.sqlite'}")
        try:
            with store.engine.connect() as conn:
                reports = [json.loads(r.report) for r in conn.execute(
                    sa.select(db.boot_tokens.c.report).where(db.boot_tokens.c.node == VM,
                                                             db.boot_tokens.c.used_at.is_not(None)))]
        finally:
            store.close()
        assert len(reports) == 1
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
    finally:
        lab.down()
    assert not alive(qemu_pid)
    assert not alive(dhcp["pid"])
    assert processes_mentioning(str(lab.dir)) == []

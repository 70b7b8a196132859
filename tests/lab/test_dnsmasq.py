"""The lab's dnsmasq: reservations from the inventory, iPXE sent to HTTP, no router, nothing for strangers.

The configuration is the one `lifecycle.drivers.boot.render.dnsmasq_conf`
renders for a site; the DHCP exchange is real: busybox's udhcpc asks from a
lab node's namespace, as the minimal image does after iPXE.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from lifecycle.drivers.boot.render import RenderError, dnsmasq_conf
from lifecycle.lab import netns
from lifecycle.lab.dnsmasq import LabDhcp, parse_leases, read_leases
from lifecycle.lab.layout import build_inventory
from lifecycle.lab.netns import LabNet
from lifecycle.model.inventory import load_inventory

SUBNET = "10.79.0.0/16"
BOOT_URL = "http://10.79.0.1:8069"
# What udhcpc's hook prints: the address, router and boot file the server offered.
HOOK = '#!/bin/sh\n[ "$1" = bound ] && echo "ip=$ip router=${router:-none} boot_file=${boot_file:-none}"\nexit 0\n'


def test_reservations_only_config_without_router(repo_dir: Path) -> None:
    inv = load_inventory(repo_dir / "examples" / "site-h100-2rack.yaml")
    conf = dnsmasq_conf(inv, interface="br0", boot_base_url=BOOT_URL, reservations_only="10.20.0.0/16",
                        no_router=True).splitlines()
    assert "dhcp-range=10.20.0.0,static,255.255.0.0,12h" in conf
    assert "dhcp-option=option:router" in conf
    assert "port=0" in conf
    assert not any(line.startswith("dhcp-range=") and "static" not in line for line in conf)
    assert len([line for line in conf if line.startswith("dhcp-host=")]) == len(inv.nodes)
    with pytest.raises(RenderError, match="exactly one"):
        dnsmasq_conf(inv, interface="br0", boot_base_url=BOOT_URL)
    with pytest.raises(RenderError, match="exactly one"):
        dnsmasq_conf(inv, interface="br0", boot_base_url=BOOT_URL, dhcp_range=("10.20.0.1", "10.20.0.9"),
                     reservations_only="10.20.0.0/16")
    with pytest.raises(RenderError, match="subnet"):
        dnsmasq_conf(inv, interface="br0", boot_base_url=BOOT_URL, reservations_only="10.20.0.0/16\nport=53")


def test_lease_file_parsing(tmp_path: Path) -> None:
    text = ("1796057407 52:54:00:00:00:02 10.77.1.3 vm-01 01:52:54:00:00:00:02\n"
            "1796057408 02:72:6C:00:00:01 10.77.1.2 * *\n"
            "duid 00:01:00:01:2c:aa:bb:cc\n")
    leases = parse_leases(text)
    assert [(x.mac, x.ip, x.hostname, x.expires) for x in leases] == [
        ("52:54:00:00:00:02", "10.77.1.3", "vm-01", 1796057407),
        ("02:72:6c:00:00:01", "10.77.1.2", None, 1796057408)]
    with pytest.raises(ValueError, match="line 1"):
        parse_leases("garbage\n")
    with pytest.raises(ValueError):
        parse_leases("1796057407 52:54:00:00:00:02 not-an-ip vm-01\n")
    assert read_leases(tmp_path / "missing") == []


def _udhcpc(ns: str, hook: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    busybox = shutil.which("busybox")
    assert busybox, "busybox is missing: apt-get install busybox"
    return subprocess.run(netns.exec_argv(ns, [busybox, "udhcpc", "-i", "eth0", "-q", "-n", "-t", "3", "-T", "1",
                                               "-s", str(hook), *extra]),
                          capture_output=True, text=True, timeout=30, check=False)


@pytest.mark.slow
def test_dnsmasq_leases_reserved_addresses_only(lab_prefix: str, tmp_path: Path) -> None:
    assert shutil.which("dnsmasq") or Path("/usr/sbin/dnsmasq").exists(), "apt-get install dnsmasq-base"
    net = LabNet(lab_prefix, SUBNET)
    net.create()
    a, stranger = net.add_nodes(["node-a", "node-b"])
    creds = tmp_path / "creds"
    creds.write_text("admin:x\n")
    inv = build_inventory(["node-a"], 1, "h100-sxm-8", {"node-a": a},
                          {"node-a": ("redfish", "http://127.0.0.1:1")}, creds)
    hook = tmp_path / "hook"
    hook.write_text(HOOK)
    hook.chmod(0o755)
    for n in (a, stranger):  # they ask DHCP for their address, as a booting machine does
        subprocess.run(["ip", "-n", n.netns, "addr", "flush", "dev", "eth0"], check=True)
    dhcp = LabDhcp(tmp_path, net.hub, netns.BRIDGE, SUBNET, BOOT_URL).start(inv)
    try:
        assert dhcp.pid is not None
        assert netns.pids_in(net.hub) == [dhcp.pid]  # it lives in the hub, nowhere else
        plain = _udhcpc(a.netns, hook)
        assert plain.returncode == 0, plain.stderr
        assert f"ip={a.address} router=none boot_file=none" in plain.stdout
        # iPXE's user class gets the boot server's chain script as its boot file.
        ipxe = _udhcpc(a.netns, hook, "-x", "0x4d:69505845")
        assert ipxe.returncode == 0, ipxe.stderr
        assert f"ip={a.address} router=none boot_file={BOOT_URL}/boot.ipxe" in ipxe.stdout
        # A MAC the inventory does not list gets no address at all.
        nobody = _udhcpc(stranger.netns, hook)
        assert nobody.returncode != 0 and "ip=" not in nobody.stdout
        lease = dhcp.lease_for(a.mac)
        assert lease is not None and (lease.ip, lease.hostname) == (a.address, "node-a")
        assert [x.mac for x in read_leases(dhcp.leases)] == [a.mac]
        log = dhcp.log.read_text()
        assert f"DHCPACK(br0) {a.address} {a.mac} node-a" in log
        assert f"{stranger.mac} no address available" in log
        status = dhcp.status()
        assert status["leases"] == [{"mac": a.mac, "ip": a.address, "hostname": "node-a"}]
    finally:
        dhcp.stop()
        net.teardown()
    assert dhcp.pid is None

"""The lab's DHCP server: a real dnsmasq on the lab bridge, configured from the lab's inventory.

A real machine network-boots by asking DHCP for an address and a boot file;
the lab's QEMU node (``--with-vm``) does exactly that, so the lab runs the
same dnsmasq a site would, with the configuration racklife renders for a site
(:func:`lifecycle.drivers.boot.render.dnsmasq_conf`): one reservation per
boot MAC of the inventory, iPXE clients sent to the HTTP boot server, no DNS
(``port=0``), reservations only (an unknown MAC gets nothing) and no router
option (the lab is no way out). It runs in the hub namespace, bound to the
bridge, so it can serve nothing but the lab; ``netns.teardown`` kills it with
the hub even after a crash.

Its lease file and log (``log-dhcp``) are the record of what it handed out;
:func:`read_leases` parses the lease file for ``lab status`` and the tests.
"""

from __future__ import annotations

import ipaddress
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from lifecycle.drivers.boot.render import dnsmasq_conf
from lifecycle.lab import netns
from lifecycle.model.inventory import Inventory


class DhcpError(RuntimeError):
    """dnsmasq could not be started; the message names its log."""


@dataclass(frozen=True)
class Lease:
    """One line of dnsmasq's lease file: ``expiry mac ip hostname client-id``."""

    expires: int
    mac: str
    ip: str
    hostname: str | None


def parse_leases(text: str) -> list[Lease]:
    """The IPv4 leases in a dnsmasq lease file (``*`` means no hostname); malformed lines are refused."""
    leases = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.startswith("duid "):
            continue
        fields = line.split()
        if len(fields) < 4 or not fields[0].isdigit():
            raise ValueError(f"lease file line {number}: not 'expiry mac ip hostname [client-id]': {line!r}")
        ipaddress.IPv4Address(fields[2])
        leases.append(Lease(int(fields[0]), fields[1].lower(), fields[2], None if fields[3] == "*" else fields[3]))
    return leases


def read_leases(path: Path) -> list[Lease]:
    try:
        return parse_leases(path.read_text(encoding="ascii"))
    except FileNotFoundError:
        return []


class LabDhcp:
    """dnsmasq on the hub's bridge; ``start()`` returns once it is serving, ``stop()`` ends it."""

    def __init__(self, lab_dir: Path, hub_netns: str, interface: str, subnet: str, boot_base_url: str) -> None:
        self.dir = lab_dir / "dnsmasq"
        self.netns = hub_netns
        self.interface = interface
        self.subnet = subnet
        self.boot_base_url = boot_base_url
        self.conf = self.dir / "dnsmasq.conf"
        self.leases = self.dir / "dnsmasq.leases"
        self.log = self.dir / "dnsmasq.log"
        self.pid_file = self.dir / "dnsmasq.pid"
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        proc = self._proc
        return proc.pid if proc is not None and proc.poll() is None else None

    def render(self, inventory: Inventory) -> str:
        return dnsmasq_conf(inventory, interface=self.interface, boot_base_url=self.boot_base_url,
                            reservations_only=self.subnet, no_router=True)

    def start(self, inventory: Inventory, timeout_s: float = 10.0) -> LabDhcp:
        binary = shutil.which("dnsmasq") or "/usr/sbin/dnsmasq"
        if not Path(binary).exists():
            raise DhcpError("dnsmasq is not installed (apt-get install dnsmasq-base)")
        self.dir.mkdir(parents=True, exist_ok=True)
        self.conf.write_text(self.render(inventory), encoding="utf-8")
        for fresh in (self.leases, self.log):  # a new lab: no leases, no log of an earlier one
            fresh.write_text("", encoding="ascii")
        self.pid_file.unlink(missing_ok=True)
        # --keep-in-foreground: the process we started is the daemon, and it dies with the hub.
        # --user=root: the lease file and log live in the lab directory, not in dnsmasq's own.
        argv = [binary, "--keep-in-foreground", f"--conf-file={self.conf}", f"--dhcp-leasefile={self.leases}",
                f"--log-facility={self.log}", f"--pid-file={self.pid_file}", "--user=root", "--group=root"]
        with (self.dir / "dnsmasq.stderr").open("ab") as err:
            self._proc = subprocess.Popen(netns.exec_argv(self.netns, argv), stdin=subprocess.DEVNULL,
                                          stdout=err, stderr=err, start_new_session=True)
        deadline = time.monotonic() + timeout_s
        while not self.pid_file.exists() or not self.pid_file.read_text().strip():
            if self._proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise DhcpError(f"dnsmasq did not start; see {self.dir / 'dnsmasq.stderr'} and {self.log}")
            time.sleep(0.05)
        return self

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)

    def lease_for(self, mac: str) -> Lease | None:
        mac = mac.lower()
        return next((lease for lease in read_leases(self.leases) if lease.mac == mac), None)

    def status(self) -> dict[str, object]:
        """For ``lab status``: where it runs and what it leased (None while the lease file is unreadable)."""
        leases: list[dict[str, str | None]] | None
        try:
            leases = [{"mac": x.mac, "ip": x.ip, "hostname": x.hostname} for x in read_leases(self.leases)]
        except (OSError, ValueError):
            leases = None
        return {"pid": self.pid, "interface": self.interface, "conf": str(self.conf),
                "leases_file": str(self.leases), "log": str(self.log), "leases": leases}

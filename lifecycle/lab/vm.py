"""The lab's real machine: a QEMU VM that network-boots like a server does.

Simulated nodes skip the firmware: they fetch their iPXE script over HTTP
directly. ``lab up --with-vm`` adds one node that does not: a QEMU PC (TCG,
since this machine has no usable KVM) whose e1000 NIC carries Debian's iPXE
ROM (``ipxe-qemu``). At power-on it asks the lab's dnsmasq for a lease and a
boot file, chain-loads the boot server's script for its MAC, downloads
kernel and initrd over HTTP, boots the image and phones home: the whole path
a rack takes, on one machine.

Its NIC is a tap port of the lab bridge, created in the hub namespace;
QEMU runs in that namespace so it can open the tap by name, and dies with
it at teardown. Its power follows its BMC (a Redfish emulator BMC, like the
other nodes'): power on starts QEMU, power off kills it, a reset does both.
Its serial console is appended to ``console.log`` in the node's directory.
It carries one NVMe drive (QEMU's emulated controller, serial ``nvme_serial``,
a sparse file in the node's directory), which the maintenance image's
``nvme`` lists; the minimal image has no NVMe driver and ignores it.
"""

from __future__ import annotations

import shutil
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from lifecycle.lab import netns

IPXE_ROM = Path("/usr/lib/ipxe/qemu/efi-e1000.rom")
PHONED_HOME = "racklife: phoned home as "


def qemu_binary() -> str:
    found = shutil.which("qemu-system-x86_64")
    if not found:
        raise RuntimeError("qemu-system-x86_64 is missing: apt-get install qemu-system-x86 ipxe-qemu")
    if not IPXE_ROM.exists():
        raise RuntimeError(f"{IPXE_ROM} is missing: apt-get install ipxe-qemu")
    return found


@dataclass(frozen=True)
class VmSpec:
    name: str
    memory_mb: int = 256
    nvme_mib: int = 64

    @property
    def nvme_serial(self) -> str:
        """The serial number the VM's NVMe drive reports (NVMe allows 20 characters)."""
        return f"RL{self.name.upper().replace('-', '')}N0"[:20]


class VmNode:
    """One QEMU VM on the lab bridge. Thread-safe: the BMC's power events arrive on worker threads."""

    def __init__(self, spec: VmSpec, net: netns.NodeNet, lab_dir: Path) -> None:
        self.spec = spec
        self.net = net
        self.dir = lab_dir / "nodes" / spec.name
        self.console = self.dir / "console.log"
        self.nvme = self.dir / "nvme0.img"
        self.boots = 0
        self.boot_error: str | None = None
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def name(self) -> str:
        return self.spec.name

    def argv(self) -> list[str]:
        """The QEMU command line (run inside the hub namespace)."""
        return [
            qemu_binary(), "-name", self.name, "-machine", "pc", "-accel", "tcg", "-m", str(self.spec.memory_mb),
            "-display", "none", "-monitor", "none", "-vga", "none",
            "-drive", f"file={self.nvme},if=none,id=nvme0,format=raw",
            "-device", f"nvme,serial={self.spec.nvme_serial},drive=nvme0",
            "-chardev", f"file,id=console,path={self.console},append=on", "-serial", "chardev:console",
            "-netdev", f"tap,id=n0,ifname={self.net.port},script=no,downscript=no",
            "-device", f"e1000,netdev=n0,mac={self.net.mac},romfile={IPXE_ROM}",
            "-boot", "order=n",
        ]

    def prepare(self) -> None:
        """The node's directory, with an empty console (a new lab's machine has not booted yet)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        self.console.unlink(missing_ok=True)
        with self.nvme.open("wb") as drive:  # sparse: a new lab's drive reads as zeros
            drive.truncate(self.spec.nvme_mib << 20)

    @property
    def running(self) -> bool:
        proc = self._proc
        return proc is not None and proc.poll() is None

    @property
    def pid(self) -> int | None:
        proc = self._proc
        return proc.pid if proc is not None and proc.poll() is None else None

    @property
    def power_state(self) -> str:
        return "On" if self._proc is not None else "Off"

    @property
    def state(self) -> str:
        """off | running (QEMU up; see the console for the guest) | stopped (QEMU exited by itself)."""
        if self._proc is None:
            return "off"
        return "running" if self._proc.poll() is None else "stopped"

    def power_on(self) -> None:
        with self._lock:
            if self._proc is not None:
                return
            self.boots += 1
            self.boot_error = None
            # The guest's kernel command line (with its single-use phone-home token) is printed here.
            self.dir.mkdir(parents=True, exist_ok=True)
            self.console.touch(mode=0o600)
            with self.console.open("ab") as console:
                console.write(f"\n--- racklife lab: power on (boot {self.boots}) at {time.time():.0f}\n".encode())
            # A machine that cannot start stays off with the reason, as a node whose boot failed.
            try:
                if not self.nvme.exists():  # kept across power cycles: what was written stays written
                    with self.nvme.open("wb") as drive:
                        drive.truncate(self.spec.nvme_mib << 20)
                argv = netns.exec_argv(self.net.netns, self.argv())
                with (self.dir / "qemu.log").open("ab") as log:
                    self._proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                                  start_new_session=True)
            except (OSError, RuntimeError) as exc:
                self.boot_error = f"{type(exc).__name__}: {exc}"

    def power_off(self) -> None:
        """Pull the plug: QEMU is killed, as a power loss would stop the machine."""
        with self._lock:
            proc, self._proc = self._proc, None
            if proc is None:
                return
            if proc.poll() is not None and proc.returncode not in (0, -9):
                self.boot_error = f"QEMU exited with {proc.returncode}; see {self.dir / 'qemu.log'}"
            proc.kill()
            proc.wait(10)

    def phoned_home(self) -> bool:
        """Whether the guest said it phoned home since its last power-on (read from its console)."""
        try:
            text = self.console.read_text(errors="replace")
        except FileNotFoundError:
            return False
        return PHONED_HOME in text.rsplit("--- racklife lab: power on", 1)[-1]

    def close(self) -> None:
        self.power_off()

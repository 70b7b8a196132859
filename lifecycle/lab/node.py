"""A simulated node: its own network namespace, a real sshd, fake GPU tools, and power.

The workflows under test talk to nodes the way they talk to real ones: power
through a BMC, boot over the network, SSH with keys, Slurm through slurmd. A
``SimNode`` gives them that much of a server. Its power follows its BMC (the
lab wires the BMC emulator's power hook to ``power_on``/``power_off``);
powering on "boots" it after a configurable time: it fetches its iPXE script
over HTTP (optional), phones home (optional: a URL or a callable), starts an
OpenSSH ``sshd`` in its namespace (key auth only, its own hostname), and runs
the lab's boot hooks (the assembly starts slurmd there). Powering off is
pulling the plug: shutdown hooks run, then every process in the node's
namespace is killed, and the faults a reboot clears (a GPU fallen off the bus) are gone
(``lifecycle.lab.faults.CLEARED_BY``).

The node's directory holds its facts for the fake tools (``node.json``), its
fault (``fault.json``), its ``bin/`` and its SSH host key and sshd config. The
GPU driver its tools report is the one loaded at its last boot: the lab's
driver install hook (``lifecycle.lab.driver_install``) changes what is on its
disk, and the next boot loads that.
"""

from __future__ import annotations

import json
import shlex
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from lifecycle.lab import netns
from lifecycle.lab.driver_install import installed as installed_driver
from lifecycle.lab.faults import HEALTHY, Fault, clear_faults, read_fault, write_fault
from lifecycle.lab.gputools.cli import install as install_tools
from lifecycle.lab.gputools.state import NODE_FILE
from lifecycle.model.skus import SKUS

Hook = Callable[[str], None]
_NODE_INIT = ("import os, socket, subprocess, sys; socket.sethostname(sys.argv[1]); "
                "subprocess.run(['mount', '--bind', sys.argv[2], sys.argv[3]], check=True); "
                "os.execv(sys.argv[4], sys.argv[4:])")
"""Run in the node's own UTS and mount namespaces: its hostname, and its boot id (a new one at each boot,
bound over the kernel's, which the lab's nodes share), then sshd."""
BOOT_ID = "/proc/sys/kernel/random/boot_id"
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
SOURCE_ROOT = Path(__file__).resolve().parents[2]
"""The racklife checkout this lab runs from: a node's burn-in and fake tools import the same code
(over SSH, a node's processes get sshd's environment, not the controller's)."""
DRIVER_VERSION = "550.127.08"
CUDA_VERSION = "12.4"


@dataclass(frozen=True)
class BootReport:
    """What a node tells the boot server when it phones home."""

    name: str
    mac: str
    address: str
    booted_at: float
    ipxe_script: str | None


PhoneHome = Callable[[BootReport], None]


@dataclass(frozen=True)
class NodeSpec:
    name: str
    sku: str
    boot_time_s: float = 5.0
    boot_url: str | None = None
    """iPXE script URL; ``{mac}`` and ``{name}`` are filled in. None: no network boot step."""
    phone_home: str | PhoneHome | None = None
    """URL to POST the BootReport to as JSON, or a callable; None: no phone-home."""
    serial: str | None = None
    """The system serial the node's firmware states (the inventory's); what its dmidecode prints."""

    def __post_init__(self) -> None:
        if self.sku not in SKUS:
            raise ValueError(f"unknown SKU '{self.sku}' (known: {', '.join(sorted(SKUS))})")
        if self.boot_time_s < 0:
            raise ValueError("boot_time_s must be 0 or more")
        for what, url in (("boot_url", self.boot_url), ("phone_home", self.phone_home)):
            if isinstance(url, str) and not url.startswith(("http://", "https://")):
                raise ValueError(f"{what} must be an http:// or https:// URL")


def _keygen(path: Path, comment: str) -> None:
    if not path.exists():
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
                       check=True, capture_output=True)


def _no_proxy() -> urllib.request.OpenerDirector:
    return urllib.request.build_opener(urllib.request.ProxyHandler({}))


class LabSsh:
    """The lab's SSH material: one user key for every node, known host keys, a client config."""

    def __init__(self, lab_dir: Path, hub_netns: str) -> None:
        self.dir = lab_dir / "ssh"
        self.hub_netns = hub_netns
        self.key = self.dir / "id_ed25519"
        self.config = self.dir / "config"
        self.known_hosts = self.dir / "known_hosts"
        self.authorized_keys = self.dir / "authorized_keys"

    def prepare(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        self.dir.chmod(0o700)
        _keygen(self.key, "racklife-lab")
        shutil.copyfile(self.key.with_suffix(".pub"), self.authorized_keys)

    def write_config(self, nodes: Sequence[SimNode]) -> Path:
        """Write known_hosts and an ssh_config with one Host block per node; returns the config path."""
        q = shlex.quote
        proxy = f"{q(sys.executable)} -m lifecycle.lab.netns relay {q(self.hub_netns)} %h %p"
        blocks, known = [], []
        for n in nodes:
            known.append(f"{n.name} {n.host_public_key()}")
            blocks.append("\n".join([
                f"Host {n.name}",
                f"    HostName {n.net.address}",
                f"    HostKeyAlias {n.name}",
                "    User root",
                f'    IdentityFile "{self.key}"',
                "    IdentitiesOnly yes",
                f'    UserKnownHostsFile "{self.known_hosts}"',
                "    GlobalKnownHostsFile /dev/null",
                "    StrictHostKeyChecking yes",
                "    PasswordAuthentication no",
                "    BatchMode yes",
                "    ConnectTimeout 10",
                "    LogLevel ERROR",
                f"    ProxyCommand {proxy}",
            ]))
        self.known_hosts.write_text("".join(k + "\n" for k in known), encoding="utf-8")
        self.config.write_text("\n\n".join(blocks) + "\n", encoding="utf-8")
        self.config.chmod(0o600)
        return self.config

    def argv(self, node: str, *command: str) -> list[str]:
        """The ssh client argv that runs ``command`` on ``node``."""
        return ["ssh", "-F", str(self.config), node, "--", *command]


class SimNode:
    """One simulated server. Thread-safe: BMC emulators call power from their own threads."""

    def __init__(self, spec: NodeSpec, net: netns.NodeNet, lab_dir: Path, ssh: LabSsh, *,
                 fault: Fault = HEALTHY, on_boot: Sequence[Hook] = (), on_shutdown: Sequence[Hook] = (),
                 wait: Callable[[threading.Event, float], bool] | None = None) -> None:
        self.boots = 0  # power-ons seen: the lab's independent count of boots
        self.network_boot_failed = False  # the pxe-flaky fault has cost this node its one boot
        self.spec = spec
        self.net = net
        self.ssh = ssh
        self.dir = lab_dir / "nodes" / spec.name
        self.on_boot = list(on_boot)
        self.on_shutdown = list(on_shutdown)
        self._wait = wait or (lambda ev, s: ev.wait(s))
        self._initial_fault = fault
        self._lock = threading.RLock()
        self._cancel = threading.Event()
        self._boot_thread: threading.Thread | None = None
        self._sshd: subprocess.Popen[bytes] | None = None
        self._up = threading.Event()
        self.state = "off"
        """off | booting | up | boot_failed"""
        self.boot_error: str | None = None
        self.driver = installed_driver(self.dir) or DRIVER_VERSION
        """The GPU driver loaded at the last boot: what the fake tools report."""

    @property
    def name(self) -> str:
        return self.spec.name

    # ------------------------------------------------------------- files

    def prepare(self) -> None:
        """Write the node's directory: facts, fault, tools, host key, sshd config (idempotent)."""
        (self.dir / "ssh").mkdir(parents=True, exist_ok=True)
        self._write_facts(booted_at=None)
        write_fault(self.dir, self._initial_fault)
        install_tools(self.dir / "bin")
        _keygen(self.dir / "ssh" / "ssh_host_ed25519_key", f"root@{self.name}")
        (self.dir / "ssh" / "sshd_config").write_text("\n".join([
            f"ListenAddress {self.net.address}",
            "Port 22",
            f"HostKey {self.dir / 'ssh' / 'ssh_host_ed25519_key'}",
            f"PidFile {self.dir / 'ssh' / 'sshd.pid'}",
            f"AuthorizedKeysFile {self.ssh.authorized_keys}",
            "AuthenticationMethods publickey",
            "PubkeyAuthentication yes",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "PermitRootLogin prohibit-password",
            "UsePAM no",
            "StrictModes no",
            "PrintMotd no",
            # RACKLIFE_SYSFS/RACKLIFE_DEV: the node's drives are files in its directory (gputools/nvme.py).
            # SHLVL=1: bash run by sshd reads the host's ~/.bashrc only as a top-level shell; the lab's nodes
            # share the host's /root, whose rc files are not the node's (a pyenv init there waited 60 s on a
            # lock that a killed session had left, in every command of every node).
            f"SetEnv PATH={self.dir / 'bin'}:{SYSTEM_PATH} RACKLIFE_NODE={self.name} PYTHONPATH={SOURCE_ROOT} "
            f"RACKLIFE_SYSFS={self.dir / 'sys'} RACKLIFE_DEV={self.dir / 'dev'} SHLVL=1",
            "Subsystem sftp internal-sftp",
            "",
        ]), encoding="utf-8")

    def _write_facts(self, booted_at: float | None) -> None:
        sku = SKUS[self.spec.sku]
        facts = {"name": self.name, "sku": sku.name, "gpu_model": sku.gpu_model, "gpu_count": sku.gpu_count,
                 "ib_ports": sku.ib_ports, "ib_rate_gbps": sku.ib_rate_gbps, "driver_version": self.driver,
                 "cuda_version": CUDA_VERSION, "address": self.net.address, "mac": self.net.mac,
                 "booted_at": booted_at, "serial": self.spec.serial}
        tmp = self.dir / f".{NODE_FILE}.tmp"
        tmp.write_text(json.dumps(facts, indent=2) + "\n", encoding="utf-8")
        tmp.replace(self.dir / NODE_FILE)

    def host_public_key(self) -> str:
        text = (self.dir / "ssh" / "ssh_host_ed25519_key.pub").read_text(encoding="utf-8").split()
        return f"{text[0]} {text[1]}"

    def inject(self, fault: Fault) -> None:
        """Change the node's fault profile; the tools see it on their next call."""
        write_fault(self.dir, fault)

    # ------------------------------------------------------------- power

    @property
    def power_state(self) -> str:
        """Redfish vocabulary: "On" while booting or up, "Off" otherwise."""
        return "Off" if self.state == "off" else "On"

    @property
    def sshd_pid(self) -> int | None:
        proc = self._sshd
        return proc.pid if proc is not None and proc.poll() is None else None

    def power_on(self) -> None:
        """Start booting; returns at once (use ``wait_up``). Already on: nothing to do."""
        with self._lock:
            if self.state != "off":
                return
            self.state = "booting"
            self.boot_error = None
            self.boots += 1
            self._cancel = threading.Event()
            self._up.clear()
            self._boot_thread = threading.Thread(target=self._boot, args=(self._cancel,),
                                                 name=f"boot-{self.name}", daemon=True)
            self._boot_thread.start()

    def wait_up(self, timeout_s: float) -> bool:
        """True once the node has booted (sshd and boot hooks running)."""
        return self._up.wait(timeout_s)

    def _boot(self, cancel: threading.Event) -> None:
        try:
            if self._wait(cancel, self.spec.boot_time_s):
                return
            script = self._network_boot()
            booted_at = time.time()
            if script is not None or not self.spec.boot_url:
                # A node that fell through to its disk was not network-booted: nothing to report.
                self._phone_home(BootReport(self.name, self.net.mac, self.net.address, booted_at, script))
            with self._lock:
                if cancel.is_set():
                    return
                self.driver = installed_driver(self.dir) or self.driver  # the boot loads what is on disk
                self._write_facts(booted_at)
                self._start_sshd()
            for hook in self.on_boot:
                hook(self.name)
            with self._lock:
                if not cancel.is_set():
                    self.state = "up"
                    self._up.set()
        except Exception as exc:
            with self._lock:
                if not cancel.is_set():
                    self.state = "boot_failed"
                    self.boot_error = f"{type(exc).__name__}: {exc}"

    def _network_boot(self) -> str | None:
        """The iPXE script the firmware's network boot got, or None: it fell through to the disk."""
        if not self.spec.boot_url:
            return None
        profile = read_fault(self.dir).profile
        if profile == "pxe-off":
            return None
        script = self._fetch_boot_script()
        if script is not None and profile == "pxe-flaky" and not self.network_boot_failed:
            self.network_boot_failed = True  # this once: the boot did not get through to the script
            return None
        return script

    def _fetch_boot_script(self) -> str | None:
        if not self.spec.boot_url:
            return None
        url = self.spec.boot_url.format(mac=self.net.mac, name=self.name)

        def fetch() -> str | None:
            try:
                with _no_proxy().open(url, timeout=10) as resp:
                    return str(resp.read().decode("utf-8"))
            except urllib.error.HTTPError as exc:
                exc.close()  # it holds the response's socket
                if exc.code == 404:
                    return None  # no network boot pending for this MAC: boot from the local disk
                raise RuntimeError(f"boot script {url}: HTTP {exc.code} {exc.reason}") from None
            except (urllib.error.URLError, OSError):
                return None  # no boot server answering: firmware falls through to the local disk

        script = netns.run_in(self.net.netns, fetch)
        if script is None:
            return None
        if not script.startswith("#!ipxe"):
            raise ValueError(f"{url} did not return an iPXE script")
        (self.dir / "boot.ipxe").write_text(script, encoding="utf-8")
        return script

    def _phone_home(self, report: BootReport) -> None:
        target = self.spec.phone_home
        if target is None:
            return
        if callable(target):
            target(report)
            return
        body = json.dumps(asdict(report)).encode()
        request = urllib.request.Request(target, data=body, method="POST",  # noqa: S310 (http(s) checked)
                                         headers={"Content-Type": "application/json"})

        def post() -> None:
            try:
                with _no_proxy().open(request, timeout=10) as resp:
                    resp.read()
            except urllib.error.HTTPError as exc:
                exc.close()
                raise RuntimeError(f"phone home {target}: HTTP {exc.code} {exc.reason}") from None

        netns.run_in(self.net.netns, post)

    def _start_sshd(self) -> None:
        sshd = shutil.which("sshd") or "/usr/sbin/sshd"
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # privilege separation dir sshd insists on
        log = (self.dir / "ssh" / "sshd.log").open("ab")
        boot = self.dir / "ssh" / "boot_id"
        tmp = boot.with_name(".boot_id.tmp")
        tmp.write_text(f"{uuid.uuid4()}\n", encoding="ascii")
        tmp.replace(boot)  # a new file: a mount of the boot before keeps its own
        try:
            self._sshd = subprocess.Popen(
                netns.exec_argv(self.net.netns, [
                    "unshare", "--uts", "--mount", "--propagation", "private", "--", sys.executable, "-c",
                    _NODE_INIT, self.name, str(boot), BOOT_ID,
                    sshd, "-D", "-e", "-f", str(self.dir / "ssh" / "sshd_config"),
                ]),
                stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
            )
        finally:
            log.close()
        proc = self._sshd
        address = self.net.address

        def listening() -> bool:
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and proc.poll() is None:
                try:
                    socket.create_connection((address, 22), timeout=1).close()
                    return True
                except OSError:
                    time.sleep(0.01)
            return False

        if not netns.run_in(self.net.netns, listening):
            raise RuntimeError(f"sshd on {self.name} did not start listening; see {self.dir / 'ssh' / 'sshd.log'}")

    def power_off(self) -> None:
        """Pull the plug: shutdown hooks, then every process in the node's namespace dies."""
        with self._lock:
            if self.state == "off":
                return
            self._cancel.set()
            thread = self._boot_thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()
        with self._lock:
            try:
                for hook in self.on_shutdown:
                    hook(self.name)
            finally:
                netns.kill_all(self.net.netns, grace_s=0.5)
                if self._sshd is not None:
                    self._sshd.wait(timeout=10)
                    self._sshd = None
                self._write_facts(booted_at=None)
                clear_faults(self.dir, "reboot")  # power gone: the GPUs come back as a reboot leaves them
                self.state = "off"
                self._up.clear()

    def close(self) -> None:
        """Stop the node if it runs; its namespace belongs to the lab's network."""
        self.power_off()

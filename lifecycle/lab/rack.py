"""The assembled lab rack: simulated nodes, their BMCs and a real Slurm cluster, under one supervisor.

`racklife lab up` must return while the lab keeps running, and `lab down` must
leave nothing behind even if the lab crashed. So one supervisor process
(``python -m lifecycle.lab.rack serve LAB_DIR``) owns everything that lives in
a process (the Redfish and IPMI emulators, the nodes' boot and power logic,
the Slurm cluster), and it writes what it runs to ``LAB_DIR/state.json``.
Everything else is named so it can be found without it: namespaces by prefix
(``netns.teardown``), the Slurm PID namespace by the process group recorded
in the state file. ``control.cleanup`` uses only those, so it works after a
crash. The lab's dnsmasq and the ``--with-vm`` QEMU run in the hub namespace
and go with it.

Each node's BMC is the Redfish emulator serving a captured vendor tree (a
mix across nodes) or, for every fourth node, the IPMI emulator. Their power
hooks drive the node: power on boots it (sshd, then its slurmd), power off
pulls the plug; a reset is off then on.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import os
import secrets
import signal
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from lifecycle.lab import netns
from lifecycle.lab.control import JWT_LIFESPAN_S as JWT_LIFESPAN_S
from lifecycle.lab.control import STATE_FILE as STATE_FILE
from lifecycle.lab.control import cleanup as cleanup
from lifecycle.lab.control import read_state as read_state
from lifecycle.lab.control import slurm_token as slurm_token
from lifecycle.lab.control import supervisor_alive as supervisor_alive
from lifecycle.lab.control import write_json as write_json
from lifecycle.lab.dnsmasq import LabDhcp
from lifecycle.lab.faults import HEALTHY, Fault
from lifecycle.lab.firmware import racklife_phone_home
from lifecycle.lab.gputools import nvme
from lifecycle.lab.ipmi_emulator import BmcSpec as IpmiSpec
from lifecycle.lab.ipmi_emulator import IpmiEmulator
from lifecycle.lab.kube import KubeStandIn
from lifecycle.lab.kube.agent import NodeAgent
from lifecycle.lab.layout import build_inventory, write_lab_profile
from lifecycle.lab.node import LabSsh, NodeSpec, SimNode
from lifecycle.lab.ports import PortLease
from lifecycle.lab.redfish_emulator import BmcConfig, RedfishEmulator
from lifecycle.lab.redfish_emulator.hardware import ExtraHardware, drive_serial
from lifecycle.lab.slurm import LabSlurm, lab_config
from lifecycle.lab.vm import VmNode, VmSpec, qemu_binary
from lifecycle.model.inventory import Inventory, dump_inventory
from lifecycle.model.skus import SKUS

VENDOR_TREES = ("dell-idrac-bmclib", "hpe-ilo5-dl325", "openbmc-stock", "dmtf-public-rackmount1")
DEFAULT_LAB_DIR = Path(os.environ.get("RACKLIFE_LAB_DIR", "/var/lib/racklife/lab"))
CONFIG_FILE = "lab.json"
BMC_USER = "admin"
BOOT_PORT = 8069  # the boot server's port at the hub's controller address
SHARED = Path(__file__).resolve().parents[2] / ".." / "shared"
VM_NAME = "vm-01"


@dataclass(frozen=True)
class RackConfig:
    lab_dir: Path = DEFAULT_LAB_DIR
    nodes: int = 8
    racks: int = 0
    """0: one rack per eight nodes."""
    sku: str = "h100-sxm-8"
    boot_time_s: float = 1.0
    power_delay_s: float = 0.5
    prefix: str = netns.DEFAULT_PREFIX
    subnet: str = netns.DEFAULT_SUBNET
    ipmi_every: int = 4
    """Every Nth node gets the IPMI emulator as its BMC (0: every node Redfish)."""
    inference: int | None = None
    """How many of the last nodes are in the ``inference`` pool (None: a quarter)."""
    faults: dict[str, Fault] = field(default_factory=dict)
    fixtures: Path = SHARED / "fixtures"
    ready_timeout_s: float = 120.0
    boot_port: int = 0
    """Host loopback port where the controller's boot server listens (0: pick a free one)."""
    with_vm: bool = False
    """One extra node, ``vm-01``: a QEMU VM that network-boots through dnsmasq and iPXE."""
    vm_memory_mb: int = 256
    slurm_rest: bool = True
    """Run slurmrestd (JWT auth) beside slurmctld."""
    slurm_accounting: bool = True
    """Run slurmdbd with MariaDB and account every job there (``sacct``, ``sreport``)."""
    slurm_backup_controller: bool = True
    """A backup slurmctld beside the primary (it takes over when the primary dies)."""
    slurm_configless: bool = True
    """slurmd fetch their configuration from slurmctld (``--conf-server``)."""

    @property
    def rack_count(self) -> int:
        return self.racks or max(1, math.ceil(self.nodes / 8))

    def names(self) -> list[str]:
        width = max(2, len(str(self.nodes)))
        return [f"node-{i + 1:0{width}d}" for i in range(self.nodes)]

    def validate(self) -> None:
        if not 1 <= self.nodes <= 1000:
            raise ValueError("--nodes must be between 1 and 1000")
        if self.ipmi_every < 0:
            raise ValueError("--ipmi-every must be 0 (no IPMI BMC) or more")
        if self.inference is not None and not 0 <= self.inference <= self.nodes:
            raise ValueError(f"--inference must be between 0 and --nodes ({self.nodes})")
        per_rack = math.ceil(self.nodes / self.rack_count)
        if self.rack_count > self.nodes or per_rack > 20:
            raise ValueError(f"{self.nodes} nodes do not fit {self.rack_count} racks (at most 20 per rack)")
        unknown = sorted(set(self.faults) - set(self.names()))
        if unknown:
            raise ValueError(f"faults name nodes that are not in the lab: {', '.join(unknown)}")
        netns.check_prefix(self.prefix)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data.update(lab_dir=str(self.lab_dir), fixtures=str(self.fixtures),
                    faults={k: asdict(v) for k, v in self.faults.items()})
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RackConfig:
        data = dict(data)
        data.update(lab_dir=Path(data["lab_dir"]), fixtures=Path(data["fixtures"]),
                    faults={k: Fault(**v) for k, v in data.get("faults", {}).items()})
        return cls(**data)


def _others_can_reach(path: Path) -> bool:
    """Whether an unprivileged user can walk down to ``path`` (slurmrestd reads slurm.conf as nobody)."""
    return all(p.stat().st_mode & stat.S_IXOTH for p in [path, *path.parents])


class Rack:
    """The running lab, inside the supervisor process."""

    def __init__(self, config: RackConfig) -> None:
        config.validate()
        self.config = config
        self.dir = config.lab_dir
        self.net = netns.LabNet(config.prefix, config.subnet)
        self.nodes: dict[str, SimNode] = {}
        self.by_bmc: dict[str, str] = {}
        self.slurm: LabSlurm | None = None
        self.redfish: RedfishEmulator | None = None
        self.ipmi: IpmiEmulator | None = None
        self.kube: KubeStandIn | None = None
        self.kubelets: dict[str, NodeAgent] = {}
        self.boot_forward: netns.Forward | None = None
        self.dhcp: LabDhcp | None = None
        self.vm: VmNode | None = None
        self.burnin_profile: Path | None = None
        self.boot_port = 0
        self._ports = PortLease()
        self.inventory: Inventory | None = None
        self._power: dict[str, ThreadPoolExecutor] = {}
        """One worker per node: its power events apply in the order the BMC sent them."""
        self._stop = threading.Event()
        self._hooks_live = False  # BMC events before the first power-on are the lab's own setup
        self.started = time.time()
        self.phase = "starting"
        self.error: str | None = None
        self.notes: list[str] = []

    # ------------------------------------------------------------- power hooks

    def _apply(self, name: str, state: str) -> None:
        node: SimNode | VmNode | None = self.nodes.get(name)
        if node is None and self.vm is not None and self.vm.name == name:
            node = self.vm
        if node is None or not self._hooks_live:
            return
        if state == "on" and node.power_state == "On":
            node.power_off()  # a reset: the node goes down and boots again
        if state == "on":
            node.power_on()
        else:
            node.power_off()

    def _submit(self, name: str, state: str) -> None:
        if name not in self._power:
            self._power[name] = ThreadPoolExecutor(1, thread_name_prefix=f"power-{name}")
        self._power[name].submit(self._apply, name, state)

    def _redfish_power(self, bmc: str, _system: str, state: str) -> None:
        self._submit(self.by_bmc[bmc], "on" if state == "On" else "off")

    def _redfish_erase(self, bmc: str, serial: str, ok: bool) -> None:
        """A secure erase reached a drive: its Sanitize Status log says how it ended (the node's ``nvme``), and
        one that ended well wrote zeros over its media (what the sampled reads read)."""
        node = self.nodes.get(self.by_bmc.get(bmc, ""))
        if node is not None:
            nvme.record_sanitize(node.dir, serial, ok)

    def _ipmi_power(self, bmc: str, state: str) -> None:
        self._submit(self.by_bmc[bmc], state)

    def _node_started(self, name: str) -> None:
        """What a booted node starts: its slurmd (Slurm pools) or its kubelet (Kubernetes pools)."""
        if self.slurm is not None and name in self.slurm.ports:
            self.slurm.start_node(name, wait=False)
            return
        inv = self.inventory
        if self.kube is not None and inv is not None and inv.pool(inv.node(name).pool).scheduler == "kubernetes":
            pool = inv.pool(inv.node(name).pool)
            old = self.kubelets.pop(name, None)
            if old is not None:
                old.stop()
            # The kubelet registers the Node with the SKU's GPUs, renews its Lease and runs its pods.
            self.kubelets[name] = NodeAgent(self.kube, name, inv.node(name).sku, labels=pool.labels).start()

    def _node_stopped(self, name: str) -> None:
        agent = self.kubelets.pop(name, None)
        if agent is not None:
            agent.stop()
        if self.kube is not None and name not in (self.slurm.ports if self.slurm else {}):
            with contextlib.suppress(Exception):  # not joined (yet): nothing to mark
                self.kube.set_ready(name, False)  # a powered-off kubelet stops posting status
        self._slurmd_stop(name)

    def _slurmd_stop(self, name: str) -> None:
        slurm = self.slurm
        if slurm is None or name not in slurm.ports:
            return
        slurm.stop_node(name)
        # What slurmctld concludes SlurmdTimeout seconds after a node loses power, said at once;
        # ReturnToService=2 brings the node back when its slurmd registers after power-on. Like
        # slurmctld (set_node_down_ptr keeps a reason that is there), a drained node keeps its drain's
        # reason, and so its owner: a node reimaged while racklife holds it drained stays racklife's.
        seen = subprocess.run(["sinfo", "-h", "-N", "-n", name, "-o", "%T|%E"], capture_output=True, text=True,
                              env=slurm.env(), timeout=10, check=False).stdout.strip().partition("|")
        reason = seen[2] if "drain" in seen[0] and seen[2] and seen[2] != "none" else "lab: powered off"
        subprocess.run(["scontrol", "update", f"nodename={name}", "state=down", f"reason={reason}"],
                       capture_output=True, env=slurm.env(), timeout=10, check=False)

    # ------------------------------------------------------------- lifecycle

    def start(self) -> None:
        c = self.config
        self.dir.mkdir(parents=True, exist_ok=True)
        creds = self.dir / "bmc-credentials"
        password = secrets.token_urlsafe(16)
        creds.touch(mode=0o600)
        creds.write_text(f"{BMC_USER}:{password}\n", encoding="utf-8")
        self.net.create()
        names = c.names()
        nets = {n.name: n for n in self.net.add_nodes(names)}
        vm = VM_NAME if c.with_vm else None
        if vm:
            qemu_binary()  # fail before anything else starts when QEMU or its iPXE ROM is missing
            nets[vm] = self.net.add_tap(vm)
        ssh = LabSsh(self.dir, self.net.hub)
        ssh.prepare()
        rf_configs, ipmi_specs, kinds = [], [], {}
        for i, name in enumerate([*names, *([vm] if vm else [])]):
            bmc = f"bmc-{name}"
            self.by_bmc[bmc] = name
            if name != vm and c.ipmi_every and i % c.ipmi_every == c.ipmi_every - 1:
                ipmi_specs.append(IpmiSpec(name=bmc, port=self._ports.take(1)[0], username=BMC_USER,
                                           password=password, power_on=True, power_delay_s=c.power_delay_s,
                                           serial=f"LAB{i + 1:05d}"))
                kinds[name] = "ipmi"
            else:
                tree = c.fixtures / "redfish" / VENDOR_TREES[i % len(VENDOR_TREES)]
                hw = ExtraHardware(gpus=SKUS[c.sku].gpu_count, gpu_model=SKUS[c.sku].gpu_model, drives=2,
                                   system_serial=f"LAB{i + 1:05d}", nic_macs=(nets[name].mac,))
                rf_configs.append(BmcConfig(bmc, tree, BMC_USER, password, power_delay_s=c.power_delay_s,
                                            hardware=hw))
                kinds[name] = "redfish"
        self.redfish = RedfishEmulator(rf_configs, on_power=self._redfish_power, on_erase=self._redfish_erase).start()
        self.ipmi = IpmiEmulator(ipmi_specs, on_power=self._ipmi_power).start() if ipmi_specs else None
        addresses = {s.name: ("ipmi", f"127.0.0.1:{s.port}") for s in ipmi_specs}
        addresses.update({b: ("redfish", url) for b, url in self.redfish.urls.items()})
        self.inventory = build_inventory(names, c.rack_count, c.sku, nets,
                                         {n: addresses[f"bmc-{n}"] for n in nets}, creds, vm=vm,
                                         inference=c.inference)
        (self.dir / "inventory.yaml").write_text(dump_inventory(self.inventory), encoding="utf-8")
        rest = c.slurm_rest and _others_can_reach(self.dir)
        if c.slurm_rest and not rest:
            self.notes.append(f"slurmrestd not started: it runs as 'nobody', which cannot reach {self.dir} "
                              "(a directory above it is not world-searchable)")
        self.slurm = LabSlurm(lab_config(self.inventory, self.dir / "slurm", start_nodes=[], rest=rest,
                                         accounting=c.slurm_accounting,
                                         backup_controller=c.slurm_backup_controller,
                                         configless=c.slurm_configless)).start()
        self.kube = KubeStandIn().start()
        self.kube.write_kubeconfig(self.dir / "kube" / "kubeconfig")
        # Nodes reach the controller's boot server at the hub's controller address; the lab
        # carries those connections to the host loopback, where `racklife provision` listens.
        # `racklife provision` binds the boot port whenever the user runs it: a port the kernel
        # could meanwhile give to an outgoing connection will not do (see lifecycle.lab.ports).
        self.boot_port = c.boot_port or self._ports.take(1)[0]
        self.boot_forward = netns.Forward(self.net.hub, (self.net.controller, BOOT_PORT),
                                          ("127.0.0.1", self.boot_port))
        boot_base = f"http://{self.net.controller}:{BOOT_PORT}"
        self.dhcp = LabDhcp(self.dir, self.net.hub, netns.BRIDGE, c.subnet, boot_base).start(self.inventory)
        if vm:
            self.vm = VmNode(VmSpec(vm, memory_mb=c.vm_memory_mb), nets[vm], self.dir)
            self.vm.prepare()
        serials = {n.name: n.serial for n in (self.inventory.nodes if self.inventory else [])}
        for name in names:
            ns = nets[name].netns
            spec = NodeSpec(name, c.sku, boot_time_s=c.boot_time_s, boot_url=boot_base + "/boot/{mac}.ipxe",
                            serial=serials.get(name),
                            phone_home=racklife_phone_home([nets[name].mac],
                                                           run_in=functools.partial(netns.run_in, ns)))
            self.nodes[name] = SimNode(
                spec, nets[name], self.dir, ssh,
                fault=c.faults.get(name, HEALTHY), on_boot=[self._node_started], on_shutdown=[self._node_stopped])
        for node in self.nodes.values():
            node.prepare()
        for cfg in rf_configs:  # what the node's OS sees of the drives its BMC reports
            name, hw = self.by_bmc[cfg.name], cfg.hardware
            if name in self.nodes:
                nvme.install_drives(self.nodes[name].dir, [nvme.Drive(drive_serial(hw, i), hw.drive_model,
                                                                      hw.drive_capacity_bytes)
                                                           for i in range(hw.drives)])
        ssh.write_config(list(self.nodes.values()))
        self.burnin_profile = write_lab_profile(c.sku, self.dir / "profiles" / f"lab-{c.sku}.toml")
        self.write_state()
        redfish = self.redfish
        for bmc, state in redfish.states.items():
            # A tree captured powered off (openbmc) is switched on; the VM starts off: an idle
            # VM spinning in its firmware under TCG would cost a CPU for nothing.
            path, want = state.systems[0], "Off" if vm and bmc == f"bmc-{vm}" else "On"
            if state.power_state(path) != want:
                redfish.call(functools.partial(state.set_power, path, want, boot=want == "On"))
        for node in self.nodes.values():
            node.power_on()
        self._hooks_live = True
        self._wait_ready()
        self.phase = "ready"
        self.write_state()

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.config.ready_timeout_s
        for node in self.nodes.values():
            if not node.wait_up(max(0.0, deadline - time.monotonic())):
                raise RuntimeError(f"{node.name} did not boot: {node.boot_error or 'timed out'}")
        slurm = self.slurm
        assert slurm is not None and self.inventory is not None
        inv = self.inventory
        wanted = {n.name for n in inv.nodes if inv.pool(n.pool).scheduler == "slurm"}
        while time.monotonic() < deadline:
            out = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %T"], capture_output=True, text=True,
                                 env=slurm.env(), timeout=10, check=False).stdout
            idle = {line.split()[0] for line in out.splitlines() if line.split()[1:] == ["idle"]}
            if wanted <= idle:
                return
            time.sleep(0.2)
        raise RuntimeError("Slurm nodes did not all become idle")

    def state(self) -> dict[str, Any]:
        inv = {n.name: n for n in self.inventory.nodes} if self.inventory else {}
        slurm = self.slurm
        init = getattr(slurm, "_init", None)  # the Slurm PID namespace's unshare: its own session
        return {
            "phase": self.phase, "error": self.error, "pid": os.getpid(), "prefix": self.config.prefix,
            "subnet": self.config.subnet, "lab_dir": str(self.dir), "started_at": self.started,
            "config": self.config.to_json(),
            "inventory": str(self.dir / "inventory.yaml"),
            "slurm_conf": str(slurm.conf) if slurm else None,
            "slurm_pgid": init.pid if init is not None else None,
            "ssh_config": str(self.dir / "ssh" / "config"),
            "kubeconfig": str(self.dir / "kube" / "kubeconfig") if self.kube else None,
            "controller": self.net.controller,
            "burnin": {"profile": str(self.burnin_profile) if self.burnin_profile else None,
                       "python": sys.executable},
            "boot": {"listen": f"127.0.0.1:{self.boot_port}", "url": f"http://{self.net.controller}:{BOOT_PORT}"}
            if self.boot_port else None,
            "dhcp": self.dhcp.status() if self.dhcp else None,
            "slurm_rest_url": slurm.rest_url if slurm else None,
            "slurmdbd": f"127.0.0.1:{slurm.ports['slurmdbd']}" if slurm and "slurmdbd" in slurm.ports else None,
            "notes": self.notes,
            "nodes": [*({
                "name": n.name, "kind": "sim", "address": n.net.address, "mac": n.net.mac,
                "pool": inv[n.name].pool if n.name in inv else None,
                "bmc": {"driver": inv[n.name].bmc.driver, "address": inv[n.name].bmc.address}
                if n.name in inv else None,
                "power": n.power_state, "state": n.state, "boot_error": n.boot_error, "boots": n.boots,
                "dir": str(n.dir),
            } for n in self.nodes.values()), *([self._vm_state(self.vm, inv)] if self.vm else [])],
        }

    @staticmethod
    def _vm_state(vm: VmNode, inv: dict[str, Any]) -> dict[str, Any]:
        spec = inv.get(vm.name)
        return {
            "name": vm.name, "kind": "vm", "address": vm.net.address, "mac": vm.net.mac,
            "pool": spec.pool if spec else None,
            "bmc": {"driver": spec.bmc.driver, "address": spec.bmc.address} if spec else None,
            "power": vm.power_state, "state": vm.state, "boot_error": vm.boot_error, "boots": vm.boots,
            "dir": str(vm.dir), "pid": vm.pid, "console": str(vm.console), "phoned_home": vm.phoned_home(),
        }

    def write_state(self) -> None:
        write_json(self.dir / STATE_FILE, self.state())

    def serve(self) -> None:
        """Keep the state file current until SIGTERM."""
        last = ""
        while not self._stop.wait(0.5):
            text = json.dumps(self.state(), default=str)
            if text != last:
                self.write_state()
                last = text

    def request_stop(self) -> None:
        self._stop.set()

    def stop(self) -> None:
        self.phase = "stopping"
        with contextlib.suppress(OSError):
            self.write_state()
        machines: list[SimNode | VmNode] = [*self.nodes.values(), *([self.vm] if self.vm else [])]
        for node in machines:
            with contextlib.suppress(Exception):
                node.close()
        for worker in self._power.values():
            worker.shutdown(wait=True, cancel_futures=True)
        closers: list[Callable[[], None]] = []
        if self.slurm is not None:
            closers.append(self.slurm.stop)
        if self.redfish is not None:
            closers.append(self.redfish.stop)
        if self.ipmi is not None:
            closers.append(self.ipmi.stop)
        closers += [agent.stop for agent in self.kubelets.values()]
        if self.kube is not None:
            closers.append(self.kube.stop)
        if self.boot_forward is not None:
            closers.append(self.boot_forward.close)
        if self.dhcp is not None:
            closers.append(self.dhcp.stop)
        for close in closers:
            with contextlib.suppress(Exception):
                close()
        self._ports.release()
        self.net.teardown()
        self.phase = "down"
        with contextlib.suppress(OSError):
            write_json(self.dir / STATE_FILE, {**self.state(), "pid": None, "slurm_pgid": None})


def serve(lab_dir: Path) -> int:
    """The supervisor: start the rack from ``LAB_DIR/lab.json``, serve until SIGTERM, stop it."""
    config = RackConfig.from_json(json.loads((lab_dir / CONFIG_FILE).read_text(encoding="utf-8")))
    write_json(lab_dir / STATE_FILE, {"phase": "starting", "pid": os.getpid(), "prefix": config.prefix})
    rack = Rack(config)
    signal.signal(signal.SIGTERM, lambda *_: rack.request_stop())
    signal.signal(signal.SIGINT, lambda *_: rack.request_stop())
    try:
        rack.start()
        rack.serve()
        return 0
    except Exception as exc:
        rack.phase, rack.error = "failed", f"{type(exc).__name__}: {exc}"
        with contextlib.suppress(OSError):
            rack.write_state()
        print(f"racklife lab: {rack.error}", file=sys.stderr, flush=True)
        return 1
    finally:
        error = rack.error
        rack.stop()
        if error:
            write_json(lab_dir / STATE_FILE, {**rack.state(), "phase": "failed", "error": error,
                                              "pid": None, "slurm_pgid": None})


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "serve":
        sys.exit(serve(Path(sys.argv[2])))
    sys.exit("usage: python -m lifecycle.lab.rack serve LAB_DIR")

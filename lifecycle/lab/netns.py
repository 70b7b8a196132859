"""The lab's private network: one namespace per simulated node, bridged in a hub namespace.

Every simulated node needs its own address (slurmd, sshd and the boot client
bind to it as on a real host) without touching the machine's own network.
So the lab creates, all named with one prefix:

- a hub namespace ``<prefix>hub`` holding a bridge ``br0`` with the
  controller address (first host of the lab subnet) where lab services
  (boot server, slurmctld) can listen;
- one namespace ``<prefix><node>`` per node, with ``eth0`` (one end of a veth
  pair whose other end is a bridge port in the hub) and the node's address;
- for a QEMU node, a tap port of the bridge in the hub (``add_tap``): the
  guest takes its address from the lab's DHCP server like a real machine.

Nothing is ever added to the host's namespace: no address, no route, no NAT.
Namespaces get no default route and IP forwarding stays off, so lab traffic
cannot leave the lab. The host reaches lab addresses only by entering the hub
(``run_in``, or ``relay`` as an SSH ProxyCommand).

Teardown works from names alone (``ip netns list``), so it cleans up after a
crashed lab as well as a running one: kill what runs in each namespace, then
delete it. A lab refuses to start while any namespace with its prefix exists.
"""

from __future__ import annotations

import contextlib
import ctypes
import ipaddress
import os
import re
import selectors
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TypeVar

from lifecycle.model import vocab

DEFAULT_PREFIX = "rl-"
DEFAULT_SUBNET = "10.77.0.0/16"
HUB = "hub"
BRIDGE = "br0"
NETNS_DIR = "/run/netns"
CLONE_NEWNET = 0x40000000
_PREFIX_RE = re.compile(r"^[a-z][a-z0-9]{0,11}-\Z")
T = TypeVar("T")


class NetnsError(RuntimeError):
    """An `ip` command failed or the lab's network is in an unexpected state."""


class LabRunningError(NetnsError):
    """Namespaces of a lab with this prefix exist: refuse to start another over it."""

    def __init__(self, prefix: str, names: list[str]) -> None:
        self.names = names
        super().__init__(
            f"a lab with prefix '{prefix}' is already running (namespaces: {', '.join(names)}); "
            "run 'racklife lab down' first"
        )


def _ip(*args: str, stdin: str | None = None) -> str:
    proc = subprocess.run(["ip", *args], input=stdin, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise NetnsError(f"ip {' '.join(args)}: {proc.stderr.strip() or proc.stdout.strip()}")
    return proc.stdout


def namespaces() -> list[str]:
    """Names of all named network namespaces on this machine."""
    return [line.split()[0] for line in _ip("netns", "list").splitlines() if line.strip()]


def running(prefix: str) -> list[str]:
    """Namespaces that belong to a lab with this prefix (running or left by a crash)."""
    return sorted(n for n in namespaces() if n.startswith(prefix))


def pids_in(netns: str) -> list[int]:
    try:
        out = _ip("netns", "pids", netns)
    except NetnsError:
        return []
    return [int(p) for p in out.split() if p.isdigit()]


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


def kill_all(netns: str, grace_s: float = 2.0) -> int:
    """Stop every process in a namespace: SIGTERM, then SIGKILL after ``grace_s``. Returns how many."""
    pids = pids_in(netns)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + grace_s
        while any(_alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.02)
        pids = [p for p in pids_in(netns) if _alive(p)]
        if not pids:
            break
    return len(pids)


def teardown(prefix: str, grace_s: float = 2.0) -> list[str]:
    """Remove every namespace of the lab with this prefix, and what runs in them; idempotent."""
    check_prefix(prefix)
    names = running(prefix)
    # Nodes first, hub last: a node's veth peer disappears with the node.
    for name in sorted(names, key=lambda n: n == prefix + HUB):
        kill_all(name, grace_s)
        try:
            _ip("netns", "delete", name)
        except NetnsError:
            if name in namespaces():
                raise
    return names


def check_prefix(prefix: str) -> str:
    if not _PREFIX_RE.match(prefix):
        raise ValueError(f"lab prefix '{prefix}' must be a lower-case letter, up to 11 letters/digits, then '-'")
    return prefix


@dataclass(frozen=True)
class NodeNet:
    name: str
    netns: str
    address: str
    prefixlen: int
    mac: str
    port: str
    """The node's bridge port (veth end) in the hub namespace."""


def _libc_setns(fd: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def enter(netns: str) -> None:
    """Move the calling thread into a namespace (the rest of the process stays put)."""
    fd = os.open(os.path.join(NETNS_DIR, netns), os.O_RDONLY)
    try:
        _libc_setns(fd)
    finally:
        os.close(fd)


def run_in(netns: str, fn: Callable[[], T]) -> T:
    """Call ``fn`` on a fresh thread inside ``netns``; sockets it opens live there."""
    box: dict[str, object] = {}

    def target() -> None:
        try:
            enter(netns)
            box["value"] = fn()
        except BaseException as exc:  # re-raised in the caller's thread
            box["error"] = exc

    t = threading.Thread(target=target, name=f"netns-{netns}", daemon=True)
    t.start()
    t.join()
    if "error" in box:
        raise box["error"]  # type: ignore[misc]
    return box["value"]  # type: ignore[return-value]


def exec_argv(netns: str, argv: Iterable[str]) -> list[str]:
    """An argv that runs a program inside ``netns`` (for daemons started with Popen)."""
    return ["ip", "netns", "exec", netns, *argv]


class LabNet:
    """The network of one lab: its hub and its nodes' namespaces."""

    def __init__(self, prefix: str = DEFAULT_PREFIX, subnet: str = DEFAULT_SUBNET) -> None:
        self.prefix = check_prefix(prefix)
        self.subnet = ipaddress.IPv4Network(subnet)
        if not self.subnet.is_private or self.subnet.prefixlen > 22:
            raise ValueError(f"lab subnet {subnet} must be a private IPv4 range of /22 or larger")
        self.hub = prefix + HUB
        self.controller = str(self.subnet.network_address + 1)
        self.nodes: dict[str, NodeNet] = {}
        self.taps: dict[str, NodeNet] = {}

    def address_of(self, index: int) -> str:
        return str(self.subnet.network_address + 256 * (1 + index // 200) + 1 + index % 200)

    def create(self) -> None:
        """Create the hub; refuses when any namespace of this prefix exists."""
        existing = running(self.prefix)
        if existing:
            raise LabRunningError(self.prefix, existing)
        _ip("netns", "add", self.hub)
        try:
            _ip("-n", self.hub, "-batch", "-", stdin="\n".join([
                "link set lo up",
                f"link add {BRIDGE} type bridge",
                f"addr add {self.controller}/{self.subnet.prefixlen} dev {BRIDGE}",
                f"link set {BRIDGE} up",
            ]) + "\n")
            self._no_forwarding(self.hub)
        except Exception:
            teardown(self.prefix)
            raise

    @staticmethod
    def _no_forwarding(netns: str) -> None:
        def write() -> None:
            for path in ("/proc/sys/net/ipv4/ip_forward", "/proc/sys/net/ipv6/conf/all/forwarding"):
                with open(path, "w", encoding="ascii") as f:
                    f.write("0\n")

        run_in(netns, write)

    def add_nodes(self, names: Iterable[str]) -> list[NodeNet]:
        """Create namespaces, veth pairs and addresses for these nodes (batched)."""
        new: list[NodeNet] = []
        for name in names:
            if not vocab.is_node_name(name):
                raise ValueError(f"'{name}' is not a valid node name")
            if name in self.nodes:
                raise ValueError(f"node '{name}' is already in the lab")
            i = len(self.nodes) + len(self.taps) + len(new)
            new.append(NodeNet(name, self.prefix + name, self.address_of(i), self.subnet.prefixlen,
                               f"02:72:6c:{(i >> 16) & 0xFF:02x}:{(i >> 8) & 0xFF:02x}:{i & 0xFF:02x}",
                               f"v{i}"))
        if not new:
            return []
        _ip("-batch", "-", stdin="".join(f"netns add {n.netns}\n" for n in new))
        hub_cmds = []
        for n in new:
            hub_cmds += [f"link add {n.port} type veth peer name eth0 netns {n.netns}",
                         f"link set {n.port} master {BRIDGE} up"]
        _ip("-n", self.hub, "-batch", "-", stdin="\n".join(hub_cmds) + "\n")
        for n in new:
            _ip("-n", n.netns, "-batch", "-", stdin="\n".join([
                "link set lo up",
                f"link set eth0 address {n.mac}",
                f"addr add {n.address}/{n.prefixlen} dev eth0",
                "link set eth0 up",
            ]) + "\n")
            self._no_forwarding(n.netns)
            self.nodes[n.name] = n
        return new

    def add_tap(self, name: str) -> NodeNet:
        """A tap port on the bridge for a VM (QEMU opens it from the hub), with the next node address.

        The VM has no namespace of its own: its guest is the host on the tap's
        far side. The returned ``netns`` is the hub, where QEMU must run, and
        ``port`` the tap. Its MAC has QEMU's prefix, as a QEMU NIC's would.
        """
        if not vocab.is_node_name(name):
            raise ValueError(f"'{name}' is not a valid node name")
        if name in self.nodes or name in self.taps:
            raise ValueError(f"node '{name}' is already in the lab")
        i = len(self.nodes) + len(self.taps)
        tap = NodeNet(name, self.hub, self.address_of(i), self.subnet.prefixlen,
                      f"52:54:00:{(i >> 16) & 0xFF:02x}:{(i >> 8) & 0xFF:02x}:{i & 0xFF:02x}", f"t{i}")
        _ip("-n", self.hub, "-batch", "-", stdin="\n".join([
            f"tuntap add dev {tap.port} mode tap",
            f"link set {tap.port} master {BRIDGE} up",
        ]) + "\n")
        self.taps[name] = tap
        return tap

    def remove_node(self, name: str) -> None:
        n = self.nodes.pop(name)
        kill_all(n.netns)
        _ip("netns", "delete", n.netns)

    def teardown(self) -> list[str]:
        self.nodes.clear()
        self.taps.clear()
        return teardown(self.prefix)


class Forward:
    """Listen on ``listen`` inside a namespace; carry each connection to ``target`` in the host's.

    The lab's nodes reach controller services (the boot server) at the hub's
    controller address this way; nothing is routed, only these connections
    are carried, and only to the host's loopback.
    """

    def __init__(self, netns: str, listen: tuple[str, int], target: tuple[str, int]) -> None:
        self.target = target

        def bind() -> socket.socket:
            srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            srv.bind(listen)
            srv.listen(64)
            return srv

        self._server = run_in(netns, bind)
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._accept, name=f"forward-{netns}", daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                conn, _ = self._server.accept()
            except OSError:
                return
            threading.Thread(target=self._carry, args=(conn,), daemon=True).start()

    def _carry(self, conn: socket.socket) -> None:
        try:
            upstream = socket.create_connection(self.target, timeout=10)
        except OSError:
            conn.close()
            return
        upstream.settimeout(None)

        def pump(a: socket.socket, b: socket.socket) -> None:
            try:
                while data := a.recv(65536):
                    b.sendall(data)
            except OSError:
                pass
            finally:
                with contextlib.suppress(OSError):
                    b.shutdown(socket.SHUT_WR)

        t = threading.Thread(target=pump, args=(upstream, conn), daemon=True)
        t.start()
        pump(conn, upstream)
        t.join(60)
        conn.close()
        upstream.close()

    def close(self) -> None:
        self._closed.set()
        with contextlib.suppress(OSError):
            self._server.shutdown(socket.SHUT_RDWR)
        self._server.close()


def relay(netns: str, host: str, port: int) -> None:
    """Join stdin/stdout to a TCP connection made inside ``netns`` (an SSH ProxyCommand)."""
    enter(netns)
    try:
        sock = socket.create_connection((host, port), timeout=10)
    except OSError as exc:
        sys.exit(f"racklife lab: cannot connect to {host}:{port} in {netns}: {exc.strerror or exc}")
    sock.settimeout(None)
    sel = selectors.DefaultSelector()
    stdin = sys.stdin.buffer.fileno()
    stdout = sys.stdout.buffer.fileno()
    sel.register(stdin, selectors.EVENT_READ)
    sel.register(sock, selectors.EVENT_READ)
    open_fds = 2
    while open_fds:
        for key, _ in sel.select():
            if key.fileobj == stdin:
                data = os.read(stdin, 65536)
                if not data:
                    sel.unregister(stdin)
                    sock.shutdown(socket.SHUT_WR)
                    open_fds -= 1
                else:
                    sock.sendall(data)
            else:
                data = sock.recv(65536)
                if not data:
                    return
                view = memoryview(data)
                while view:
                    view = view[os.write(stdout, view):]


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "relay":
        relay(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    else:
        sys.exit("usage: python -m lifecycle.lab.netns relay NETNS HOST PORT")

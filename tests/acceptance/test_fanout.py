"""Fan-out over real SSH: an OpenSSH server on 127.0.0.1, key authentication only.

Each "node" is the same sshd reached under another node name; burn-in runs there for
real (``python -m burnin run``) with captured tool outputs on its PATH, and the result
directory is fetched back. Unreachable, mis-keyed, unknown-host-key and hanging nodes
come back as failed nodes with the reason, and the other nodes' results are unaffected.
Both transports run the same tests: fabric driven by an ssh_config (what the workflow
uses) and the system ssh client.
"""

from __future__ import annotations

import contextlib
import os
import socket
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import paramiko
import pytest

from acceptance import ssh_fabric
from acceptance.fanout import (
    SSH_UNREACHABLE,
    BurninCommand,
    FanoutError,
    NodeOutcome,
    OpenSSH,
    RemoteRun,
    Target,
    Transport,
    fan_out,
    to_input,
)
from acceptance.ssh_fabric import HANDSHAKE_ATTEMPTS, STALL_GRACE_S, FabricSSH
from lifecycle.workflows import repair_actions, retry

SSHD = "/usr/sbin/sshd"


@dataclass(frozen=True)
class Sshd:
    port: int
    client_key: Path
    known_hosts: Path
    other_key: Path  # a key the server does not accept


def _keygen(path: Path) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)


@pytest.fixture(scope="module")
def sshd(tmp_path_factory: pytest.TempPathFactory, free_port: Callable[[], int]) -> Iterator[Sshd]:
    assert os.geteuid() == 0, "this test starts sshd and logs in as root: run it as root"
    assert Path(SSHD).is_file(), "Debian package openssh-server is required"
    d = tmp_path_factory.mktemp("sshd")
    for name in ("host", "client", "other"):
        _keygen(d / name)
    (d / "authorized_keys").write_text((d / "client.pub").read_text())
    port = free_port()
    (d / "sshd_config").write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {d / 'host'}\nPidFile {d / 'sshd.pid'}\n"
        f"AuthorizedKeysFile {d / 'authorized_keys'}\nPubkeyAuthentication yes\nPasswordAuthentication no\n"
        "KbdInteractiveAuthentication no\nUsePAM no\nPermitRootLogin prohibit-password\nStrictModes no\n"
        "MaxStartups 50\nLogLevel ERROR\nSubsystem sftp internal-sftp\n"
        "SetEnv SHLVL=1\n")  # not the host's ~/.bashrc in every command (lifecycle/lab/node.py says why)
    Path("/run/sshd").mkdir(exist_ok=True)  # privilege separation directory
    log = (d / "sshd.log").open("wb")
    proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(d / "sshd_config")], stderr=log)
    host_key = (d / "host.pub").read_text().split()
    (d / "known_hosts").write_text(f"[127.0.0.1]:{port} {host_key[0]} {host_key[1]}\n")
    deadline = time.monotonic() + 15
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            assert proc.poll() is None, f"sshd exited: {(d / 'sshd.log').read_text()}"
            assert time.monotonic() < deadline, "sshd did not start listening"
            time.sleep(0.05)
    try:
        yield Sshd(port, d / "client", d / "known_hosts", d / "other")
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        log.close()


@pytest.fixture(scope="module")
def node_path(tmp_path_factory: pytest.TempPathFactory, fixtures_dir: Path) -> Path:
    """A PATH of node tools that print captured outputs (ibstat, all_reduce_perf, dcgmi)."""
    bin_dir = tmp_path_factory.mktemp("node-bin")
    tools = {
        "ibstat": fixtures_dir / "infiniband/gpud_ibstat.47.0.h100.all.active.0.txt",
        "all_reduce_perf": fixtures_dir / "nccl/h100x8_all_reduce_perf_single-node_nvls_issue290.txt",
        "dcgmi": fixtures_dir / "dcgm/virtualclient/DCGMIDiag_r1_results.json",
    }
    for name, out in tools.items():
        tool = bin_dir / name
        tool.write_text(f'#!/bin/sh\n/bin/cat "{out}"\n')
        tool.chmod(tool.stat().st_mode | stat.S_IEXEC)
    return bin_dir


def command(node_path: Path, tmp: Path, python: str = sys.executable) -> BurninCommand:
    # the GPU soak needs a GPU and takes longest to set up; skipped, it is recorded as an error
    return BurninCommand("h100-sxm-8", "quick", "run-0001", python=python, base_dir=str(tmp / "remote"),
                         env={"PATH": f"{node_path}:/usr/bin:/bin"}, skip=("stress",))


def ssh_config(sshd: Sshd, d: Path, key: Path, known_hosts: Path, nodes: dict[str, int]) -> Path:
    """An ssh_config with one Host block per node name (each a port on 127.0.0.1)."""
    blocks = [f"Host {name}\n    HostName 127.0.0.1\n    Port {port}\n    User root\n    IdentityFile \"{key}\"\n"
              f"    IdentitiesOnly yes\n    UserKnownHostsFile \"{known_hosts}\"\n    StrictHostKeyChecking yes\n"
              for name, port in nodes.items()]
    path = d / "ssh_config"
    path.write_text("\n".join(blocks))
    return path


def transport(kind: str, sshd: Sshd, d: Path, names: Sequence[str], *, key: Path | None = None,
              known_hosts: Path | None = None, ports: dict[str, int] | None = None,
              ) -> tuple[Transport, list[Target]]:
    """The transport under test and targets for ``names`` (ports default to the test sshd)."""
    key = key or sshd.client_key
    known_hosts = known_hosts or sshd.known_hosts
    port_of = {n: (ports or {}).get(n, sshd.port) for n in names}
    if kind == "fabric":
        return (FabricSSH(ssh_config(sshd, d, key, known_hosts, port_of), connect_timeout_s=5),
                [Target(n, n) for n in names])
    return OpenSSH(key, known_hosts, connect_timeout_s=5), [Target(n, "127.0.0.1", port_of[n]) for n in names]


KINDS = pytest.mark.parametrize("kind", ["fabric", "openssh"])


class Counting:
    """The real transport, counting how many nodes are in flight at once."""

    def __init__(self, inner: Transport) -> None:
        self.inner = inner
        self.now = 0
        self.peak = 0
        self.lock = threading.Lock()

    def run(self, target: Target, argv: Sequence[str], timeout_s: float) -> RemoteRun:
        with self.lock:
            self.now += 1
            self.peak = max(self.peak, self.now)
        try:
            return self.inner.run(target, argv, timeout_s)
        finally:
            with self.lock:
                self.now -= 1

    def fetch(self, target: Target, remote_dir: str, local_dir: Path, timeout_s: float) -> str | None:
        return self.inner.fetch(target, remote_dir, local_dir, timeout_s)

    def release(self, target: Target) -> None:
        self.inner.release(target)


@pytest.mark.root
@KINDS
def test_fan_out_collects_results_and_reports_unreachable_nodes(kind: str, sshd: Sshd, node_path: Path,
                                                                tmp_path: Path, free_port: Callable[[], int]) -> None:
    names = [f"gpu-{i:02d}" for i in range(1, 4)] + ["gpu-dead"]
    inner, targets = transport(kind, sshd, tmp_path, names, ports={"gpu-dead": free_port()})
    ssh = Counting(inner)
    seen: list[NodeOutcome] = []
    outcomes = fan_out(ssh, targets, command(node_path, tmp_path), tmp_path / "collected", max_in_flight=2,
                       timeout_s=120, on_done=seen.append)
    assert [o.node for o in outcomes] == [t.node for t in targets]
    assert sorted(o.node for o in seen) == sorted(t.node for t in targets)
    assert ssh.peak <= 2
    for o in outcomes[:3]:
        assert o.status == "ok", o.reason
        assert o.result is not None and o.local_dir is not None
        assert (o.local_dir / "result.json").is_file() and (o.local_dir / "raw").is_dir()
        checks = {c.name: c for c in o.result.checks}
        assert checks["ib"].tool == "ibstat" and (o.local_dir / (checks["ib"].raw_output or "x")).is_file()
        assert checks["nccl.all_reduce"].measured["peak_busbw"] == pytest.approx(476.53)
        assert checks["gpu"].verdict == "error"  # no NVML and no nvidia-smi here: not a pass
        assert checks["stress"].verdict == "error" and "skipped" in checks["stress"].reason
        assert o.exit_code == 1
    dead = outcomes[3]
    assert dead.status == "unreachable" and dead.result is None
    assert ("Connection refused" if kind == "openssh" else "Unable to connect") in (dead.reason or "")
    node_input = to_input(dead, "h100-sxm-8", position=4, rack="rack-a")
    assert node_input.result is None and (node_input.error or "").startswith("unreachable: ssh to")


@pytest.mark.root
@KINDS
def test_wrong_key_missing_burnin_and_timeouts_are_failed_nodes(kind: str, sshd: Sshd, node_path: Path,
                                                                tmp_path: Path, free_port: Callable[[], int]) -> None:
    wrong, targets = transport(kind, sshd, tmp_path, ["gpu-01"], key=sshd.other_key)
    [denied] = fan_out(wrong, targets, command(node_path, tmp_path), tmp_path / "c1", timeout_s=60)
    assert denied.status == "unreachable"
    assert ("Permission denied" if kind == "openssh" else "key rejected") in (denied.reason or "")
    stranger = tmp_path / "known_hosts_other"
    stranger.write_text(f"[127.0.0.1]:{sshd.port} {(sshd.other_key.with_suffix('.pub')).read_text()}")
    pinned, targets = transport(kind, sshd, tmp_path, ["gpu-01"], known_hosts=stranger)
    [spoofed] = fan_out(pinned, targets, command(node_path, tmp_path), tmp_path / "c0", timeout_s=60)
    assert spoofed.status == "unreachable" and spoofed.result is None
    assert ("Host key verification failed" if kind == "openssh" else "does not match") in (spoofed.reason or "")
    ssh, targets = transport(kind, sshd, tmp_path, ["gpu-01"])
    [missing] = fan_out(ssh, targets, command(node_path, tmp_path, python="/nonexistent/python3"), tmp_path / "c2",
                        timeout_s=60)
    assert missing.status == "failed" and missing.exit_code == 127
    hang = node_path.parent / "hang"
    hang.mkdir(exist_ok=True)
    (hang / "python3").write_text("#!/bin/sh\nexec sleep 30\n")
    (hang / "python3").chmod(0o755)
    [slow] = fan_out(ssh, targets, command(node_path, tmp_path, python=str(hang / "python3")), tmp_path / "c3",
                     timeout_s=2)
    assert slow.status == "timeout" and "2 s" in (slow.reason or "")


def test_unsafe_targets_and_commands_are_refused(tmp_path: Path) -> None:
    for bad in ({"node": "-oProxyCommand=x", "host": "h"}, {"node": "n", "host": "-oProxyCommand=x"},
                {"node": "n", "host": "h", "user": "root;id"}, {"node": "n", "host": "h", "port": 0}):
        with pytest.raises(FanoutError):
            Target(**bad)
    with pytest.raises(FanoutError):
        BurninCommand("p", "quick", "../x").argv("n")
    with pytest.raises(FanoutError):
        BurninCommand("p", "quick", "r", env={"LD_PRELOAD x": "y"}).argv("n")
    ssh = OpenSSH(tmp_path / "k", tmp_path / "kh")
    with pytest.raises(FanoutError, match="unique"):
        fan_out(ssh, [Target("a", "h"), Target("a", "h")], BurninCommand("p", "quick", "r"), tmp_path)
    argv = BurninCommand("p", "quick", "r", env={"PATH": "/x y"}).argv("n")
    assert argv[:2] == ["env", "PATH=/x y"] and argv[argv.index("--out") + 1] == "/var/lib/racklife/burnin/r/n"


class DroppingProxy:
    """A TCP proxy to the test sshd that closes its first ``drop`` connections before the banner.

    What an sshd just started after a reboot, or slow under load, does to a client: the
    handshake breaks off ("Error reading SSH protocol banner") before any command ran.
    """

    def __init__(self, port: int, upstream: int, drop: int) -> None:
        self.port, self.upstream, self.drop, self.accepted = port, upstream, drop, 0
        self.sockets: list[socket.socket] = []  # of the connections passed through: closed with the proxy
        self.server = socket.create_server(("127.0.0.1", port))
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            self.accepted += 1
            if self.accepted <= self.drop:
                self._refuse(client)
                continue
            upstream = socket.create_connection(("127.0.0.1", self.upstream))
            self.sockets += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    def _refuse(self, client: socket.socket) -> None:
        client.close()

    def _pipe(self, src: socket.socket, dst: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                dst.sendall(data)
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        self.server.close()
        for sock in self.sockets:
            sock.close()


class FreezingProxy(DroppingProxy):
    """A TCP proxy to the test sshd that, once ``frozen`` is set, holds every byte both ways and keeps
    the sockets open: a node that hangs, or a link cut off, under an open SSH connection."""

    def __init__(self, port: int, upstream: int) -> None:
        self.frozen = threading.Event()
        super().__init__(port, upstream, drop=0)

    def _pipe(self, src: socket.socket, dst: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                while self.frozen.is_set():
                    time.sleep(0.05)
                dst.sendall(data)
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)


def _via(proxy: DroppingProxy, sshd: Sshd, tmp_path: Path) -> FabricSSH:
    alias = f"[127.0.0.1]:{sshd.port}"  # the sshd's key, pinned under its own address
    cfg = tmp_path / f"ssh_config-{proxy.port}"
    cfg.write_text(f"Host gpu-01\n    HostName 127.0.0.1\n    Port {proxy.port}\n    User root\n"
                   f"    IdentityFile \"{sshd.client_key}\"\n    IdentitiesOnly yes\n"
                   f"    UserKnownHostsFile \"{sshd.known_hosts}\"\n    HostKeyAlias {alias}\n"
                   "    StrictHostKeyChecking yes\n")
    return FabricSSH(cfg, connect_timeout_s=5)


def _echo_via(proxy: DroppingProxy, sshd: Sshd, tmp_path: Path) -> RemoteRun:
    """``echo ran`` on gpu-01 through ``proxy`` on a new connection; the proxy is closed after."""
    try:
        ssh = _via(proxy, sshd, tmp_path)
        res = ssh.run(Target("gpu-01", "gpu-01"), ["echo", "ran"], timeout_s=30)
        ssh.close()
    finally:
        proxy.close()
    return res


@pytest.mark.root
def test_a_connection_that_stops_answering_times_out_the_command(sshd: Sshd, tmp_path: Path,
                                                                 free_port: Callable[[], int]) -> None:
    """The node answered a first command, then went silent on the open connection: the next command is
    timed out within its timeout and the grace, not left waiting (paramiko waited an hour for the session,
    and for the command's start for ever: an acceptance run hung on one node)."""
    proxy = FreezingProxy(free_port(), sshd.port)
    ssh = _via(proxy, sshd, tmp_path)
    target = Target("gpu-01", "gpu-01")
    try:
        first = ssh.run(target, ["echo", "ran"], timeout_s=30)
        assert first.exit_code == 0 and first.stdout == b"ran\n", first
        proxy.frozen.set()
        got: list[RemoteRun] = []
        t0 = time.monotonic()
        worker = threading.Thread(target=lambda: got.append(ssh.run(target, ["echo", "again"], timeout_s=2)),
                                  daemon=True)
        worker.start()
        worker.join(timeout=2 + STALL_GRACE_S + 15)
        assert not worker.is_alive(), "the command on a silent connection never came back"
        assert got[0].timed_out and got[0].exit_code is None and "gpu-01" in got[0].stderr, got[0]
        assert time.monotonic() - t0 < 2 + STALL_GRACE_S + 10
        proxy.frozen.clear()
        again = ssh.run(target, ["echo", "back"], timeout_s=30)  # a new connection: the cut one was let go
        assert again.exit_code == 0 and again.stdout == b"back\n", again
    finally:
        proxy.frozen.clear()
        ssh.close()
        proxy.close()


@pytest.mark.root
def test_a_handshake_cut_off_before_the_banner_is_tried_again_and_a_dead_one_is_unreachable(
        sshd: Sshd, tmp_path: Path, free_port: Callable[[], int]) -> None:
    flaky = DroppingProxy(free_port(), sshd.port, drop=2)
    res = _echo_via(flaky, sshd, tmp_path)
    assert res.exit_code == 0 and res.stdout == b"ran\n", res
    assert flaky.accepted == 3  # two handshakes cut off, the third served

    dead = DroppingProxy(free_port(), sshd.port, drop=10**6)
    res = _echo_via(dead, sshd, tmp_path)
    assert res.exit_code == SSH_UNREACHABLE and "gpu-01" in res.stderr, res
    assert dead.accepted == HANDSHAKE_ATTEMPTS  # tried, and no more


@pytest.fixture
def quick_retries() -> Iterator[retry.Retrier]:
    """The steps' retry policy (its default attempts) with short waits."""
    with retry.using(retry.Retrier(retry.RetryPolicy(backoff_s=0.05))) as r:
        yield r


@pytest.mark.root
def test_a_repair_command_is_sent_again_when_the_connection_failed_never_after_its_own_answer(
        sshd: Sshd, tmp_path: Path, free_port: Callable[[], int], monkeypatch: pytest.MonkeyPatch,
        quick_retries: retry.Retrier) -> None:
    """The repair's clock read and GPU reset (harmless run twice) go again when the connection failed more
    often than the transport retries a handshake; the command's own exit status, 255 included (the driver's
    "in use"), is final."""
    monkeypatch.setattr(ssh_fabric, "HANDSHAKE_BACKOFF_S", 0.05)
    attempts = quick_retries.policy.attempts
    flaky = DroppingProxy(free_port(), sshd.port, drop=HANDSHAKE_ATTEMPTS + 1)  # the first try's, and one
    try:
        cfg = str(_via(flaky, sshd, tmp_path).config)
        got, tries = repair_actions.ssh_run_again("gpu-01", cfg, ["echo", "ran"], 30)
        assert (got.exit_code, got.stdout, got.unreachable, tries) == (0, "ran\n", False, 2), got
        assert flaky.accepted == HANDSHAKE_ATTEMPTS + 2
        got, tries = repair_actions.ssh_run_again("gpu-01", cfg, ["sh", "-c", "echo in use; exit 255"], 30)
        assert (got.exit_code, got.stdout, got.unreachable, tries) == (255, "in use\n", False, 1), got
    finally:
        flaky.close()

    dead = DroppingProxy(free_port(), sshd.port, drop=10**6)
    try:
        got, tries = repair_actions.ssh_run_again("gpu-01", str(_via(dead, sshd, tmp_path).config),
                                                  ["echo", "ran"], 30)
    finally:
        dead.close()
    assert got.exit_code == SSH_UNREACHABLE and got.unreachable and tries == attempts, got
    assert dead.accepted == attempts * HANDSHAKE_ATTEMPTS


@pytest.mark.root
@pytest.mark.usefixtures("quick_retries")
def test_a_command_without_an_answer_in_time_is_sent_again_only_when_it_is_a_read(sshd: Sshd, tmp_path: Path) -> None:
    """No answer in time: a reset (which may still be running) is not sent again; a clock read is, and the
    node's next answer is the one kept."""
    cfg = str(ssh_config(sshd, tmp_path, sshd.client_key, sshd.known_hosts, {"gpu-01": sshd.port}))
    mark = tmp_path / "asked"
    slow_once = ["sh", "-c", f"if [ -e {mark} ]; then echo ran; else touch {mark}; sleep 10; fi"]
    got, tries = repair_actions.ssh_run_again("gpu-01", cfg, slow_once, 3)
    assert got.exit_code is None and not got.unreachable and tries == 1, got
    mark.unlink()
    got, tries = repair_actions.ssh_run_again("gpu-01", cfg, slow_once, 3, silent_too=True)
    assert (got.exit_code, got.stdout, tries) == (0, "ran\n", 2), (got, tries)


class AuthCutProxy(DroppingProxy):
    """A proxy to the test sshd whose first ``drop`` connections meet an SSH server (paramiko's, with the
    sshd's own host key) that closes the connection when the client offers its key: what a node going down,
    or an sshd killed mid-login, does. paramiko calls that an AuthenticationException, as it calls a key
    the server refused."""

    def __init__(self, port: int, upstream: int, drop: int, host_key: Path) -> None:
        self.host_key = paramiko.Ed25519Key.from_private_key_file(str(host_key))
        self.transports: list[paramiko.Transport] = []
        super().__init__(port, upstream, drop)

    def _refuse(self, client: socket.socket) -> None:
        server = paramiko.Transport(client)
        server.add_server_key(self.host_key)
        self.transports.append(server)
        # start_server raises here when the cut lands before it saw the key exchange end (a loaded
        # machine): the cut is the point, and the accept loop must go on to serve the next connection
        with contextlib.suppress(paramiko.SSHException, EOFError, OSError):
            server.start_server(server=_CutAtAuth(client))

    def close(self) -> None:
        super().close()
        for t in self.transports:
            t.close()


class _CutAtAuth(paramiko.ServerInterface):
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock

    def get_allowed_auths(self, username: str) -> str:
        return "publickey"

    def check_auth_publickey(self, username: str, key: paramiko.PKey) -> int:
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)  # gone before it answers
        return paramiko.common.AUTH_FAILED


@pytest.mark.root
def test_a_connection_cut_off_during_login_is_tried_again_and_not_called_a_rejected_key(
        sshd: Sshd, tmp_path: Path, free_port: Callable[[], int]) -> None:
    host_key = sshd.known_hosts.parent / "host"
    cut = AuthCutProxy(free_port(), sshd.port, 2, host_key)
    res = _echo_via(cut, sshd, tmp_path)
    assert res.exit_code == 0 and res.stdout == b"ran\n", res
    assert cut.accepted == 3  # two logins cut off, the third served

    gone = AuthCutProxy(free_port(), sshd.port, 10**6, host_key)
    res = _echo_via(gone, sshd, tmp_path)
    assert res.exit_code == SSH_UNREACHABLE and gone.accepted == HANDSHAKE_ATTEMPTS, res
    assert "cut off during authentication" in res.stderr and "key rejected" not in res.stderr, res.stderr

"""The fan-out's SSH transport on fabric (paramiko), configured by the operator's ssh_config.

This is the one module that imports fabric and paramiko (the import-linter contract on
vendor SDKs names it as their adapter); everything else sees :class:`Transport`'s
``run`` and ``fetch``. The ssh_config file is the operator's (or the lab's) and decides
host names, ports, users, keys and proxies per node, as it would for ``ssh -F``; fabric
reads those. Three things fabric does not do the OpenSSH way, and this module does:

* **Host keys.** fabric accepts any unknown host key (paramiko's ``AutoAddPolicy``).
  Here a key must match the ``UserKnownHostsFile`` the config names, under the node's
  ``HostKeyAlias`` when it has one (``StrictHostKeyChecking yes``); anything else
  refuses the connection.
* **Keys only.** No agent, no keys looked up beyond the config's ``IdentityFile``, no
  password: what ``IdentitiesOnly`` and ``BatchMode`` ask of ssh.
* **Errors are outcomes.** A refused connection, a rejected key or host key, a proxy
  that fails: each comes back as exit status 255 with the reason, as ssh reports them,
  so :func:`acceptance.fanout.run_node` turns it into an ``unreachable`` node.

Results are fetched over SFTP (a directory walk that copies regular files only and
never follows a link out of the directory), not through a tar stream.
"""

from __future__ import annotations

import contextlib
import math
import shlex
import stat
import subprocess
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

import paramiko
from fabric import Config, Connection
from fabric.runners import Remote
from invoke.exceptions import CommandTimedOut

from acceptance.fanout import SSH_UNREACHABLE, RemoteRun, Target

_CONNECT_ERRORS = (paramiko.SSHException, OSError, EOFError)


class HostKeyRejected(paramiko.SSHException):
    """The server's key is not the one known_hosts pins for this node."""


@dataclass(frozen=True)
class _PinnedHostKey(paramiko.MissingHostKeyPolicy):
    """Accept a server key only if ``known_hosts`` lists it for ``alias`` (or the address)."""

    known_hosts: Path
    alias: str

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> None:
        try:
            known = paramiko.HostKeys(str(self.known_hosts))
        except OSError as exc:
            raise HostKeyRejected(f"known_hosts {self.known_hosts} unreadable: {exc}") from None
        for name in (self.alias, hostname):
            if known.check(name, key):
                return
        listed = any(known.lookup(n) for n in (self.alias, hostname))
        raise HostKeyRejected(f"host key for {self.alias} {'does not match' if listed else 'is not in'} "
                              f"{self.known_hosts} ({key.get_name()} {key.fingerprint})")


class _Remote(Remote):  # type: ignore[misc]  # fabric ships no type hints
    """fabric's remote runner, whose timeout kill tolerates a connection that has already gone.

    invoke enforces ``timeout=`` with a Timer thread that closes the channel; when the
    node's connection drops at that moment, paramiko raises EOFError in the timer thread,
    where nobody can catch it. The command's outcome (timed out) is reported either way.
    """

    def kill(self) -> None:
        with contextlib.suppress(*_CONNECT_ERRORS):  # the channel is gone: nothing left to kill
            super().kill()


def _unquote(value: str) -> str:
    return value[1:-1] if len(value) >= 2 and value[0] == value[-1] == '"' else value


@dataclass
class _Open:
    conn: Connection
    proxy: _Proxy | None


@dataclass(frozen=True)
class FabricSSH:
    """Run commands on nodes and fetch their result directories, via fabric and an ssh_config.

    One connection per node is kept open from its first command until :meth:`release`
    (the fan-out releases a node when it is done with it), so running burn-in and
    fetching its results costs one SSH handshake, not two.
    """

    config: Path
    connect_timeout_s: float = 10.0
    _pool: dict[Target, _Open] = field(default_factory=dict, compare=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, compare=False, repr=False)

    def _connect(self, target: Target) -> _Open:
        """A fabric connection for the node as the ssh_config describes it, opened."""
        cfg = Config(runtime_ssh_path=str(self.config), overrides={"runners": {"remote": _Remote}})
        conn = Connection(target.host, config=cfg, connect_timeout=self.connect_timeout_s,
                          connect_kwargs={"look_for_keys": False, "allow_agent": False})
        looked = conn.ssh_config
        known = Path(_unquote(str(looked.get("userknownhostsfile", "~/.ssh/known_hosts")).split()[0])).expanduser()
        alias = _unquote(str(looked.get("hostkeyalias", target.host)))
        conn.client.set_missing_host_key_policy(_PinnedHostKey(known, alias))
        proxy = None
        if isinstance(conn.gateway, str):
            # fabric would start the ProxyCommand itself and leave the process unreaped; own it here
            proxy = _Proxy(conn.gateway)
            conn.gateway = None
            conn.connect_kwargs["sock"] = proxy
        opened = _Open(conn, proxy)
        try:
            conn.open()
        except BaseException:
            _close(opened)
            raise
        return opened

    def _session(self, target: Target) -> Connection:
        with self._lock:
            cached = self._pool.get(target)
        if cached is not None and cached.conn.is_connected:
            return cached.conn
        if cached is not None:
            self.release(target)
        opened = self._connect(target)
        with self._lock:
            self._pool[target] = opened
        return opened.conn

    def release(self, target: Target) -> None:
        """Close the node's connection (and its proxy), if one is open."""
        with self._lock:
            opened = self._pool.pop(target, None)
        if opened is not None:
            _close(opened)

    def close(self) -> None:
        for target in list(self._pool):
            self.release(target)

    def _unreachable(self, target: Target, exc: BaseException) -> RemoteRun:
        self.release(target)
        what = "authentication failed (key rejected)" if isinstance(exc, paramiko.AuthenticationException) \
            else f"{type(exc).__name__}: {exc}"
        return RemoteRun(SSH_UNREACHABLE, b"", f"ssh to {target.host}: {what}")

    def run(self, target: Target, argv: Sequence[str], timeout_s: float) -> RemoteRun:
        command = " ".join(shlex.quote(a) for a in argv)
        try:
            conn = self._session(target)
        except _CONNECT_ERRORS as exc:
            return self._unreachable(target, exc)
        limit = max(1, math.ceil(timeout_s))
        t0 = time.monotonic()
        try:
            res = conn.run(command, hide=True, warn=True, timeout=limit, in_stream=False)
        except CommandTimedOut as exc:
            self.release(target)
            return RemoteRun(None, exc.result.stdout.encode(), exc.result.stderr, True)
        except _CONNECT_ERRORS as exc:  # the connection dropped mid-run
            return self._unreachable(target, exc)
        if res.exited == -1 and time.monotonic() - t0 >= limit:
            # invoke's timer closed the channel before it could report the timeout itself
            self.release(target)
            return RemoteRun(None, res.stdout.encode(), res.stderr, True)
        return RemoteRun(res.exited, res.stdout.encode(), res.stderr)

    def fetch(self, target: Target, remote_dir: str, local_dir: Path, timeout_s: float) -> str | None:
        """Copy ``remote_dir`` (regular files and directories only) into ``local_dir``; None or why not."""
        try:
            sftp = self._session(target).sftp()
            channel = sftp.get_channel()
            if channel is not None:
                channel.settimeout(timeout_s)
            _walk(sftp, PurePosixPath(remote_dir), local_dir)
            return None
        except TimeoutError as exc:
            self.release(target)
            return f"timed out after {timeout_s:g} s ({exc})"
        except _CONNECT_ERRORS as exc:
            self.release(target)
            return f"{type(exc).__name__}: {exc}"


def _close(opened: _Open) -> None:
    conn = opened.conn
    transport = conn.client.get_transport()
    conn.close()
    conn.client.close()  # fabric closes only connections it saw open; a refused one lingers
    if transport is not None and transport.is_alive():
        transport.join(10)  # its thread still reads the proxy's pipes until it ends
    if opened.proxy is not None:
        _close_proxy(opened.proxy)


class _Proxy(paramiko.ProxyCommand):
    """paramiko's ProxyCommand, whose ``close`` tolerates a process that has already ended."""

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()


def _close_proxy(proxy: paramiko.ProxyCommand) -> None:
    """End the ProxyCommand process and release its pipes (paramiko only signals it)."""
    proc = proxy.process
    if proc.poll() is None:
        proc.terminate()
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=5)
    for pipe in (proc.stdin, proc.stdout, proc.stderr):
        if pipe is not None:
            pipe.close()


def _walk(sftp: paramiko.SFTPClient, remote: PurePosixPath, local: Path) -> None:
    local.mkdir(parents=True, exist_ok=True)
    for entry in sftp.listdir_attr(str(remote)):
        name = entry.filename
        if name in (".", "..") or "/" in name:
            continue
        mode = entry.st_mode or 0
        if stat.S_ISDIR(mode):
            _walk(sftp, remote / name, local / name)
        elif stat.S_ISREG(mode):  # links, devices and sockets are not copied
            sftp.get(str(remote / name), str(local / name))

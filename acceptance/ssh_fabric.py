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
  so :func:`acceptance.fanout.run_node` turns it into an ``unreachable`` node. paramiko
  also logs such a failure from its transport thread, with a traceback, which Python's
  last-resort handler printed on a command's stderr (a node probed while it reboots):
  its logger gets a handler that drops what nothing else handles.

Results are fetched over SFTP (a directory walk that copies regular files only and
never follows a link out of the directory), not through a tar stream.
"""

from __future__ import annotations

import contextlib
import logging
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

logging.getLogger("paramiko").addHandler(logging.NullHandler())  # the outcome says it; a configured log keeps it

_CONNECT_ERRORS = (paramiko.SSHException, OSError, EOFError)
HANDSHAKE_ATTEMPTS = 3  # a handshake cut off before the banner: tried this often (FabricSSH._open)
HANDSHAKE_BACKOFF_S = 1.0
# How long past a command's timeout the connection may stay silent before it is cut. invoke's timeout
# covers only a command that has started: opening the session and sending the command happen before its
# timer, and paramiko waits for a session up to an hour (channel_timeout) and for the command's start
# forever, so a node that stops answering on an open connection (hung, or cut off mid-session) held its
# acceptance run for ever.
STALL_GRACE_S = 5.0


_CUT_OFF_IN_AUTH = ("transport shut down or saw EOF", "Authentication timeout")
"""What paramiko's AuthenticationException says when no answer to the key came (the server closed the
connection, or did not answer in ``auth_timeout``), unlike a server that answered no ("Authentication
failed.")."""


def cut_off_in_auth(exc: paramiko.AuthenticationException) -> bool:
    """The authentication did not end in the server's answer: the connection broke off during it."""
    return any(m in str(exc) for m in _CUT_OFF_IN_AUTH)


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
        opened = self._open(target)
        with self._lock:
            self._pool[target] = opened
        return opened.conn

    def _open(self, target: Target) -> _Open:
        """Connect, trying again when the handshake broke off before any command ran.

        An sshd that has just started after a reboot, or is slow under load, can drop a
        connection before its banner ("Error reading SSH protocol banner", EOF, reset): a
        node whose re-test began that way was quarantined though nothing had run on it. Only
        those are tried again (:data:`HANDSHAKE_ATTEMPTS`), as is a connection the server
        dropped during authentication (paramiko calls that an authentication failure too); a
        refused or timed-out TCP connection (nothing listening, a node that is down) and a
        rejected key or host key are answers, reported at once.
        """
        for attempt in range(1, HANDSHAKE_ATTEMPTS + 1):
            try:
                return self._connect(target)
            except (paramiko.BadHostKeyException, HostKeyRejected):
                raise
            except (paramiko.SSHException, EOFError, ConnectionResetError) as exc:
                refused = isinstance(exc, paramiko.AuthenticationException) and not cut_off_in_auth(exc)
                if refused or attempt == HANDSHAKE_ATTEMPTS:
                    raise
            time.sleep(HANDSHAKE_BACKOFF_S * attempt)
        raise AssertionError("unreachable")  # the loop returns or raises

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
        if not isinstance(exc, paramiko.AuthenticationException):
            what = f"{type(exc).__name__}: {exc}"
        elif cut_off_in_auth(exc):
            what = f"the connection was cut off during authentication ({exc})"
        else:
            what = "authentication failed (key rejected)"
        return RemoteRun(SSH_UNREACHABLE, b"", f"ssh to {target.host}: {what}", unreachable=True)

    def run(self, target: Target, argv: Sequence[str], timeout_s: float) -> RemoteRun:
        command = " ".join(shlex.quote(a) for a in argv)
        try:
            conn = self._session(target)
        except _CONNECT_ERRORS as exc:
            return self._unreachable(target, exc)
        limit = max(1, math.ceil(timeout_s))
        t0 = time.monotonic()
        stalled = threading.Event()
        watchdog = threading.Timer(limit + STALL_GRACE_S, _cut, args=(conn, stalled))
        watchdog.daemon = True
        watchdog.start()
        try:
            res = conn.run(command, hide=True, warn=True, timeout=limit, in_stream=False)
        except CommandTimedOut as exc:
            self.release(target)
            return RemoteRun(None, exc.result.stdout.encode(), exc.result.stderr, True)
        except _CONNECT_ERRORS as exc:  # the connection dropped mid-run, or stalled and was cut
            if stalled.is_set():
                self.release(target)
                return RemoteRun(None, b"", f"ssh to {target.host}: no answer within {limit} s "
                                 "(the connection stalled; cut)", True)
            return self._unreachable(target, exc)
        finally:
            watchdog.cancel()
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


def _cut(conn: Connection, stalled: threading.Event) -> None:
    """The watchdog's end of a stalled run: close the connection, so every wait on it ends."""
    stalled.set()
    with contextlib.suppress(*_CONNECT_ERRORS):
        if conn.transport is not None:
            conn.transport.close()


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

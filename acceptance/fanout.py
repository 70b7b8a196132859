"""Fan ``burnin run`` out to a rack's nodes over SSH and bring every result back.

An acceptance run must end with one outcome per node, whatever happened to it: a node
that refuses the connection, rejects the key, hangs, or has no burn-in installed is a
*failed node with a reason*, never an exception that loses the other nodes' results.
So each node runs in its own worker with its own deadline, at most ``max_in_flight``
at once, and every outcome records what was asked, when, and why it ended.

Anything implementing :class:`Transport` (run a command, fetch a directory) carries it:
:class:`acceptance.ssh_fabric.FabricSSH` (fabric, driven by an ssh_config: what the
workflow uses) or :class:`OpenSSH` here (the system ``ssh`` client with key
authentication only, ``BatchMode`` and pinned host keys). The remote side receives one
command string (that is how SSH works); every word of it is quoted with
:func:`shlex.quote`, and node, host and user names are validated first.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import tarfile
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal, Protocol

from acceptance.judge import NodeInput, Request
from burnin.levels import Level
from burnin.parsers.xid import instant
from burnin.result import ResultFormatError, RunResult, load_result
from lifecycle.model import vocab

Status = Literal["ok", "unreachable", "timeout", "failed"]
_HOST = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.:-]{0,252}\Z")
_USER = re.compile(r"^[a-z_][a-z0-9_-]{0,31}\Z")
_RUN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}\Z")
_ENV_KEY = re.compile(r"^[A-Z_][A-Z0-9_]*\Z")
SSH_UNREACHABLE = 255  # ssh's own exit status for connection and authentication failures


class FanoutError(ValueError):
    """Targets or commands that must not be sent (unsafe names, bad options)."""


@dataclass(frozen=True)
class Target:
    node: str
    host: str
    port: int = 22
    user: str = "root"

    def __post_init__(self) -> None:
        if not vocab.is_node_name(self.node):
            raise FanoutError(f"node name {self.node!r} is not allowed")
        if not _HOST.match(self.host):
            raise FanoutError(f"host {self.host!r} is not allowed")
        if not _USER.match(self.user):
            raise FanoutError(f"user {self.user!r} is not allowed")
        if not 0 < self.port < 65536:
            raise FanoutError(f"port {self.port} is out of range")


@dataclass(frozen=True)
class BurninCommand:
    """What to run on each node: ``<python> -m burnin run --profile P --level L --out <dir>``."""

    profile: str
    level: Level
    run_id: str
    python: str = "python3"
    base_dir: str = "/var/lib/racklife/burnin"
    env: Mapping[str, str] = field(default_factory=dict)
    skip: tuple[str, ...] = ()
    kernel_log_since: str | None = None
    """The run's cut-off on the node's clock: kernel_xid judges only later lines (None: the whole log)."""

    def remote_dir(self, node: str) -> str:
        if not _RUN.match(self.run_id):
            raise FanoutError(f"run id {self.run_id!r} is not allowed")
        return f"{self.base_dir.rstrip('/')}/{self.run_id}/{node}"

    def argv(self, node: str) -> list[str]:
        bad = [k for k in self.env if not _ENV_KEY.match(k)]
        if bad:
            raise FanoutError(f"environment names not allowed: {bad}")
        prefix = ["env", *(f"{k}={v}" for k, v in sorted(self.env.items()))] if self.env else []
        skips = [w for s in self.skip for w in ("--skip", s)]
        since: list[str] = []
        if self.kernel_log_since is not None:
            if instant(self.kernel_log_since) is None:
                raise FanoutError(f"kernel log cut-off {self.kernel_log_since!r} is not an ISO 8601 time")
            since = ["--kernel-log-since", self.kernel_log_since]
        return [*prefix, self.python, "-m", "burnin", "run", "--profile", self.profile, "--level", self.level,
                "--out", self.remote_dir(node), "--run-id", self.run_id, "--node", node, *skips, *since]


@dataclass(frozen=True)
class RemoteRun:
    exit_code: int | None
    stdout: bytes
    stderr: str
    timed_out: bool = False
    unreachable: bool = False
    """The SSH connection failed or broke off: what came back is the transport's, not the command's
    (only a transport that can tell says so; the system ssh's 255 is the remote command's as well)."""


class Transport(Protocol):
    def run(self, target: Target, argv: Sequence[str], timeout_s: float) -> RemoteRun:
        """Run argv on the node; exit status 255 means the node could not be reached (as with ssh)."""
        ...

    def fetch(self, target: Target, remote_dir: str, local_dir: Path, timeout_s: float) -> str | None:
        """Copy the node's ``remote_dir`` into ``local_dir``: None when done, else why not
        (starting with "timed out" when the deadline passed)."""
        ...

    def release(self, target: Target) -> None:
        """The fan-out is done with this node: close what the transport keeps open for it."""
        ...


@dataclass(frozen=True)
class OpenSSH:
    """The system ``ssh`` client with key authentication only and checked host keys."""

    identity_file: Path
    known_hosts: Path
    connect_timeout_s: int = 10
    binary: str = "ssh"

    def base_argv(self, target: Target) -> list[str]:
        return [self.binary, "-F", "none", "-i", str(self.identity_file), "-p", str(target.port),
                "-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes", "-o", "PasswordAuthentication=no",
                "-o", "KbdInteractiveAuthentication=no", "-o", "StrictHostKeyChecking=yes",
                "-o", f"UserKnownHostsFile={self.known_hosts}", "-o", "GlobalKnownHostsFile=/dev/null",
                "-o", f"ConnectTimeout={self.connect_timeout_s}", "-o", "LogLevel=ERROR",
                "-l", target.user, "--", target.host]

    def run(self, target: Target, argv: Sequence[str], timeout_s: float) -> RemoteRun:
        remote = " ".join(shlex.quote(a) for a in argv)
        try:
            proc = subprocess.run([*self.base_argv(target), remote], capture_output=True, timeout=timeout_s,
                                  stdin=subprocess.DEVNULL, check=False)
        except subprocess.TimeoutExpired as exc:
            return RemoteRun(None, exc.stdout or b"", (exc.stderr or b"").decode("utf-8", "replace"), True)
        return RemoteRun(proc.returncode, proc.stdout, proc.stderr.decode("utf-8", "replace"))

    def fetch(self, target: Target, remote_dir: str, local_dir: Path, timeout_s: float) -> str | None:
        """The directory as a tar stream, unpacked with the ``data`` filter."""
        got = self.run(target, ["tar", "-C", remote_dir, "-cf", "-", "."], timeout_s)
        if got.timed_out:
            return f"timed out after {timeout_s:g} s"
        if got.exit_code != 0:
            return f"exited {got.exit_code}: {_tail(got.stderr)}"
        local_dir.mkdir(parents=True, exist_ok=True)
        try:
            _unpack(got.stdout, local_dir)
        except (tarfile.TarError, OSError) as exc:
            return f"unreadable archive: {exc}"
        return None

    def release(self, target: Target) -> None:
        """Nothing is kept open: each command is its own ssh process."""


@dataclass(frozen=True)
class NodeOutcome:
    """One node's fan-out: its result (when one came back) or why there is none."""

    node: str
    status: Status
    reason: str | None
    result: RunResult | None
    local_dir: Path | None
    exit_code: int | None
    started_at: str
    ended_at: str


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _tail(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return " | ".join(lines[-3:])[:300]


def _unpack(data: bytes, dest: Path) -> None:
    with tempfile.TemporaryFile() as fh:
        fh.write(data)
        fh.seek(0)
        with tarfile.open(fileobj=fh, mode="r:") as tar:
            tar.extractall(dest, filter="data")  # no absolute paths, links out of dest, devices


def run_node(transport: Transport, target: Target, command: BurninCommand, out_root: Path, timeout_s: float,
             clock: Callable[[], float] = time.monotonic) -> NodeOutcome:
    """Run burn-in on one node and fetch its directory; never raises for what the node did."""
    started, t0 = _now(), clock()

    def done(status: Status, reason: str | None, code: int | None, result: RunResult | None = None,
             local: Path | None = None) -> NodeOutcome:
        return NodeOutcome(target.node, status, reason, result, local, code, started, _now())

    remote_dir = command.remote_dir(target.node)
    run = transport.run(target, command.argv(target.node), timeout_s)
    if run.timed_out:
        return done("timeout", f"burn-in did not finish within {timeout_s:g} s", None)
    if run.exit_code == SSH_UNREACHABLE:
        return done("unreachable", f"ssh to {target.host}:{target.port} failed: {_tail(run.stderr)}", 255)
    if run.exit_code not in (0, 1):
        return done("failed", f"burn-in exited {run.exit_code}: {_tail(run.stderr)}", run.exit_code)
    left = timeout_s - (clock() - t0)
    if left <= 0:
        return done("timeout", f"no time left within {timeout_s:g} s to fetch {remote_dir}", run.exit_code)
    local = out_root / target.node
    why = transport.fetch(target, remote_dir, local, left)
    if why is not None:
        return done("timeout" if why.startswith("timed out") else "failed", f"fetching {remote_dir}: {why}",
                    run.exit_code)
    try:
        result = load_result((local / "result.json").read_text(encoding="utf-8"))
    except (OSError, ResultFormatError) as exc:
        return done("failed", f"the node's result could not be read: {exc}", run.exit_code, None, local)
    return done("ok", None, run.exit_code, result, local)


def fan_out(
    transport: Transport,
    targets: Sequence[Target],
    command: BurninCommand,
    out_root: Path,
    *,
    max_in_flight: int = 8,
    timeout_s: float = 3600.0,
    on_done: Callable[[NodeOutcome], None] | None = None,
    on_start: Callable[[Target], None] | None = None,
) -> list[NodeOutcome]:
    """Run burn-in on every target, at most ``max_in_flight`` at once; outcomes in target order.

    ``on_start`` is called as a node's burn-in starts (the rest wait for a free slot), ``on_done``
    with its outcome: what a progress display needs to say which node waits on what.
    """
    if max_in_flight < 1:
        raise FanoutError("max_in_flight must be at least 1")
    names = [t.node for t in targets]
    if len(set(names)) != len(names):
        raise FanoutError("node names must be unique")
    for t in targets:
        command.argv(t.node)  # validate everything before the first connection
    lock = threading.Lock()

    def one(target: Target) -> NodeOutcome:
        if on_start is not None:
            with lock:
                on_start(target)
        try:
            outcome = run_node(transport, target, command, out_root, timeout_s)
        except (OSError, subprocess.SubprocessError, ValueError) as exc:
            outcome = NodeOutcome(target.node, "failed", f"{type(exc).__name__}: {exc}", None, None, None,
                                  _now(), _now())
        finally:
            transport.release(target)
        if on_done is not None:
            with lock:
                on_done(outcome)
        return outcome

    with ThreadPoolExecutor(max_workers=max_in_flight, thread_name_prefix="fanout") as pool:
        return list(pool.map(one, targets))


def to_input(outcome: NodeOutcome, profile: str, position: int | None = None, rack: str | None = None,
             request: Request | None = None) -> NodeInput:
    """The judge's view of an outcome: a node with no result carries the fan-out's reason."""
    error = None if outcome.result is not None else f"{outcome.status}: {outcome.reason}"
    return NodeInput(outcome.node, profile, outcome.result, error, position, rack, request)

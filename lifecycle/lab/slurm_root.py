"""A Debian 13 root with Slurm 24.11, to check rendered config against a newer Slurm than the lab's.

The lab runs the host's Slurm (Debian 12: 22.05), but sites run newer ones
and some of what racklife renders exists only there: ``topology/block``
(NVLink domains such as GB200 NVL72) arrived in Slurm 23.11. Unit tests of
the text cannot say whether Slurm accepts it; only the daemon can. So we
build a minimal Debian 13 (trixie) root with ``debootstrap``, install
``slurmctld slurm-client munge`` into it, and run munged and slurmctld
chrooted there, in their own PID and network namespaces (loopback only, so
nothing is exposed and no port can clash with another lab).

Building takes minutes (it downloads ~100 MB), so roots are cached under
``$RACKLIFE_CACHE/slurm-roots`` (default ``~/.cache/racklife``): the
directory name carries a hash of what was asked (suite, architecture,
packages, with any pinned ``pkg=version``) and a hash of the versions that
were installed, recorded in ``racklife-root.json``. A second run with the
same request reuses the root; ``refresh=True`` (``--refresh``) builds again,
e.g. after a Debian point release, and a root with new versions lands in a
new directory. Builds are locked per request, so parallel runs do not race.

Prebuild (CI): ``python -m lifecycle.lab.slurm_root [--cache DIR] [--refresh]``.
Needs root and the Debian package ``debootstrap``.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from lifecycle.drivers.slurm.render import RenderOptions

MANIFEST = "racklife-root.json"
FORMAT = 1
"""Bumped when the build steps change, so older cached roots are not reused."""

_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

# Runs on the host inside fresh net/PID/mount namespaces: loopback up, a /proc
# of this PID namespace inside the root, then the root's own sh starts munged
# and becomes slurmctld. Paths come in as arguments, never spliced into text.
# slurmctld 24.11 resolves its listening address with AI_ADDRCONFIG, which
# finds nothing when loopback is the only address: an empty bridge holding a
# documentation address (TEST-NET-1, never routed) gives it one.
_OUTER = (
    'ip link set lo up && ip link add rl0 type bridge && ip addr add 192.0.2.1/32 dev rl0 && '
    'ip link set rl0 up && mount -t proc proc "$1/proc" && '
    'exec chroot "$1" /bin/sh -c "$2" init "$3"'
)
_INNER = (
    'munged --key-file="$1/etc/munge.key" --socket="$1/munge/munge.socket" '
    '--pid-file="$1/run/munged.pid" --log-file="$1/log/munged.log" '
    '--seed-file="$1/munge/seed" --force || exit 1; '
    'exec slurmctld -D -f "$1/etc/slurm.conf"'
)


class RootError(RuntimeError):
    """The root could not be built, or Slurm in it would not start; the message says which step."""


@dataclass(frozen=True)
class RootSpec:
    """What to build: a Debian suite and the packages to install in it."""

    suite: str = "trixie"
    mirror: str = "http://deb.debian.org/debian"
    arch: str = "amd64"
    packages: tuple[str, ...] = ("slurmctld", "slurm-client", "munge")
    """Package names, optionally pinned as ``name=version``."""

    def key(self) -> str:
        # The mirror is where, not what: it stays out of the key.
        text = json.dumps([FORMAT, self.suite, self.arch, sorted(self.packages)])
        return hashlib.sha256(text.encode()).hexdigest()[:12]

    def names(self) -> list[str]:
        return [p.split("=", 1)[0] for p in self.packages]


@dataclass(frozen=True)
class SlurmRoot:
    """A built root: where it is and what is installed in it."""

    path: Path
    spec: RootSpec
    versions: dict[str, str]
    """Package → installed Debian version."""
    slurm_version: str
    """As ``slurmctld -V`` says it, e.g. ``24.11.5``."""
    build_s: float
    size_bytes: int


def default_cache_dir() -> Path:
    env = os.environ.get("RACKLIFE_CACHE")
    if env:
        return Path(env) / "slurm-roots"
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".cache"
    return base / "racklife" / "slurm-roots"


def _run(what: str, argv: Sequence[str], timeout: float) -> str:
    try:
        res = subprocess.run(list(argv), stdin=subprocess.DEVNULL, capture_output=True, text=True,
                             timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise RootError(f"{what}: {exc}") from exc
    if res.returncode != 0:
        tail = "\n".join((res.stdout + res.stderr).strip().splitlines()[-15:])
        raise RootError(f"{what} failed ({res.returncode}):\n{tail}")
    return res.stdout


def _in_root(path: Path, argv: Sequence[str]) -> list[str]:
    """argv run inside the root with its own mount and PID namespaces (its /proc goes with it)."""
    return ["unshare", "--mount", "--pid", "--fork", "--kill-child=SIGKILL", f"--root={path}",
            "--mount-proc", "env", "-i", f"PATH={_PATH}", "DEBIAN_FRONTEND=noninteractive",
            "LC_ALL=C.UTF-8", *argv]


def _load(path: Path, spec: RootSpec) -> SlurmRoot | None:
    try:
        data = json.loads((path / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    return SlurmRoot(path=path, spec=spec, versions=dict(data["versions"]),
                     slurm_version=str(data["slurm_version"]), build_s=float(data["build_s"]),
                     size_bytes=int(data["size_bytes"]))


def _cached(cache: Path, spec: RootSpec) -> SlurmRoot | None:
    prefix = f"{spec.suite}-{spec.arch}-{spec.key()}-"
    found = [r for p in cache.glob(prefix + "*") if (r := _load(p, spec)) is not None]
    return max(found, key=lambda r: (r.path / MANIFEST).stat().st_mtime, default=None)


def require_tools() -> None:
    """Building needs root and debootstrap; say so plainly instead of failing halfway."""
    if os.geteuid() != 0:
        raise RootError("building a Slurm root needs root (debootstrap, chroot, namespaces)")
    if shutil.which("debootstrap") is None:
        raise RootError("debootstrap is not installed: apt-get install debootstrap")


def ensure_root(spec: RootSpec | None = None, cache: Path | None = None, *,
                refresh: bool = False) -> SlurmRoot:
    """The cached root for ``spec``, built first if there is none (or ``refresh``)."""
    spec = spec or RootSpec()
    cache = cache or default_cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    with (cache / f".{spec.key()}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not refresh and (found := _cached(cache, spec)) is not None:
            return found
        require_tools()
        return _build(spec, cache)


def _build(spec: RootSpec, cache: Path) -> SlurmRoot:
    started = time.monotonic()
    tmp = cache / f".build-{spec.key()}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        # debootstrap checks the suite's Release signature against the host's
        # debian-archive-keyring (Debian 12's carries the trixie keys).
        _run("debootstrap", ["debootstrap", "--variant=minbase", f"--arch={spec.arch}",
                             spec.suite, str(tmp), spec.mirror], timeout=1800)
        # No service may start inside the root while packages are installed.
        policy = tmp / "usr" / "sbin" / "policy-rc.d"
        policy.write_text("#!/bin/sh\nexit 101\n")
        policy.chmod(0o755)
        _run("apt-get install", _in_root(tmp, [
            "apt-get", "install", "-y", "-q", "--no-install-recommends", *spec.packages,
        ]), timeout=1800)
        _run("apt-get clean", _in_root(tmp, ["apt-get", "clean"]), timeout=120)
        # The package lists are only needed to install (~55 MB).
        shutil.rmtree(tmp / "var" / "lib" / "apt" / "lists", ignore_errors=True)
        (tmp / "var" / "lib" / "apt" / "lists" / "partial").mkdir(parents=True)
        listing = _run("dpkg-query", _in_root(tmp, [
            "dpkg-query", "-W", "-f=${Package}\\t${Version}\\n", *spec.names(),
        ]), timeout=60)
        versions = dict(line.split("\t", 1) for line in listing.splitlines() if "\t" in line)
        if sorted(versions) != sorted(spec.names()):
            raise RootError(f"installed {sorted(versions)}, asked for {sorted(spec.names())}")
        slurm = _run("slurmctld -V", _in_root(tmp, ["slurmctld", "-V"]), timeout=60).split()[-1]
        (tmp / "tmp").chmod(0o1777)
        size = _size(tmp)
        manifest = {"format": FORMAT, "spec": asdict(spec), "versions": versions,
                    "slurm_version": slurm, "build_s": round(time.monotonic() - started, 1),
                    "size_bytes": size}
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
        vkey = hashlib.sha256(json.dumps(versions, sort_keys=True).encode()).hexdigest()[:8]
        final = cache / f"{spec.suite}-{spec.arch}-{spec.key()}-{vkey}"
        if (final / MANIFEST).exists():
            # Same versions as a root that may be in use: keep that one.
            shutil.rmtree(tmp)
        else:
            shutil.rmtree(final, ignore_errors=True)
            tmp.rename(final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    root = _load(final, spec)
    if root is None:
        raise RootError(f"the root built at {final} has no readable {MANIFEST}")
    return root


def _size(path: Path) -> int:
    total = 0
    for dirpath, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += (Path(dirpath) / name).lstat().st_size
    return total


@dataclass
class RootedController:
    """munged + slurmctld from a ``SlurmRoot``, in their own PID and network namespaces.

    Use ``render_options()`` to render config whose paths live in this
    controller's work directory, then ``start(files)``; ``scontrol()`` runs the
    root's own client against it. ``stop()`` ends both daemons at once.
    """

    root: SlurmRoot
    port: int = 6817
    ready_timeout_s: float = 30.0
    _work: Path | None = None
    _proc: subprocess.Popen[bytes] | None = None
    _ns_pid: int | None = None
    _out: Path | None = field(default=None, repr=False)

    @property
    def work(self) -> Path:
        """The work directory as seen from the host."""
        if self._work is None:
            self._work = Path(tempfile.mkdtemp(prefix="rl-", dir=self.root.path / "tmp"))
            self._work.chmod(0o755)
        return self._work

    @property
    def inside(self) -> str:
        """The work directory as seen inside the root."""
        return "/" + str(self.work.relative_to(self.root.path))

    def render_options(self, **overrides: Any) -> RenderOptions:
        w = self.inside
        opts: dict[str, Any] = dict(
            controller="localhost", controller_addr="127.0.0.1", slurmctld_port=self.port,
            state_dir=f"{w}/state", spool_dir=f"{w}/spool", log_dir=f"{w}/log",
            run_dir=f"{w}/run", slurm_user="root", gpu_device_dir=f"{w}/dev",
            gres_autodetect="off", select_parameters="CR_Core",
            proctrack="proctrack/linuxproc", task_plugin="task/none",
            jobacct_gather="jobacct_gather/none", auth_socket=f"{w}/munge/munge.socket",
            resume_program="/bin/true", suspend_program="/bin/true", config_overrides=True,
            accounting=False,  # this root tests slurmctld's parsing of topology, without slurmdbd
            # The root has no mail program; without this slurmctld logs an error on every start.
            extra=("MailProg=/bin/true",),
        )
        opts.update(overrides)
        return RenderOptions(**opts)

    def start(self, files: dict[str, str]) -> RootedController:
        if self._proc is not None:
            raise RootError("already started")
        for sub in ("etc", "state", "spool", "log", "run", "munge", "dev"):
            (self.work / sub).mkdir(mode=0o755, exist_ok=True)
        for name, text in files.items():
            (self.work / "etc" / name).write_text(text)
        key = self.work / "etc" / "munge.key"
        key.write_bytes(secrets.token_bytes(1024))
        key.chmod(0o400)
        self._out = self.work / "log" / "slurmctld.stderr"
        with self._out.open("wb") as out:
            self._proc = subprocess.Popen(
                ["unshare", "--net", "--pid", "--mount", "--fork", "--kill-child=SIGKILL",
                 "/bin/sh", "-c", _OUTER, "outer", str(self.root.path), _INNER, self.inside],
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True, env={"PATH": _PATH},
            )
        try:
            self._ns_pid = self._child_pid()
            self._wait_up()
        except BaseException:
            self.stop()
            raise
        return self

    def _child_pid(self) -> int:
        assert self._proc is not None
        children = Path(f"/proc/{self._proc.pid}/task/{self._proc.pid}/children")
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError, ValueError, IndexError):
                return int(children.read_text().split()[0])
            if self._proc.poll() is not None:
                break
            time.sleep(0.02)
        raise RootError(f"the namespaces did not start: {self.output()}")

    def _wait_up(self) -> None:
        assert self._proc is not None
        deadline = time.monotonic() + self.ready_timeout_s
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RootError(f"slurmctld {self.root.slurm_version} exited: {self.output()}")
            if "is UP" in self.scontrol("ping").stdout:
                return
            time.sleep(0.1)
        raise RootError(f"slurmctld did not answer in {self.ready_timeout_s:.0f}s: {self.output()}")

    def output(self) -> str:
        """What slurmctld and munged said on stderr (``fatal:`` lines land here)."""
        if self._out is None or not self._out.exists():
            return ""
        return self._out.read_text(errors="replace").strip()

    def scontrol(self, *args: str) -> subprocess.CompletedProcess[str]:
        """The root's scontrol, in the controller's network namespace."""
        if self._ns_pid is None:
            raise RootError("not started")
        return subprocess.run(
            ["nsenter", "-t", str(self._ns_pid), "--net", "--", "chroot", str(self.root.path),
             "scontrol", *args],
            stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=15, check=False,
            env={"PATH": _PATH, "SLURM_CONF": f"{self.inside}/etc/slurm.conf"},
        )

    def stop(self) -> None:
        if self._proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._proc.pid, signal.SIGKILL)
            self._proc.wait(timeout=10)
            self._proc = None
            self._ns_pid = None

    def remove(self) -> None:
        self.stop()
        if self._work is not None:
            shutil.rmtree(self._work, ignore_errors=True)
            self._work = None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Build (or find) the cached Slurm root.")
    parser.add_argument("--cache", type=Path, default=None)
    parser.add_argument("--refresh", action="store_true", help="build again even if cached")
    args = parser.parse_args(argv)
    try:
        root = ensure_root(cache=args.cache, refresh=args.refresh)
    except RootError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(json.dumps({"path": str(root.path), "slurm_version": root.slurm_version,
                      "versions": root.versions, "build_s": root.build_s,
                      "size_bytes": root.size_bytes}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Accounting for the lab cluster: one MariaDB server and one slurmdbd per lab, as production runs them.

``sacct`` must be able to say which jobs an upgrade requeued and what GPUs
they held, and slurmdbd is the first daemon of a Slurm upgrade; a lab
without it would test neither. Production runs MariaDB beside slurmdbd; so
does the lab, at a cost kept small:

- the database files come from a template made once per machine and
  cluster name (``mariadb-install-db`` and slurmdbd's creation of a
  cluster's tables take seconds under load) and are copied into the lab (a
  few MiB: the InnoDB log is made small);
- the server has no network at all (``--skip-networking``): slurmdbd reaches
  it through its Unix socket in the lab directory, as the root database user
  that the socket authenticates (``unix_socket``), so there is no password;
- it is started once per lab, inside the lab's PID namespace (stopping the
  lab ends it), with small buffers.

slurmdbd listens on loopback only (``CommunicationParameters=NoInAddrAny``
under a UTS namespace whose host name is ``localhost``).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from lifecycle.lab import slurm_daemons

TEMPLATE_FORMAT = 1
"""Bumped when the template's making changes, so an older cached template is not reused."""

_SERVER_OPTIONS = (
    "--innodb-log-file-size=4M", "--innodb-buffer-pool-size=16M", "--performance-schema=OFF",
    "--skip-name-resolve", "--max-connections=40", "--innodb-lock-wait-timeout=900",
)

Run = Callable[[Sequence[str]], "subprocess.CompletedProcess[bytes]"]


class AccountingError(RuntimeError):
    """MariaDB or slurmdbd would not start; the message names the log to read."""


def _cache_dir() -> Path:
    env = os.environ.get("RACKLIFE_CACHE")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "racklife"


def _server_version() -> str:
    res = subprocess.run(["mariadbd", "--version"], capture_output=True, text=True, timeout=30, check=False)
    if res.returncode != 0 or not res.stdout.strip():
        raise AccountingError("mariadbd is not installed: apt-get install mariadb-server slurmdbd")
    return res.stdout.split()[2] if len(res.stdout.split()) > 2 else res.stdout.strip()


def _templates(cache: Path | None) -> Path:
    base = (cache or _cache_dir()) / "mariadb"
    base.mkdir(parents=True, exist_ok=True)
    return base


def cluster_template(cluster: str, cache: Path | None = None) -> Path:
    """Where the data directory with ``cluster``'s accounting tables is kept (it may not exist yet)."""
    return _templates(cache) / f"cluster-{TEMPLATE_FORMAT}-{_server_version()}-{cluster}"


def template(cache: Path | None = None) -> Path:
    """The initialised MariaDB data directory for this machine's server version, made once (locked)."""
    version = _server_version()
    base = _templates(cache)
    final = base / f"datadir-{TEMPLATE_FORMAT}-{version}"
    with (base / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (final / "mysql").is_dir():
            return final
        tmp = base / f".build-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        res = subprocess.run(
            ["mariadb-install-db", "--no-defaults", f"--datadir={tmp}", "--user=root",
             "--auth-root-authentication-method=socket", "--skip-test-db", "--innodb-log-file-size=4M"],
            stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300, check=False,
        )
        if res.returncode != 0:
            shutil.rmtree(tmp, ignore_errors=True)
            raise AccountingError(f"mariadb-install-db failed ({res.returncode}): {res.stderr.strip()[-500:]}")
        tmp.rename(final)
        return final


@dataclass(frozen=True)
class AccountingPaths:
    """Where a lab's database and slurmdbd keep their files (under the lab's Slurm root)."""

    root: Path

    @property
    def datadir(self) -> Path:
        return self.root / "db" / "data"

    @property
    def socket(self) -> Path:
        return self.root / "db" / "mysqld.sock"

    @property
    def tmpdir(self) -> Path:
        """The server's own temporary directory. Two labs' servers, each PID 10 of its lab's PID namespace,
        made the same temporary table names in a shared /tmp: one crashed (signal 11 in
        ``ha_maria::drop_table``) and slurmdbd never came up ("Lost connection to server during query")."""
        return self.root / "db" / "tmp"

    @property
    def server_log(self) -> Path:
        return self.root / "log" / "mariadb.log"

    @property
    def dbd_log(self) -> Path:
        return self.root / "log" / "slurmdbd.log"


def prepare(paths: AccountingPaths, cluster: str, cache: Path | None = None) -> bool:
    """The lab's data directory, copied from a template; True when it holds ``cluster``'s tables already."""
    shutil.rmtree(paths.datadir, ignore_errors=True)
    paths.datadir.parent.mkdir(parents=True, exist_ok=True)
    paths.datadir.parent.chmod(0o755)
    paths.tmpdir.mkdir(exist_ok=True)
    made = cluster_template(cluster, cache)
    if (made / "mysql").is_dir():
        shutil.copytree(made, paths.datadir, symlinks=True)
        return True
    shutil.copytree(template(cache), paths.datadir, symlinks=True)
    return False


def save_cluster_template(paths: AccountingPaths, cluster: str, cache: Path | None = None) -> None:
    """Keep the lab's data directory (the server stopped cleanly) as ``cluster``'s template."""
    final = cluster_template(cluster, cache)
    with (final.parent / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (final / "mysql").is_dir():
            return
        tmp = final.parent / f".save-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(paths.datadir, tmp, symlinks=True)
        tmp.rename(final)


def server_argv(paths: AccountingPaths) -> list[str]:
    """mariadbd on the lab's data directory: Unix socket only, run in the background (``setsid -f``)."""
    return ["setsid", "-f", "mariadbd", "--no-defaults", f"--datadir={paths.datadir}", f"--socket={paths.socket}",
            f"--pid-file={paths.root / 'run' / 'mariadbd.pid'}", f"--log-error={paths.server_log}",
            f"--tmpdir={paths.tmpdir}",
            "--skip-networking", "--user=root", *_SERVER_OPTIONS]


def client_env(paths: AccountingPaths, base: dict[str, str]) -> dict[str, str]:
    """The environment slurmdbd needs: MariaDB's client library finds the lab's socket by ``MYSQL_UNIX_PORT``."""
    return {**base, "MYSQL_UNIX_PORT": str(paths.socket)}


def slurmdbd_argv() -> list[str]:
    """slurmdbd with host name ``localhost`` (it binds the address its host name resolves to)."""
    return ["unshare", "--uts", "sh", "-c", 'hostname localhost && exec slurmdbd', "slurmdbd"]


def server_up(paths: AccountingPaths) -> bool:
    res = subprocess.run(["mariadb-admin", "--no-defaults", f"--socket={paths.socket}", "-u", "root", "ping"],
                         stdin=subprocess.DEVNULL, capture_output=True, timeout=10, check=False)
    return res.returncode == 0


def start(paths: AccountingPaths, run: Run, env: dict[str, str], timeout_s: float, cluster: str,
          has_cluster: bool, cache: Path | None = None) -> None:
    """Start MariaDB and slurmdbd inside the lab's namespaces and wait for both.

    The first lab of a cluster name on this machine registers the cluster
    (slurmdbd creates its tables), stops both cleanly and keeps the data
    directory as that cluster's template, then starts them again.
    """
    _start(paths, run, env, timeout_s)
    if has_cluster:
        return
    res = subprocess.run(["sacctmgr", "-i", "add", "cluster", cluster], capture_output=True, text=True, env=env,
                         timeout=120, check=False, stdin=subprocess.DEVNULL)
    if res.returncode != 0:
        raise AccountingError(f"sacctmgr add cluster {cluster} failed: {(res.stderr or res.stdout).strip()}")
    stop(paths, run, env, timeout_s)
    save_cluster_template(paths, cluster, cache)
    _start(paths, run, env, timeout_s)


def stop(paths: AccountingPaths, run: Run, env: dict[str, str], timeout_s: float) -> None:
    """Stop slurmdbd, then MariaDB cleanly (its files can then be copied)."""
    stop_dbd(paths, run, env, timeout_s)
    run(["mariadb-admin", "--no-defaults", f"--socket={paths.socket}", "-u", "root", "shutdown"])
    _wait(lambda: not paths.socket.exists(), timeout_s, f"MariaDB to stop (see {paths.server_log})")


def stop_dbd(paths: AccountingPaths, run: Run, env: dict[str, str], timeout_s: float) -> None:
    """SIGTERM to slurmdbd (by its pid file, inside the namespace), and wait until it no longer answers."""
    pid_file = paths.root / "run" / "slurmdbd.pid"
    with contextlib.suppress(OSError, ValueError):
        run(["kill", "-TERM", str(int(pid_file.read_text().strip()))])
    _wait(lambda: not dbd_up(env), timeout_s, "slurmdbd to stop")


def start_dbd(paths: AccountingPaths, run: Run, env: dict[str, str], timeout_s: float) -> None:
    res = run(slurmdbd_argv())
    if res.returncode != 0:
        raise AccountingError(f"slurmdbd did not start: {res.stderr.decode(errors='replace').strip()}; "
                              f"see {paths.dbd_log}")
    _wait(lambda: dbd_up(env), timeout_s, f"slurmdbd (see {paths.dbd_log})")


def _start(paths: AccountingPaths, run: Run, env: dict[str, str], timeout_s: float) -> None:
    if not server_up(paths):
        paths.tmpdir.mkdir(parents=True, exist_ok=True)
        res = run(server_argv(paths))
        if res.returncode != 0:
            raise AccountingError(f"mariadbd did not start: {res.stderr.decode(errors='replace').strip()}; "
                                  f"see {paths.server_log}")
        _wait(lambda: server_up(paths), timeout_s, f"MariaDB (see {paths.server_log})")
    start_dbd(paths, run, env, timeout_s)


def dbd_up(env: dict[str, str]) -> bool:
    """slurmdbd answers (``sacctmgr show configuration`` reaches it and says its version)."""
    return dbd_version(env) is not None


def dbd_version(env: dict[str, str]) -> str | None:
    """The running slurmdbd's version (``SLURMDBD_VERSION`` as slurmdbd itself reports it), or None."""
    with contextlib.suppress(OSError, subprocess.TimeoutExpired):
        res = subprocess.run(["sacctmgr", "-n", "show", "configuration"], capture_output=True, text=True,
                             env=env, timeout=10, check=False, stdin=subprocess.DEVNULL)
        for line in res.stdout.splitlines():
            key, _, value = line.partition("=")
            if key.strip() == "SLURMDBD_VERSION" and value.strip():
                return value.strip()
    return None


def _wait(cond: Callable[[], bool], timeout: float, what: str) -> None:
    slurm_daemons.wait_until(cond, timeout, what, AccountingError)

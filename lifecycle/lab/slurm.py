"""A real Slurm cluster on one machine: munge, slurmctld, one slurmd per node, optional slurmrestd.

The lab and the tests need the real daemons (they are what refuses a bad
config or loses a job), not a fake. Everything runs inside one PID namespace
whose init is a tiny reaper, so ``stop()`` ends every daemon, step and job at
once, and nothing leaks into the next test. Configuration is rendered from an
inventory with the same renderer production uses; only the per-host settings
(ports, paths, fake GPU device files, plugins that need no cgroups) differ.

How this works on one host, and its traps, are written up in
``../shared/notes/slurm-on-one-machine.md``.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lifecycle.drivers.slurm.render import (
    RenderOptions,
    lendable_nodes,
    render,
    slurm_nodes,
)
from lifecycle.lab import slurm_accounting, slurm_daemons
from lifecycle.lab.ports import PortLease
from lifecycle.lab.slurm_options import DAEMON_PORTS as DAEMON_PORTS
from lifecycle.lab.slurm_options import LabSlurmConfig as LabSlurmConfig
from lifecycle.lab.slurm_options import render_options
from lifecycle.lab.slurm_power import booted_slurmd
from lifecycle.model.inventory import Inventory
from lifecycle.model.skus import SKUS

_REAPER = (
    "import os, time\n"
    "while True:\n"
    "    try:\n"
    "        os.wait()\n"
    "    except ChildProcessError:\n"
    "        time.sleep(0.2)\n"
)

_POWER_WRAPPER = """#!{python}
import sys
from lifecycle.lab.slurm_power import main
sys.exit(main([{action!r}, {conf!r}, *sys.argv[1:]]))
"""

_PROGRAM_WRAPPER = """#!{python}
import os
import sys
argv = {argv!r}
os.execve(argv[0], [*argv, *sys.argv[1:]], dict(os.environ, **{env!r}))
"""

MAX_ROOT_LEN = 60
"""Unix socket paths are limited to 108 bytes; keep the root short."""


class LabError(RuntimeError):
    """The lab cluster could not be started or driven; the message names the daemon and its log."""


@dataclass
class LabSlurm:
    """A running (or stopped) lab cluster. Use ``start()``/``stop()`` or the context manager."""

    config: LabSlurmConfig
    ports: dict[str, int] = field(default_factory=dict)
    rest_url: str | None = None
    _init: subprocess.Popen[bytes] | None = None
    _init_pid: int | None = None
    _rest: subprocess.Popen[bytes] | None = None
    _has_cluster: bool = False
    _lease: PortLease = field(default_factory=PortLease)
    """The ports this lab picked (slurmctld, slurmrestd, each node's slurmd), held until stop()."""

    # ------------------------------------------------------------- paths

    @property
    def root(self) -> Path:
        return self.config.root

    @property
    def conf(self) -> Path:
        return self.root / "etc" / "slurm.conf"

    def env(self) -> dict[str, str]:
        """Environment for Slurm clients (scontrol, sinfo, sbatch) talking to this cluster."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
        env["SLURM_CONF"] = str(self.conf)
        return env

    @property
    def cluster_name(self) -> str:
        return self.config.inventory.site.name

    @property
    def accounting_paths(self) -> slurm_accounting.AccountingPaths:
        return slurm_accounting.AccountingPaths(self.root)

    def log(self, name: str) -> Path:
        return self.root / "log" / f"{name}.log"

    # ------------------------------------------------------------- lifecycle

    def render_options(self) -> RenderOptions:
        return render_options(self.config, self.root, self.ports)

    def prepare(self) -> None:
        """Create the root tree, keys, fake GPUs and rendered config (no daemon started)."""
        if len(str(self.root)) > MAX_ROOT_LEN:
            raise LabError(f"lab root {self.root} is too long for Unix socket paths")
        # A lab cluster starts empty: no jobs or drains recovered from an earlier run, no accounting records.
        for sub in ("state", "spool", "run", "db"):
            shutil.rmtree(self.root / sub, ignore_errors=True)
        for sub in ("etc", "state", "spool", "log", "run", "dev", "munge", "bin"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
            (self.root / sub).chmod(0o755)
        self.root.chmod(0o755)
        inv = self.config.inventory
        nodes = slurm_nodes(inv)
        if not self.ports:
            # A lent node's slurmd binds its port only when the node is powered on (see ports).
            daemons = ["slurmctld", *(["slurmdbd"] if self.config.accounting else [])]
            ports = self._lease.take(len(daemons) + len(nodes))
            self.ports = {**dict(zip(daemons, ports, strict=False)),
                          **{n.name: p for n, p in zip(nodes, ports[len(daemons):], strict=True)}}
        gpus = max((SKUS[n.sku].gpu_count for n in nodes), default=0)
        for i in range(gpus):
            dev = self.root / "dev" / f"nvidia{i}"
            if not dev.exists():
                # gres/gpu refuses regular files: a char device aliasing /dev/null.
                os.mknod(dev, 0o666 | 0o020000, os.makedev(1, 3))
        munge_key = self.root / "etc" / "munge.key"
        if not munge_key.exists():
            munge_key.write_bytes(secrets.token_bytes(1024))
            munge_key.chmod(0o400)
        jwt_key = self.root / "etc" / "jwt.key"
        if not jwt_key.exists():
            jwt_key.write_bytes(secrets.token_bytes(32))
            jwt_key.chmod(0o600)
        for name, text in render(inv, self.render_options()).files.items():
            (self.root / "etc" / name).write_text(text)
        # The two controllers' names, for the cluster's mount namespace only (see slurm_daemons).
        (self.root / "etc" / "hosts").write_text(slurm_daemons.hosts_file(Path("/etc/hosts").read_text()))
        if self.config.accounting:
            (self.root / "etc" / "slurmdbd.conf").chmod(0o600)  # slurmdbd wants it private to SlurmUser
            self._has_cluster = slurm_accounting.prepare(self.accounting_paths, self.cluster_name)
        programs = self.config.power_programs
        for i, action in enumerate(("resume", "suspend")):
            prog = self.root / "bin" / action
            if programs is None:
                prog.write_text(
                    _POWER_WRAPPER.format(python=sys.executable, action=action, conf=str(self.conf))
                )
            else:
                prog.write_text(_PROGRAM_WRAPPER.format(
                    python=sys.executable, argv=list(programs[i]),
                    env={**dict(self.config.power_env), "SLURM_CONF": str(self.conf)},
                ))
            prog.chmod(0o755)

    def role_switch_command(self, kubeconfig: Path) -> list[str]:
        """The lab's node-role hook for racklife (``RACKLIFE_NODE_ROLE_CMD``), as an argv list."""
        return [sys.executable, "-m", "lifecycle.lab.slurm_power", "role-switch",
                "--conf", str(self.conf), "--kubeconfig", str(kubeconfig)]

    def start(self) -> LabSlurm:
        if self._init is not None:
            raise LabError("already started")
        self.prepare()
        self._init = subprocess.Popen(
            ["unshare", "--pid", "--fork", "--kill-child=SIGKILL", "--mount-proc",
             sys.executable, "-c", _REAPER],
            stdin=subprocess.DEVNULL, start_new_session=True,
        )
        try:
            self._init_pid = self._find_init()
            self._start_daemons()
        except BaseException:
            self.stop()
            raise
        return self

    def _find_init(self) -> int:
        assert self._init is not None
        children = Path(f"/proc/{self._init.pid}/task/{self._init.pid}/children")
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError):
                text = children.read_text().split()
                if text:
                    return int(text[0])
            time.sleep(0.02)
        raise LabError("the PID namespace init did not start")

    def _ns(self, argv: Sequence[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[bytes]:
        """Run argv inside the cluster's PID and mount namespaces, waiting for it."""
        assert self._init_pid is not None
        return subprocess.run(
            ["nsenter", "-t", str(self._init_pid), "--pid", "--mount", "--", *argv],
            stdin=subprocess.DEVNULL, capture_output=True, timeout=30, check=False,
            env=env if env is not None else self.env(),
        )

    def run_inside(self, argv: Sequence[str], env: dict[str, str] | None = None,
                   timeout_s: float = 60.0) -> subprocess.CompletedProcess[str]:
        """Run argv inside the cluster's PID and mount namespaces, as slurmctld runs its programs.

        PIDs in the cluster's pid files are the namespace's own: anything that
        signals a daemon by its pid file must run in here.
        """
        if self._init_pid is None:
            raise LabError("the cluster is not running")
        return subprocess.run(
            ["nsenter", "-t", str(self._init_pid), "--pid", "--mount", "--", *argv],
            stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout_s, check=False,
            env=env if env is not None else self.env(),
        )

    def _checked(self, what: str, argv: Sequence[str]) -> None:
        res = self._ns(argv)
        if res.returncode != 0:
            raise LabError(
                f"{what} failed ({res.returncode}): {res.stderr.decode(errors='replace').strip()}; "
                f"see {self.root / 'log'}"
            )

    def _start_daemons(self) -> None:
        r = self.root
        sock = r / "munge" / "munge.socket"
        self._checked("munged", [
            "munged", f"--key-file={r / 'etc' / 'munge.key'}", f"--socket={sock}",
            f"--pid-file={r / 'run' / 'munged.pid'}", f"--log-file={self.log('munged')}",
            f"--seed-file={r / 'munge' / 'seed'}", "--force",
        ])
        _wait(lambda: sock.exists(), 10, "munged socket")
        if self.config.backup_controller:
            self._checked("/etc/hosts", ["mount", "--bind", str(r / "etc" / "hosts"), "/etc/hosts"])
        if self.config.accounting:
            self.start_accounting()
        for ctl in slurm_daemons.controllers(self.conf):
            self._checked(f"slurmctld ({ctl.role})", slurm_daemons.controller_argv(self.conf, ctl))
            _wait(lambda role=ctl.role: slurm_daemons.ping(self.env()).get(role) == "UP",  # type: ignore[misc]
                  self.config.ready_timeout_s, f"slurmctld {ctl.role} (see {self.log('slurmctld')})")
        inv = self.config.inventory
        lendable = {n.name for n in lendable_nodes(inv)}
        wanted = self.config.start_nodes
        if wanted is None:
            wanted = [n.name for n in slurm_nodes(inv) if n.name not in lendable]
        for name in wanted:
            self.start_node(name, wait=False)
        if self.config.rest:
            self._start_rest()
        _wait(lambda: self._all_idle(wanted), self.config.ready_timeout_s, "nodes to become idle")

    def start_accounting(self) -> None:
        """MariaDB (once per lab) and slurmdbd; slurmctld accounts to slurmdbd from its start."""
        paths = self.accounting_paths
        env = slurm_accounting.client_env(paths, self.env())
        try:
            slurm_accounting.start(paths, lambda argv: self._ns(argv, env=env), self.env(),
                                   self.config.ready_timeout_s, self.cluster_name, self._has_cluster)
        except slurm_accounting.AccountingError as exc:
            raise LabError(str(exc)) from None

    def _start_rest(self) -> None:
        assert self._init_pid is not None
        [port] = self._lease.take(1)
        env = self.env()
        env["SLURM_JWT"] = "daemon"
        with self.log("slurmrestd").open("wb") as log:
            self._rest = subprocess.Popen(
                ["nsenter", "-t", str(self._init_pid), "--pid", "--mount", "--",
                 "slurmrestd", "-f", str(self.conf), "-u", "nobody", "-g", "nogroup",
                 "-a", "rest_auth/jwt", "-s", "openapi/v0.0.38", f"127.0.0.1:{port}"],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log, env=env,
            )
        self.rest_url = f"http://127.0.0.1:{port}"

        def answering() -> bool:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
                return True
            return False

        _wait(answering, self.config.ready_timeout_s, f"slurmrestd (see {self.log('slurmrestd')})")

    def token(self, lifespan_s: int = 3600) -> str:
        """A JWT for slurmrestd (never logged)."""
        res = subprocess.run(
            ["scontrol", "token", "username=root", f"lifespan={lifespan_s}"],
            capture_output=True, text=True, env=self.env(), timeout=10, check=True,
        )
        return res.stdout.strip().removeprefix("SLURM_JWT=")

    def start_node(self, name: str, *, wait: bool = True) -> None:
        """Start one node's slurmd (the lab calls this when the node's BMC powers it on)."""
        if name not in self.ports:
            raise LabError(f"{name} is not a Slurm node of this lab")
        # A power-on is a boot: the node's boot clock starts now (see slurm_power).
        self._checked(f"slurmd {name}", booted_slurmd(self.conf, name))
        if wait:
            _wait(lambda: self._all_idle([name], allow_flags=True), self.config.ready_timeout_s,
                  f"{name} to register")

    def stop_node(self, name: str) -> None:
        """Stop one node's slurmd (its BMC powered it off); jobs on it die with their steps."""
        pid_file = self.root / "run" / f"slurmd-{name}.pid"
        with contextlib.suppress(OSError, ValueError):
            pid = int(pid_file.read_text().strip())
            self._ns(["kill", "-KILL", str(pid)])
            pid_file.unlink()

    def stop(self) -> None:
        """End every daemon and job at once by ending the PID namespace."""
        if self._init is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._init.pid, signal.SIGKILL)
            self._init.wait(timeout=10)
            self._init = None
            self._init_pid = None
        if self._rest is not None:
            self._rest.wait(timeout=10)
            self._rest = None
        if self._lease.ports:
            # Ports this lab picked go back; a restart picks (and renders) them afresh.
            if set(self.ports.values()) <= set(self._lease.ports):
                self.ports = {}
            self._lease.release()

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> LabSlurm:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------- readiness

    def _scontrol(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["scontrol", *args], capture_output=True, text=True, env=self.env(), timeout=10,
            check=False,
        )

    def _all_idle(self, names: Sequence[str], allow_flags: bool = False) -> bool:
        if not names:
            return True
        res = subprocess.run(
            ["sinfo", "-h", "-N", "-n", ",".join(names), "-o", "%N %T"],
            capture_output=True, text=True, env=self.env(), timeout=10, check=False,
        )
        states = dict(line.split() for line in res.stdout.splitlines() if line.strip())
        if set(states) != set(names):
            return False
        ok = {"idle", "mixed", "allocated", "drained", "draining"} if allow_flags else {"idle"}
        return all(s in ok for s in states.values())


def start(config: LabSlurmConfig) -> LabSlurm:
    return LabSlurm(config).start()


@contextlib.contextmanager
def running(config: LabSlurmConfig) -> Iterator[LabSlurm]:
    lab = LabSlurm(config)
    try:
        yield lab.start()
    finally:
        lab.stop()


def lab_config(inventory: Inventory, root: Path, **kw: Any) -> LabSlurmConfig:
    """A config with the given fields set (used by the emulated rack)."""
    return LabSlurmConfig(inventory=inventory, root=root, **kw)


def _wait(cond: Callable[[], bool], timeout: float, what: str) -> None:
    slurm_daemons.wait_until(cond, timeout, what, LabError)

"""Slurm's daemons as an upgrade sees them: the version each one runs, and the site's hook that restarts one.

An upgrade is proven by what the daemons say once restarted, never by what
was installed: slurmdbd reports ``SLURMDBD_VERSION`` and its ``BOOT_TIME``
(the "SlurmDBD configuration" part of ``sacctmgr show configuration``, which
the running slurmdbd answers), the controller in charge its
``SLURM_VERSION`` and ``BOOT_TIME`` (``scontrol show config``), every slurmd
its ``Version`` and ``SlurmdStartTime`` as it registered (``scontrol show
node``). ``scontrol ping`` says which controllers answer.

Installing Slurm's packages and restarting a daemon onto them is a site's
own business (its package repository, its init system, on which host), so
it is a hook, like the role switch: ``RACKLIFE_SLURM_DAEMON_CMD``, run with
an argv list (never a shell) as ``<argv…> restart slurmdbd``, ``<argv…>
restart slurmctld`` (every controller: the backup first, then the primary)
or ``<argv…> restart slurmd NODE``, with ``RACKLIFE_SLURM_VERSION`` in its
environment; exit 0 means the daemon runs again. The lab's own hook is
``lifecycle.lab.slurm_daemons``.

A hook may outlive the racklife process that started it (a SIGKILL reaches
racklife, not its child), and a recovered run must not start a second
restart beside it. So while a hook runs, its pid and start time are in a
mark file per daemon (``lock_dir``), and a recovered restart of that daemon
on this host first waits for a hook the mark names that still runs
(:meth:`DaemonHook.wait_for_earlier`), then looks at the daemon.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from lifecycle.drivers.errors import NotSupported, OperationFailed, Unreachable
from lifecycle.drivers.slurm.runner import Runner
from lifecycle.model import vocab
from lifecycle.model.procs import pid_start

DAEMON_CMD_ENV = "RACKLIFE_SLURM_DAEMON_CMD"
VERSION_ENV = "RACKLIFE_SLURM_VERSION"
Daemon = Literal["slurmdbd", "slurmctld", "slurmd"]
_VERSION = re.compile(r"^\d{2}\.\d{2}\.\d+(-\d+)?\Z")


def check_version(text: str) -> str:
    """A Slurm release as its daemons print it (``22.05.8``); ValueError otherwise."""
    if not _VERSION.match(text.strip()):
        raise ValueError(f"--slurm must be a Slurm release like 22.05.8, not {text!r}")
    return text.strip()


def _key_values(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            out[key.strip()] = value.strip()
    return out


_DBD_PART = "SlurmDBD configuration:"


def dbd_config(run: Runner) -> dict[str, str]:
    """What the running slurmdbd says of itself (``SLURMDBD_VERSION``, ``BOOT_TIME``, …): the part of
    ``sacctmgr show configuration`` after "SlurmDBD configuration:" (before it: the client's own
    settings). A DriverError when slurmdbd does not answer."""
    text = run(["sacctmgr", "-n", "show", "configuration"])
    _, sep, part = text.partition(_DBD_PART)
    found = _key_values(part) if sep else {}
    if not found.get("SLURMDBD_VERSION"):
        raise Unreachable("slurmdbd", "sacctmgr show configuration had no SLURMDBD_VERSION: slurmdbd did not answer")
    return found


def dbd_version(run: Runner) -> str:
    """The running slurmdbd's version; a DriverError when it does not answer."""
    return dbd_config(run)["SLURMDBD_VERSION"]


def ctld_version(run: Runner) -> str:
    """The version of the slurmctld in charge (its own answer to ``scontrol show config``)."""
    found = _key_values(run(["scontrol", "show", "config"])).get("SLURM_VERSION")
    if not found:
        raise OperationFailed("slurmctld", "scontrol show config had no SLURM_VERSION")
    return found


def slurmd_version(run: Runner, node: str) -> str | None:
    """The version ``node``'s slurmd registered with (None: it has not registered since slurmctld started)."""
    words = run(["scontrol", "-o", "show", "node", vocab.node_name(node)]).split()
    version = next((w.split("=", 1)[1] for w in words if w.startswith("Version=")), "")
    return version if version and version != "(null)" else None


def controllers_up(run: Runner) -> dict[str, bool]:
    """``scontrol ping``: role (``primary``, ``backup``) -> whether it answers."""
    try:
        text = run(["scontrol", "ping"])
    except OperationFailed as exc:  # exit 1 when a controller is down; the text is still the answer
        text = exc.message
    return {("backup" if role.startswith("backup") else role): state == "UP"
            for role, state in re.findall(r"Slurmctld\((primary|backup\d*)\) at \S+ is (UP|DOWN)", text)}


@dataclass(frozen=True)
class DaemonHook:
    """Runs the site's daemon command: restart one Slurm daemon onto the installed (new) binaries."""

    argv: tuple[str, ...]
    timeout_s: float = 300.0
    lock_dir: Path | None = None
    """Where the per-daemon lock files live (None: no lock; a test's hook)."""

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, lock_dir: Path | None = None) -> DaemonHook:
        text = (env if env is not None else os.environ).get(DAEMON_CMD_ENV, "").strip()
        if not text:
            raise NotSupported("slurm", f"no daemon command: set ${DAEMON_CMD_ENV} (see docs/upgrade.md)")
        return cls(tuple(shlex.split(text)), lock_dir=lock_dir)

    def _mark(self, daemon: Daemon, node: str | None) -> Path | None:
        if self.lock_dir is None:
            return None
        return self.lock_dir / f"{daemon}{'-' + vocab.node_name(node) if node else ''}.hook"

    def wait_for_earlier(self, daemon: Daemon, node: str | None = None) -> int | None:
        """Wait (up to ``timeout_s``) for a hook of ``daemon`` that an earlier, killed process started and
        that still runs; return its pid (None: there was none)."""
        mark = self._mark(daemon, node)
        if mark is None:
            return None
        try:
            pid_text, _, started = mark.read_text().partition(" ")
            pid = int(pid_text)
        except (OSError, ValueError):
            return None
        deadline = time.monotonic() + self.timeout_s
        while pid_start(pid) == started.strip():  # a reused pid has another start time
            if time.monotonic() > deadline:
                raise Unreachable(node or daemon, f"an earlier restart of {daemon} (pid {pid}) still runs after "
                                                  f"{self.timeout_s:.0f}s")
            time.sleep(0.2)
        return pid

    def restart(self, daemon: Daemon, version: str, node: str | None = None) -> str:
        """Restart ``daemon`` (on ``node`` for slurmd) onto ``version``; its output, for the record.

        The hook's pid (and start time) is written to its mark file while it runs, so that a process
        recovering this restart after a crash waits for it (:meth:`wait_for_earlier`)."""
        if daemon == "slurmd" and (node is None or not vocab.is_node_name(node)):
            raise ValueError(f"{node!r} is not a valid node name")
        argv = [*self.argv, "restart", daemon, *([node] if node else [])]
        env = {**os.environ, VERSION_ENV: check_version(version)}
        mark = self._mark(daemon, node)
        try:
            proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                                    stdin=subprocess.DEVNULL)
        except FileNotFoundError:
            raise NotSupported(daemon, f"daemon command {self.argv[0]!r} not found") from None
        try:
            if mark is not None:
                mark.parent.mkdir(parents=True, exist_ok=True)
                mark.write_text(f"{proc.pid} {pid_start(proc.pid) or ''}")
            try:
                out, err = proc.communicate(timeout=self.timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()
                raise Unreachable(daemon, f"restart gave no answer within {self.timeout_s:.0f}s") from None
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            if mark is not None:
                mark.unlink(missing_ok=True)
        if proc.returncode != 0:
            raise OperationFailed(node or daemon, f"restart {daemon} failed ({proc.returncode}): "
                                  f"{(err or out).strip()[-500:]}")
        return out.strip()



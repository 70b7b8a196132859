"""The lab's Slurm daemons one at a time: a primary and a backup slurmctld, configless slurmd, restarts.

Production runs two slurmctld (``SlurmctldHost`` twice) on two hosts that
share StateSaveLocation, and slurmd that fetch their configuration from
slurmctld (``--conf-server``). On one machine the two controllers need what
two hosts would give them, and this module gives it:

- a host name each (slurmctld finds its own ``SlurmctldHost`` line by its
  host name): each runs in a UTS namespace named after its line;
- an address each (both listen on ``SlurmctldPort``): ``127.0.0.1`` and
  ``127.0.0.2``, both loopback; the lab's ``/etc/hosts`` (bind-mounted in
  the cluster's mount namespace only) resolves the two names, since a
  slurmctld binds the address its host name resolves to;
- a pid file each (a starting slurmctld kills whatever process its pid file
  names, so a shared one would let the backup kill the primary): the
  configured path is bind-mounted, in the controller's own mount namespace,
  onto ``slurmctld-<role>.pid``.

slurmd runs under host name ``localhost`` (what its ``NodeHostname`` says),
so it binds 127.0.0.1 whichever controller's ResumeProgram started it.

Also the lab's daemon hook for a Slurm upgrade (``racklife lab env``
exports it as ``RACKLIFE_SLURM_DAEMON_CMD``)::

    python -m lifecycle.lab.slurm_daemons --lab-dir DIR restart slurmdbd|slurmctld|slurmd [NODE]
    python -m lifecycle.lab.slurm_daemons --lab-dir DIR kill slurmctld-primary

In the lab there is one Slurm version: a "restart onto the new binaries" is
a restart onto the same ones (``docs/limits.md``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from lifecycle.lab.control import STATE_FILE

Run = Callable[[Sequence[str]], "subprocess.CompletedProcess[str]"]

PRIMARY_HOST = "lab-ctl-1"
BACKUP_HOST = "lab-ctl-2"
ADDRS = {PRIMARY_HOST: "127.0.0.1", BACKUP_HOST: "127.0.0.2"}

# Runs inside the cluster's mount namespace: a host name, the controller's own pid file, then slurmctld.
_CONTROLLER = (
    'hostname "$1" && touch "$2" "$3" && mount --bind "$2" "$3" && exec slurmctld -f "$4"'
)
_SLURMD = 'hostname localhost && exec "$@"'
# A configless slurmd authenticates its first request (for the configuration that names the lab's munge
# socket) with munge's default socket: in its own mount namespace, a /run holding only that path.
_SLURMD_CONFIGLESS = (
    'hostname localhost && mount -t tmpfs -o mode=755 racklife /run && mkdir /run/munge && '
    'ln -s "$1" /run/munge/munge.socket.2 && shift && exec "$@"'
)
_HOST_LINE = re.compile(r"^SlurmctldHost=([^()\s]+)(?:\(([^()\s]+)\))?\s*$")


@dataclass(frozen=True)
class Controller:
    index: int
    host: str
    addr: str

    @property
    def role(self) -> str:
        return "primary" if self.index == 0 else "backup"


def conf_value(conf: Path, key: str) -> str | None:
    for line in conf.read_text().splitlines():
        k, _, v = line.partition("=")
        if k.strip().lower() == key.lower():
            return v.strip()
    return None


def controllers(conf: Path) -> list[Controller]:
    """The ``SlurmctldHost`` lines of ``conf``, primary first."""
    found = [m for line in conf.read_text().splitlines() if (m := _HOST_LINE.match(line.strip()))]
    return [Controller(i, m[1], m[2] or m[1]) for i, m in enumerate(found)]


def hosts_file(base: str) -> str:
    """The host's /etc/hosts with the two controllers' names added."""
    return base.rstrip("\n") + "\n" + "".join(f"{a} {h}\n" for h, a in ADDRS.items())


def pid_file(conf: Path, c: Controller) -> Path:
    shared = Path(conf_value(conf, "SlurmctldPidFile") or "/run/slurm/slurmctld.pid")
    return shared.with_name(f"slurmctld-{c.role}.pid")


def controller_argv(conf: Path, c: Controller) -> list[str]:
    """slurmctld as the host ``c`` names (a single ``localhost`` controller needs nothing more)."""
    if c.host == "localhost":
        return ["slurmctld", "-f", str(conf)]
    shared = conf_value(conf, "SlurmctldPidFile") or "/run/slurm/slurmctld.pid"
    return ["unshare", "--uts", "--mount", "sh", "-c", _CONTROLLER, "slurmctld", c.host,
            str(pid_file(conf, c)), shared, str(conf)]


def conf_server(conf: Path) -> str | None:
    """``--conf-server`` for a configless slurmd (every controller, in order), or None without configless."""
    params = conf_value(conf, "SlurmctldParameters") or ""
    if "enable_configless" not in params.split(","):
        return None
    port = conf_value(conf, "SlurmctldPort") or "6817"
    return ",".join(f"{c.addr}:{port}" for c in controllers(conf))


def slurmd_argv(conf: Path, node: str, boot_offset_s: int) -> list[str]:
    """slurmd for ``node``: in a time namespace whose boot clock says the machine just booted, under host name
    ``localhost``, configless when slurmctld serves its configuration."""
    server = conf_server(conf)
    ns = ["unshare", "--fork", "--time", f"--boottime=-{boot_offset_s}", "--uts"]
    if server is None:
        return [*ns, "sh", "-c", _SLURMD, "slurmd", "slurmd", "-N", node, "-f", str(conf)]
    socket = (conf_value(conf, "AuthInfo") or "").removeprefix("socket=")
    if not socket:
        return [*ns, "sh", "-c", _SLURMD, "slurmd", "slurmd", "-N", node, "--conf-server", server]
    return [*ns, "--mount", "sh", "-c", _SLURMD_CONFIGLESS, "slurmd", socket,
            "slurmd", "-N", node, "--conf-server", server]


def uptime() -> float:
    return float(Path("/proc/uptime").read_text().split()[0])


# ------------------------------------------------------------------ control, inside the cluster's namespaces


def _pid(path: Path) -> int | None:
    with contextlib.suppress(OSError, ValueError):
        return int(path.read_text().strip())
    return None


def _alive(run: Run, pid: int) -> bool:
    return run(["kill", "-0", str(pid)]).returncode == 0


def wait_until(cond: Callable[[], bool], timeout: float, what: str,
               error: type[Exception] = RuntimeError) -> None:
    """Poll ``cond`` every 0.1 s; ``error`` (the caller's own kind) if it is not true within ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.1)
    raise error(f"timed out after {timeout:.0f}s waiting for {what}")


def _wait(cond: Callable[[], bool], timeout: float, what: str) -> None:
    wait_until(cond, timeout, what)


def stop_pid(run: Run, pid_path: Path, what: str, signal_name: str = "TERM", timeout_s: float = 30.0) -> None:
    """Signal the process ``pid_path`` names and wait for it to end (nothing to do when none runs)."""
    pid = _pid(pid_path)
    if pid is None or not _alive(run, pid):
        return
    run(["kill", f"-{signal_name}", str(pid)])
    _wait(lambda: not _alive(run, pid), timeout_s, f"{what} (pid {pid}) to stop")


def controller(conf: Path, role: str) -> Controller:
    for c in controllers(conf):
        if c.role == role:
            return c
    raise RuntimeError(f"slurm.conf has no {role} SlurmctldHost")


def start_controller(run: Run, conf: Path, c: Controller) -> None:
    res = run(controller_argv(conf, c))
    if res.returncode != 0:
        raise RuntimeError(f"slurmctld ({c.role}) did not start: {res.stderr.strip()}")


def stop_controller(run: Run, conf: Path, c: Controller, signal_name: str = "TERM") -> None:
    path = pid_file(conf, c) if c.host != "localhost" else \
        Path(conf_value(conf, "SlurmctldPidFile") or "/run/slurm/slurmctld.pid")
    stop_pid(run, path, f"slurmctld ({c.role})", signal_name)


def ping(env: dict[str, str]) -> dict[str, str]:
    """``scontrol ping``: role -> ``UP`` or ``DOWN`` (``{}`` when scontrol cannot say)."""
    res = subprocess.run(["scontrol", "ping"], capture_output=True, text=True, env=env, timeout=30, check=False,
                         stdin=subprocess.DEVNULL)
    found = re.findall(r"Slurmctld\((primary|backup\d*)\) at \S+ is (UP|DOWN)", res.stdout)
    return {("backup" if role.startswith("backup") else role): state for role, state in found}


def in_control(env: dict[str, str]) -> str | None:
    """Which controller answers for the cluster now (``scontrol show config``'s answer comes from it)."""
    res = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True, env=env, timeout=30,
                         check=False, stdin=subprocess.DEVNULL)
    if res.returncode != 0:
        return None
    up = ping(env)
    return "primary" if up.get("primary") == "UP" else "backup" if up.get("backup") == "UP" else None


def _boot_offset(run: Run, pid: int | None) -> int:
    """The boot clock offset of slurmd ``pid``'s time namespace (a restart is not a reboot: it keeps it)."""
    if pid is not None:
        res = run(["cat", f"/proc/{pid}/timens_offsets"])
        for line in res.stdout.splitlines():
            words = line.split()
            if len(words) == 3 and words[0] == "boottime":
                return -int(words[1])
    return math.floor(uptime())


def restart_slurmd(run: Run, conf: Path, node: str) -> None:
    """Stop ``node``'s slurmd (its job steps live on in slurmstepd) and start it again, same boot time."""
    run_dir = Path(conf_value(conf, "SlurmdPidFile") or "/run/slurm/slurmd-%n.pid").parent
    pid_path = run_dir / f"slurmd-{node}.pid"
    offset = _boot_offset(run, _pid(pid_path))
    stop_pid(run, pid_path, f"slurmd {node}")
    res = run(slurmd_argv(conf, node, offset))
    if res.returncode != 0:
        raise RuntimeError(f"slurmd {node} did not start: {res.stderr.strip()}")


# ------------------------------------------------------------------ the hook


def init_pid(lab_dir: Path) -> int:
    """The init of the lab's Slurm PID namespace (what ``nsenter -t`` enters), from the lab's state file."""
    state = json.loads((lab_dir / STATE_FILE).read_text(encoding="utf-8"))
    unshare = state.get("slurm_pgid")
    if not unshare:
        raise RuntimeError("the lab's Slurm is not running")
    children = Path(f"/proc/{unshare}/task/{unshare}/children").read_text().split()
    if not children:
        raise RuntimeError("the lab's Slurm PID namespace has no init")
    return int(children[0])


def _inside(lab_dir: Path, extra: dict[str, str] | None = None) -> tuple[Run, Path, dict[str, str]]:
    """A runner into the lab's Slurm namespaces, slurm.conf and the clients' environment (plus ``extra``)."""
    init = init_pid(lab_dir)
    conf = Path(json.loads((lab_dir / STATE_FILE).read_text(encoding="utf-8"))["slurm_conf"])
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")} | {"SLURM_CONF": str(conf)}
    inner = env | (extra or {})

    def run(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["nsenter", "-t", str(init), "--pid", "--mount", "--", *argv], env=inner,
                              stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60, check=False)
    return run, conf, env


def _record(conf: Path, line: str) -> None:
    """What the hook did, in order, beside slurmctld's log (``daemons.log``): the order a test checks."""
    log = Path(conf_value(conf, "SlurmctldLogFile") or "/var/log/slurm/slurmctld.log").with_name("daemons.log")
    with log.open("a", encoding="utf-8") as f:
        f.write(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {line}\n")


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m lifecycle.lab.slurm_daemons")
    parser.add_argument("--lab-dir", type=Path, required=True)
    parser.add_argument("action", choices=("restart", "kill"))
    parser.add_argument("daemon", choices=("slurmdbd", "slurmctld", "slurmctld-primary", "slurmctld-backup",
                                           "slurmd"))
    parser.add_argument("node", nargs="?")
    opts = parser.parse_args(argv)
    try:
        from lifecycle.lab import slurm_accounting
        run, conf, env = _inside(opts.lab_dir)
        if opts.daemon == "slurmd":
            if not opts.node:
                raise RuntimeError("slurmd needs the node's name")
            if opts.action == "kill":
                raise RuntimeError("kill is for a slurmctld only")
            restart_slurmd(run, conf, opts.node)
            _record(conf, f"restart slurmd {opts.node}")
            print(f"slurmd {opts.node}: restarted")
            return 0
        if opts.daemon == "slurmdbd":
            if opts.action == "kill":
                raise RuntimeError("kill is for a slurmctld only")
            paths = slurm_accounting.AccountingPaths(conf.parent.parent)
            # slurmdbd finds the lab's MariaDB socket by MYSQL_UNIX_PORT, in its own environment.
            dbd_run, _, _ = _inside(opts.lab_dir, {"MYSQL_UNIX_PORT": str(paths.socket)})
            slurm_accounting.stop_dbd(paths, _bytes(run), env, 60)
            slurm_accounting.start_dbd(paths, _bytes(dbd_run), env, 60)
            _record(conf, "restart slurmdbd")
            print("slurmdbd: restarted")
            return 0
        roles = {"slurmctld": [c.role for c in controllers(conf)][::-1],  # the backup first, then the primary
                 "slurmctld-primary": ["primary"], "slurmctld-backup": ["backup"]}[opts.daemon]
        for role in roles:
            c = controller(conf, role)
            if opts.action == "kill":
                stop_controller(run, conf, c, "KILL")
                _record(conf, f"kill slurmctld {role}")
                print(f"slurmctld ({role}): killed")
                continue
            stop_controller(run, conf, c)
            start_controller(run, conf, c)
            _wait(lambda r=role: ping(env).get(r) == "UP", 60, f"slurmctld ({role}) to answer")  # type: ignore[misc]
            _record(conf, f"restart slurmctld {role}")
            print(f"slurmctld ({role}): restarted")
    except (OSError, RuntimeError, KeyError, ValueError, subprocess.TimeoutExpired) as exc:
        sys.stderr.write(f"slurm_daemons: {exc}\n")
        return 1
    return 0


def _bytes(run: Run) -> Callable[[Sequence[str]], subprocess.CompletedProcess[bytes]]:
    def as_bytes(argv: Sequence[str]) -> subprocess.CompletedProcess[bytes]:
        res = run(argv)
        return subprocess.CompletedProcess(res.args, res.returncode, res.stdout.encode(), res.stderr.encode())
    return as_bytes


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

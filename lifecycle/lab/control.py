"""Finding and stopping a lab from outside its supervisor: the state file, liveness, cleanup, tokens.

`racklife lab status|env|down` run in their own processes while the lab's
supervisor (``lifecycle.lab.rack``) runs detached, or after it crashed. They
know the lab only by its directory: the supervisor's ``state.json`` and the
names it gives what it starts (namespaces by prefix, the Slurm PID namespace
by the process group in the state file). Everything here works from those.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from lifecycle.lab import netns

STATE_FILE = "state.json"
JWT_LIFESPAN_S = 12 * 3600


def write_json(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def read_state(lab_dir: Path) -> dict[str, Any] | None:
    try:
        data = json.loads((lab_dir / STATE_FILE).read_text(encoding="utf-8"))
    except (FileNotFoundError, json.JSONDecodeError):
        return None
    return data if isinstance(data, dict) else None


def _cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []


def supervisor_alive(state: dict[str, Any] | None) -> bool:
    pid = state.get("pid") if state else None
    return isinstance(pid, int) and "lifecycle.lab.rack" in _cmdline(pid)


def cleanup(lab_dir: Path, prefix: str, timeout_s: float = 60.0) -> list[str]:
    """Stop a lab, running or crashed: its supervisor, its Slurm PID namespace, its namespaces."""
    state = read_state(lab_dir)
    done: list[str] = []
    if state and supervisor_alive(state):
        pid = int(state["pid"])
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        while supervisor_alive(state) and time.monotonic() < deadline:
            time.sleep(0.1)
        if supervisor_alive(state):
            os.kill(pid, signal.SIGKILL)
        done.append(f"supervisor {pid}")
    pgid = state.get("slurm_pgid") if state else None
    if isinstance(pgid, int) and (_cmdline(pgid) or [""])[0].endswith("unshare"):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)
        done.append(f"slurm PID namespace {pgid}")
    done += netns.teardown(prefix)
    if state is not None:
        state.update(phase="down", pid=None, slurm_pgid=None)
        write_json(lab_dir / STATE_FILE, state)
    return done


def slurm_token(state: dict[str, Any], lifespan_s: int = JWT_LIFESPAN_S) -> str:
    """A JWT for the running lab's slurmrestd, minted by its slurmctld (``scontrol token``); never logged."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    env["SLURM_CONF"] = str(state["slurm_conf"])
    res = subprocess.run(["scontrol", "token", "username=root", f"lifespan={lifespan_s}"],
                         capture_output=True, text=True, env=env, timeout=15, check=False)
    token = res.stdout.strip().removeprefix("SLURM_JWT=")
    if res.returncode != 0 or not token:
        raise RuntimeError(f"scontrol token failed ({res.returncode}): {res.stderr.strip()}")
    return token

"""Slurm's ResumeProgram and SuspendProgram for lendable nodes: return at once, work in a worker.

It lives with the workflows, not the CLI, so that slurmctld's call imports
only what it needs (``python -m lifecycle.workflows.elastic_worker
suspend-program HOSTLIST`` starts in a fraction of the full CLI's time);
``racklife slurm suspend-program|resume-program`` are the same programs.

slurmctld runs these programs (through slurmscriptd, with signals blocked,
stdin closed and its output discarded) and expects them to return quickly.
``racklife slurm suspend-program HOSTLIST`` and ``resume-program HOSTLIST``
therefore only start one detached worker per node and exit 0. The worker
(``python -m lifecycle.workflows.elastic_worker lend|reclaim NODE``) takes the
node's lock and enters the workflow Controller of role ``elastic/NODE`` — so
it first finishes whatever an earlier worker for that node left unfinished
(the Controller adopts a dead process's runs of its role) — then runs the
lend or reclaim workflow and logs its outcome as one JSON line. With a live
``racklife serve`` the Controller hands the run to the service instead (the
worker still takes the node's lock, so one node's runs keep their arrival
order) and logs the outcome the same way.

Configuration comes from the environment slurmctld gives the programs (see
docs/slurm.md): ``RACKLIFE_DB``, ``RACKLIFE_KUBECONFIG``,
``RACKLIFE_NODE_ROLE_CMD``, and optionally ``RACKLIFE_LEND_POOL``,
``RACKLIFE_RECLAIM_DEADLINE_S``, ``RACKLIFE_ELASTIC_LOG``,
``RACKLIFE_ELASTIC_LOCK_DIR``.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shlex
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lifecycle.drivers.slurm.hostlist import expand
from lifecycle.drivers.slurm.role import ROLE_CMD_ENV
from lifecycle.model import vocab

if TYPE_CHECKING:  # the workflows are imported only by the worker that runs one (slurmctld waits on spawn)
    from lifecycle.workflows.elastic import ElasticSettings

ACTIONS = ("lend", "reclaim")


def _check_env(env: Mapping[str, str]) -> tuple[str, list[str]]:
    """(kubeconfig, role-switch argv), or ValueError naming what is missing (fail closed)."""
    kubeconfig = env.get("RACKLIFE_KUBECONFIG") or env.get("KUBECONFIG") or ""
    role_cmd = shlex.split(env.get(ROLE_CMD_ENV, ""))
    missing = [n for n, v in (("RACKLIFE_KUBECONFIG", kubeconfig), (ROLE_CMD_ENV, role_cmd)) if not v]
    if missing:
        raise ValueError(f"elastic capacity needs {', '.join(missing)} in the environment")
    return kubeconfig, role_cmd


def settings_from_env(env: Mapping[str, str]) -> ElasticSettings:
    """The workflows' settings, or ValueError naming what is missing (fail closed)."""
    from lifecycle.workflows.elastic import ElasticSettings

    kubeconfig, role_cmd = _check_env(env)
    return ElasticSettings(
        kubeconfig=kubeconfig, role_cmd=tuple(role_cmd),
        lend_pool=env.get("RACKLIFE_LEND_POOL") or "inference",
        reclaim_deadline_s=float(env.get("RACKLIFE_RECLAIM_DEADLINE_S") or 120),
    )


def _lock_dir(env: Mapping[str, str]) -> Path:
    if env.get("RACKLIFE_ELASTIC_LOCK_DIR"):
        return Path(env["RACKLIFE_ELASTIC_LOCK_DIR"])
    from lifecycle.store import db

    # One lock namespace per database: two stores never share a node's lock.
    tag = hashlib.sha256(db.default_url().encode()).hexdigest()[:12]
    return Path(tempfile.gettempdir()) / f"racklife-elastic-{tag}"


def spawn(action: str, hostlists: list[str], env: Mapping[str, str] | None = None) -> list[dict[str, str]]:
    """Start one detached worker per node; returns (node, workflow id) without waiting for any."""
    if action not in ACTIONS:
        raise ValueError(f"unknown action {action!r}")
    env = dict(os.environ if env is None else env)
    log = env.get("RACKLIFE_ELASTIC_LOG") or os.devnull
    started: list[dict[str, str]] = []
    nodes = list(dict.fromkeys(h for hl in hostlists for h in expand(hl)))
    bad = [n for n in nodes if not vocab.is_node_name(n)]
    if bad:  # node names become file and workflow names: refuse before starting anything
        raise ValueError(f"not valid node names: {', '.join(map(repr, bad))}")
    for node in nodes:
        wid = f"{action}-{node}-{uuid.uuid4().hex[:12]}"
        argv = [sys.executable, "-m", "lifecycle.workflows.elastic_worker", action, node, wid]
        fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o640)
        try:
            # A new session, no signal blocked (slurmscriptd blocks them), stdin from /dev/null.
            # slurmscriptd closes our stdin, so the log may be fd 0: duplicate it before replacing 0.
            os.posix_spawn(sys.executable, argv, env, setsid=True, setsigmask=(), file_actions=[
                (os.POSIX_SPAWN_DUP2, fd, 1),
                (os.POSIX_SPAWN_DUP2, fd, 2),
                (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
            ])
        finally:
            os.close(fd)
        started.append({"node": node, "workflow_id": wid})
    return started


def run_worker(action: str, node: str, workflow_id: str, report: Callable[[dict[str, Any]], None],
               env: Mapping[str, str] | None = None) -> None:
    """Run one node's lend or reclaim to its end (after finishing that node's cut-off runs).

    Through the one :class:`~lifecycle.workflows.controller.Controller` of role ``elastic/NODE``: with a
    live `racklife serve` it hands the run to the service; else it runs here, and first waits for the
    runs an earlier worker for this node left (the Controller adopts a dead process's runs of its
    role, and :meth:`Controller.start` waits for the ones that hold the node). ``report`` gets the
    outcome before DBOS shuts down, so the log has it even if the shutdown is slow.
    """
    from lifecycle.workflows import elastic
    from lifecycle.workflows.controller import Controller

    env = dict(os.environ if env is None else env)
    settings = settings_from_env(env)
    lock_dir = _lock_dir(env)
    lock_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    with (lock_dir / f"{node}.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one worker per node at a time, in arrival order
        func = elastic.lend_node if action == "lend" else elastic.reclaim_node
        with Controller(f"elastic/{node}") as ctl:
            report(ctl.start(func, node, settings, workflow_id=workflow_id, nodes=[node]).get_result())


def program(action: str, hostlists: list[str]) -> int:
    """The body of suspend-program / resume-program: start the workers, log, return 0 at once."""
    env = dict(os.environ)
    try:
        _check_env(env)  # refuse now, loudly, rather than in every worker
        started = spawn(action, hostlists, env)
    except ValueError as exc:
        sys.stderr.write(f"racklife {action}: {exc}\n")
        return 2
    line = json.dumps({"at": time.strftime("%Y-%m-%dT%H:%M:%S"), "program": action, "started": started})
    if env.get("RACKLIFE_ELASTIC_LOG"):
        with open(env["RACKLIFE_ELASTIC_LOG"], "a") as f:
            f.write(line + "\n")
    sys.stdout.write(line + "\n")
    return 0


PROGRAMS = {"suspend-program": "lend", "resume-program": "reclaim"}


def main(argv: list[str]) -> int:
    if len(argv) >= 2 and argv[0] in PROGRAMS:
        return program(PROGRAMS[argv[0]], argv[1:])
    if len(argv) != 3 or argv[0] not in ACTIONS:
        sys.stderr.write("usage: python -m lifecycle.workflows.elastic_worker suspend-program|resume-program "
                         "HOSTLIST… | lend|reclaim NODE WORKFLOW_ID\n")
        return 2
    action, node, wid = argv
    ok: list[bool] = []
    started = time.monotonic()

    def report(result: dict[str, Any]) -> None:
        ok.append(bool(result.get("ok")))
        took = round(time.monotonic() - started, 1)
        sys.stdout.write(json.dumps({"workflow_id": wid, **result, "at": time.strftime("%Y-%m-%dT%H:%M:%S"),
                                     "took_s": took}) + "\n")
        sys.stdout.flush()

    try:
        run_worker(action, node, wid, report)
    except Exception as exc:  # the log is all slurmctld's operator gets: say what broke
        sys.stdout.write(json.dumps({"node": node, "action": action, "workflow_id": wid,
                                     "error": f"{type(exc).__name__}: {exc}"}) + "\n")
        return 1
    return 0 if all(ok) and ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

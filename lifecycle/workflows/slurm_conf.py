"""A node in Slurm's configuration, or out of it, through the site's hooks.

Slurm 22.05 knows a node only when slurm.conf defines it (``scontrol
create`` is for dynamic nodes), and forgets one only when the file no longer
lists it and slurmctld restarts. racklife does not own the controller's
files, so both directions are the site's hooks, run with arguments
appended, exactly as decommission runs its removal:

| direction | hook (environment) | arguments appended |
|---|---|---|
| register | ``RACKLIFE_SLURM_ADD_CMD`` | node, partition, the ``NodeName=`` line racklife renders for it |
| remove | ``RACKLIFE_SLURM_CONF_CMD`` | node |

The lab exports both (``lifecycle.lab.slurm_remove``). Each function reads
Slurm first and runs its hook only when Slurm is not yet as asked, and
reads it again afterwards: a hook that exits 0 without doing its work is
a failure. Removal refuses while jobs run on the node (their work would be
lost with it).
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence

from lifecycle.drivers.errors import DriverError
from lifecycle.drivers.slurm.render import node_line
from lifecycle.model.inventory import Node
from lifecycle.model.redact import redact
from lifecycle.workflows.decommission_checks import SLURM_CONF_CMD_ENV, slurm, slurm_known

ADD_CMD_ENV = "RACKLIFE_SLURM_ADD_CMD"
HOOK_TIMEOUT_S = 300


class SlurmConfError(RuntimeError):
    """Slurm's configuration is not as asked (or could not be read); the message says why."""


def _in_partition(node: str, partition: str) -> bool:
    return node in slurm().partitions().get(partition, ())


def _run(cmd: Sequence[str], args: Sequence[str], what: str) -> None:
    try:
        done = subprocess.run([*cmd, *args], capture_output=True, text=True, timeout=HOOK_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SlurmConfError(f"the {what} hook could not run: {exc}") from None
    if done.returncode != 0:
        raise SlurmConfError(f"the {what} hook failed (exit {done.returncode}): "
                             f"{redact(done.stderr.strip()[-300:])}")


def register(node: Node, partition: str, add_cmd: Sequence[str]) -> str:
    """Slurm lists ``node`` in ``partition``: already, or through the registration hook. What was done."""
    try:
        if slurm_known(node.name) and _in_partition(node.name, partition):
            return f"{node.name}: Slurm lists it in partition {partition} already"
        if not add_cmd:
            raise SlurmConfError(f"{node.name}: Slurm does not list it in partition {partition}, and no "
                                 f"registration hook is set ({ADD_CMD_ENV}): racklife cannot edit slurm.conf "
                                 "itself (render it with `racklife slurm render`)")
        _run(add_cmd, [node.name, partition, node_line(node)], "registration")
        if not (slurm_known(node.name) and _in_partition(node.name, partition)):
            raise SlurmConfError(f"{node.name}: the registration hook exited 0, but Slurm does not list the node "
                                 f"in partition {partition}")
    except DriverError as exc:
        raise SlurmConfError(f"{node.name}: Slurm could not be read: {exc.message}") from None
    return f"{node.name}: registered in slurm.conf, partition {partition}"


def unregister(node: str, conf_cmd: Sequence[str]) -> str:
    """Slurm no longer lists ``node``: already, or through the removal hook. Refused while jobs run on it."""
    try:
        if not slurm_known(node):
            return f"{node}: not in Slurm's configuration"
        jobs = sorted(j.job_id for j in slurm().jobs_on([node]) if j.active)
        if jobs:
            raise SlurmConfError(f"{node}: Slurm job(s) {', '.join(jobs)} running on it: it is taken out of "
                                 "Slurm's configuration only when idle")
        if not conf_cmd:
            raise SlurmConfError(f"{node}: no slurm.conf hook is set ({SLURM_CONF_CMD_ENV}): racklife cannot take "
                                 "it out of slurm.conf itself")
        _run(conf_cmd, [node], "slurm.conf")
        if slurm_known(node):
            raise SlurmConfError(f"{node}: the slurm.conf hook exited 0, but Slurm still lists the node")
    except DriverError as exc:
        raise SlurmConfError(f"{node}: Slurm could not be read: {exc.message}") from None
    return f"{node}: taken out of slurm.conf"

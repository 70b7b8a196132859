"""The role switch: a node stops serving one scheduler and serves the other, as a change of the node cycle.

What makes a node a Slurm node or a Kubernetes node is the site's one hook
(``lifecycle.drivers.slurm.role``); racklife runs it as a step that never
repeats (it reboots the node into another role) and, for the Slurm role,
waits until the node's slurmd has registered. A role swap and elastic
capacity's lend and reclaim all make this change the same way, as the
:class:`RoleSwitch` change of ``node_cycle.cycle``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from lifecycle.drivers.errors import OperationFailed
from lifecycle.drivers.slurm.driver import SlurmDriver
from lifecycle.drivers.slurm.role import CommandRoleSwitch, Role
from lifecycle.drivers.slurm.runner import CommandRunner
from lifecycle.workflows.node_cycle import ChangeResult
from lifecycle.workflows.retry import step


def _poll(cond: Callable[[], bool], timeout_s: float, what: str, target: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            raise OperationFailed(target, f"timed out after {timeout_s:.0f}s waiting for {what}")
        time.sleep(0.5)


@step(idempotent=False)  # reboots the node into another role
def switch_role(node: str, scheduler: str, role_cmd: list[str]) -> str:
    role: Role = "slurm" if scheduler == "slurm" else "kubernetes"
    return CommandRoleSwitch(tuple(role_cmd)).switch(node, role)


@step(idempotent=False)  # a wait to a deadline: a retry would extend it
def slurm_registered(node: str, timeout_s: float) -> str:
    """Wait until the node's slurmd has registered (no longer powering up, responding)."""
    driver = SlurmDriver(CommandRunner())

    def back() -> bool:
        st = driver.node(node).state
        return st.responding and not st.powered_down and "POWERING_UP" not in st.flags
    _poll(back, timeout_s, "the node's slurmd to register", node)
    return str(driver.node(node).state)


def switch(node: str, scheduler: str, role_cmd: tuple[str, ...], register_timeout_s: float) -> dict[str, Any]:
    """Switch ``node`` to serve ``scheduler``; for Slurm, wait for its slurmd to register."""
    out: dict[str, Any] = {"hook": switch_role(node, scheduler, list(role_cmd))}
    if scheduler == "slurm":
        out["slurm"] = slurm_registered(node, register_timeout_s)
    return out


@dataclass(frozen=True)
class RoleSwitch:
    """The change: the node stops serving ``source``'s scheduler and serves ``target``'s (the site's hook)."""

    source: str
    """The scheduler it serves now (slurm | kubernetes)."""
    target: str
    role_cmd: tuple[str, ...]
    register_timeout_s: float = 120.0
    name: str = "switch"

    def precheck(self) -> str:
        return "" if self.role_cmd else "no role-switch command: set $RACKLIFE_NODE_ROLE_CMD"

    def apply(self, node: str) -> ChangeResult:
        return ChangeResult(True, detail=switch(node, self.target, self.role_cmd, self.register_timeout_s))

    def undo(self, node: str) -> ChangeResult | None:
        return ChangeResult(True, detail=switch(node, self.source, self.role_cmd, self.register_timeout_s))

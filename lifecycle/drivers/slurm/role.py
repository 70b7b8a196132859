"""Switching a lendable node's role between Slurm and Kubernetes: the site's one hook.

Why a hook: what makes a node stop being a Slurm node and start being a
Kubernetes node is site-specific — a reboot into another image through the
BMC and the boot server, a systemd target that swaps slurmd for the kubelet,
or, in the lab, stopping one slurmd process and registering a Node object.
racklife's elastic workflows decide *when* and keep both schedulers' state
safe (drain, cordon, PDB-aware eviction, acceptance gate); the hook only does
the switch. It is a command, run with an argv list (never a shell):
``<argv…> kubernetes NODE`` or ``<argv…> slurm NODE``; exit 0 means the switch
was started (the node then registers with the new scheduler by itself).
"""

from __future__ import annotations

import shlex
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from lifecycle.drivers.errors import NotSupported, OperationFailed, Unreachable
from lifecycle.model import vocab

Role = Literal["slurm", "kubernetes"]
ROLE_CMD_ENV = "RACKLIFE_NODE_ROLE_CMD"
"""Environment variable holding the hook's command line (split like a shell would, never run by one)."""



@dataclass(frozen=True)
class CommandRoleSwitch:
    """Runs the site's role-switch command for one node."""

    argv: tuple[str, ...]
    timeout_s: float = 120.0
    env: Mapping[str, str] | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> CommandRoleSwitch:
        text = env.get(ROLE_CMD_ENV, "").strip()
        if not text:
            raise NotSupported(
                "elastic", f"no role-switch command: set ${ROLE_CMD_ENV} (see docs/slurm.md)"
            )
        return cls(tuple(shlex.split(text)))

    def switch(self, node: str, role: Role) -> str:
        """Start ``node`` in ``role``; returns the command's output (for the workflow's record)."""
        if not vocab.is_node_name(node):
            raise ValueError(f"{node!r} is not a valid node name")
        argv: Sequence[str] = [*self.argv, role, node]
        try:
            res = subprocess.run(
                list(argv), capture_output=True, text=True, timeout=self.timeout_s,
                env=dict(self.env) if self.env is not None else None, check=False,
                stdin=subprocess.DEVNULL,
            )
        except FileNotFoundError:
            raise NotSupported(node, f"role-switch command {self.argv[0]!r} not found") from None
        except subprocess.TimeoutExpired:
            raise Unreachable(node, f"role switch to {role} gave no answer within "
                              f"{self.timeout_s:.0f}s") from None
        if res.returncode != 0:
            raise OperationFailed(
                node, f"role switch to {role} failed ({res.returncode}): "
                f"{(res.stderr or res.stdout).strip()[-500:]}"
            )
        return res.stdout.strip()

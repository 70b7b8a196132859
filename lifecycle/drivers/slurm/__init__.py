"""Slurm driver: configuration rendering, state reads, drains with ownership, leave."""

from lifecycle.drivers.slurm.driver import NotOurs, ResumeResult, SlurmDriver, reason_for
from lifecycle.drivers.slurm.runner import CommandRunner, RestClient
from lifecycle.drivers.slurm.types import DrainOwner, NodeState, SlurmJob, SlurmNode

__all__ = [
    "CommandRunner",
    "DrainOwner",
    "NodeState",
    "NotOurs",
    "RestClient",
    "ResumeResult",
    "SlurmDriver",
    "SlurmJob",
    "SlurmNode",
    "reason_for",
]

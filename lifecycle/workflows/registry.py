"""Import every workflow module before DBOS launches, so recovery finds them all."""

from __future__ import annotations

from lifecycle.workflows import (
    accept,
    changes,
    decommission,
    elastic,
    engine,
    kube_pool,
    node_ops,
    power,
    power_cycle,
    provision,
    repair,
    roleswap,
    slurm_pool,
    upgrade,
)

# Importing a workflow module registers its workflows with DBOS.
MODULES = (accept, changes, decommission, elastic, kube_pool, node_ops, power, power_cycle, provision, repair, roleswap,
           slurm_pool, upgrade)

# The queue front ends hand whole runs to `racklife serve` on, and the queues a command that
# runs its workflows embedded listens to: never the service's, so that a command never picks up
# (and, exiting, cuts off) work handed to a service that is gone; the service adopts that.
SERVE_QUEUE = "racklife-serve"
EMBEDDED_QUEUES: tuple[str, ...] = (provision.QUEUE,)


def launch(url: str | None = None, role: str = "cli") -> str:
    """Launch the engine for a process that runs its own workflows (never the service's queue)."""
    return engine.launch(url, role=role, queues=EMBEDDED_QUEUES)

"""Import every workflow module before DBOS launches, so recovery finds them all."""

from __future__ import annotations

from lifecycle.workflows import accept, elastic, engine, kube_pool, node_ops, power, provision, roleswap, slurm_pool

# Importing a workflow module registers its workflows with DBOS.
MODULES = (accept, elastic, kube_pool, node_ops, power, provision, roleswap, slurm_pool)


def launch(url: str | None = None, role: str = "cli") -> str:
    return engine.launch(url, role=role)

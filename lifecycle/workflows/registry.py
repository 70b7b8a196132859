"""Import every workflow module before DBOS launches, so recovery finds them all."""

from __future__ import annotations

from lifecycle.workflows import engine, node_ops


def launch(url: str | None = None) -> str:
    # The modules register their workflows with DBOS when imported.
    assert node_ops.__name__
    return engine.launch(url)

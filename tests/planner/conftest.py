"""Fixtures shared by the planner tests: an empty store, and the example site with its pools replaced."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from lifecycle.model.inventory import Inventory, parse_inventory
from lifecycle.store import Store


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = Store(f"sqlite:///{tmp_path / 'rl.sqlite'}")
    yield s
    s.close()


def example_site(repo_dir: Path, pool: str, spec: dict[str, Any], count: int | None = None) -> Inventory:
    """``examples/site-h100-2rack.yaml`` (its first ``count`` nodes) with one pool, ``pool`` as ``spec``."""
    doc = yaml.safe_load((repo_dir / "examples" / "site-h100-2rack.yaml").read_text())
    doc["nodes"] = doc["nodes"][:count]
    doc["pools"] = {pool: spec}
    for node in doc["nodes"]:
        node["pool"] = pool
    return parse_inventory(yaml.safe_dump(doc), "site.yaml")

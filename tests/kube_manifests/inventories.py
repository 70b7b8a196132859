"""The example inventories, and inventories edited from them, for the rendered-manifest tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from lifecycle.model.inventory import Inventory, parse_inventory

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((REPO / "examples").glob("*.yaml"))
assert EXAMPLES, "no example inventories under examples/"


def edited(change: Any) -> Inventory:
    """The first example inventory with ``change(data)`` applied to its parsed YAML."""
    data = yaml.safe_load(EXAMPLES[0].read_text())
    change(data)
    return parse_inventory(yaml.safe_dump(data), "edited.yaml")

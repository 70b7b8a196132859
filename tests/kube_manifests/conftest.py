"""Fixtures for the rendered-manifest tests: each example inventory in turn."""

from __future__ import annotations

import pytest

from lifecycle.model.inventory import Inventory, parse_inventory
from tests.kube_manifests.inventories import EXAMPLES


@pytest.fixture(params=EXAMPLES, ids=lambda p: p.name)
def example(request: pytest.FixtureRequest) -> Inventory:
    return parse_inventory(request.param.read_text(), str(request.param))

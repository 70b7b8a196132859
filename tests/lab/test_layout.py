"""The lab's inventory: which pool each node is in, and the lab's settings checked before anything starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from lifecycle.lab import netns, rack
from lifecycle.lab.layout import build_inventory

NAMES = [f"node-{i:02d}" for i in range(1, 17)]


def _pools(inference: int | None) -> dict[str, int]:
    nets = {n: netns.NodeNet(n, f"ns-{n}", f"10.0.0.{i + 2}", 24, f"02:00:00:00:00:{i:02x}", f"p{i}")
            for i, n in enumerate(NAMES)}
    bmcs = {n: ("redfish", f"https://127.0.0.1:{9000 + i}") for i, n in enumerate(NAMES)}
    inv = build_inventory(NAMES, 1, "h100-sxm-8", nets, bmcs, Path("/nonexistent/creds"), inference=inference)
    counts: dict[str, int] = {}
    for node in inv.nodes:
        counts[node.pool] = counts.get(node.pool, 0) + 1
    return counts


def test_a_quarter_in_inference_unless_asked_otherwise() -> None:
    assert _pools(None) == {"training": 12, "inference": 4}
    assert _pools(0) == {"training": 16}
    assert _pools(3) == {"training": 13, "inference": 3}


@pytest.mark.parametrize(("fields", "needle"), [({"ipmi_every": -1}, "--ipmi-every"),
                                                ({"inference": 17}, "--inference"),
                                                ({"inference": -1}, "--inference")])
def test_bad_lab_settings_are_refused(fields: dict[str, int], needle: str) -> None:
    with pytest.raises(ValueError, match=needle):
        rack.RackConfig(nodes=16, **fields).validate()  # type: ignore[arg-type]


def test_the_settings_survive_the_lab_file() -> None:
    config = rack.RackConfig(nodes=16, ipmi_every=0, inference=0)
    assert rack.RackConfig.from_json(config.to_json()) == config

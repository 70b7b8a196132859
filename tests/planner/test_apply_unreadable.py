"""A wave that finds nothing to do because a source could not be read observes again before apply stops.

Under load a BMC or Slurm read can fail once; the wave loop took that one observation for the fleet's state
and stopped, so `pulumi up` reported a node "not converged; still to do: accept" with nothing blocking it
by the time it looked again. A source that stays unreadable still blocks, and the report says what blocked.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from lifecycle.drivers.bmc.base import BmcDriver
from lifecycle.model.inventory import BmcSpec, Inventory
from lifecycle.planner import apply, observe
from lifecycle.planner.apply import ApplySettings, decide
from lifecycle.planner.plan import Action
from lifecycle.store import Store
from tests.bmc.ipmi_fixtures import Lab, ipmi_lab_fixture  # noqa: F401 - fixture
from tests.planner.conftest import example_site


@pytest.fixture
def inv(repo_dir: Path) -> Inventory:
    """The example site with its nodes in a pool that no scheduler serves (this test reads only BMCs)."""
    return example_site(repo_dir, "staging", {"scheduler": "none"})


def _sources(lab: Lab, refusals: int, calls: list[str]) -> observe.Sources:
    """The node's BMC is the emulated one; it refuses our credentials for the first ``refusals`` reads."""

    def bmc(node: str, _spec: BmcSpec) -> BmcDriver:
        calls.append(node)
        return lab.driver(password="not-the-password") if len(calls) <= refusals else lab.driver()

    def unused() -> observe.SlurmReader:
        raise AssertionError("a pool without a scheduler reads no scheduler")

    return observe.Sources(bmc, unused, unused, firmware=False)  # type: ignore[arg-type]


def test_a_source_unreadable_once_is_read_again_and_the_wave_goes_on(
        store: Store, inv: Inventory, ipmi_lab: Lab, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(apply, "UNREADABLE_PAUSES_S", (0.05, 0.05))
    store.import_inventory(inv)
    node = inv.nodes[0].name
    calls: list[str] = []
    wave = decide(store, inv, [node], _sources(ipmi_lab, 1, calls), ApplySettings("test"), frozenset(), frozenset())
    assert (wave.action, wave.group) == (Action.PROVISION, (node,))
    assert calls == [node, node]  # refused once, read on the second look
    assert wave.blocked == {}


def test_a_source_that_stays_unreadable_blocks_and_says_so(
        store: Store, inv: Inventory, ipmi_lab: Lab, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(apply, "UNREADABLE_PAUSES_S", (0.05, 0.05))
    store.import_inventory(inv)
    node = inv.nodes[0].name
    calls: list[str] = []
    wave = decide(store, inv, [node], _sources(ipmi_lab, 99, calls), ApplySettings("test"), frozenset(), frozenset())
    assert wave.action is None
    assert len(calls) == 3  # the first look and one after each pause, then the apply stops
    assert wave.blocked[node].startswith("unreadable: bmc: ")
    assert "not-the-password" not in wave.blocked[node]

"""Observation reads under the one retry policy: a BMC that is busy once is read, not blocked; a BMC that
refuses us is blocked at once, with the reason (fail closed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from lifecycle.drivers.bmc.base import BmcDriver
from lifecycle.model.inventory import BmcSpec, Inventory, load_inventory
from lifecycle.planner import observe
from lifecycle.planner.observed import Source
from lifecycle.planner.plan import plan_node
from lifecycle.store import Store
from lifecycle.workflows.retry import Retrier, RetryPolicy, using
from tests.bmc.ipmi_fixtures import Lab, ipmi_lab_fixture  # noqa: F401 - fixture


@pytest.fixture
def inv(repo_dir: Path) -> Inventory:
    return load_inventory(repo_dir / "examples" / "site-h100-2rack.yaml")


def _observe(store: Store, inv: Inventory, lab: Lab, password: str | None = None) -> tuple[observe.Observation,
                                                                                         list[float]]:
    """Observe the inventory's first node, its BMC being the emulated one; the waits the policy took."""
    store.import_inventory(inv)
    rec = store.get(inv.nodes[0].name)

    def bmc(_node: str, _spec: BmcSpec) -> BmcDriver:
        return lab.driver() if password is None else lab.driver(password=password)

    def unused() -> observe.SlurmReader:
        raise AssertionError("a pool without a scheduler reads no scheduler")

    sources = observe.Sources(bmc, unused, unused, firmware=False)  # type: ignore[arg-type]
    waited: list[float] = []
    with using(Retrier(RetryPolicy(attempts=3, backoff_s=1.5), waited.append)):
        [seen] = observe.observe(store, [rec], sources, {rec.name: "none"})
    return seen, waited


def test_a_bmc_busy_once_is_read_on_the_retry_and_the_node_is_not_blocked(
        store: Store, inv: Inventory, ipmi_lab: Lab) -> None:
    ipmi_lab.bmc.busy = 1  # the next chassis command answers C0h (node busy), a temporary error
    seen, waited = _observe(store, inv, ipmi_lab)
    assert seen.errors == {}
    assert seen.bmc is not None and seen.bmc.power == "off"
    assert waited == [1.5]  # the policy's backoff, in virtual time
    assert ipmi_lab.bmc.busy == 0
    node = plan_node(seen, observe.desired(inv, store.get(seen.node), store))
    assert not node.blockers and node.steps


def test_a_bmc_busy_past_the_policy_stays_unreadable(store: Store, inv: Inventory, ipmi_lab: Lab) -> None:
    ipmi_lab.bmc.busy = 5
    seen, waited = _observe(store, inv, ipmi_lab)
    assert waited == [1.5, 3.0]  # three attempts in all, then the last error
    assert "C0h" in seen.errors[Source.BMC]
    node = plan_node(seen, observe.desired(inv, store.get(seen.node), store))
    assert [b.kind for b in node.blockers] == ["unreadable"] and not node.steps


def test_a_bmc_refusing_our_credentials_blocks_at_once(store: Store, inv: Inventory, ipmi_lab: Lab) -> None:
    seen, waited = _observe(store, inv, ipmi_lab, password="not-the-password")
    assert waited == []  # a permanent error is never retried
    assert seen.bmc is None and Source.BMC in seen.errors
    assert "not-the-password" not in seen.errors[Source.BMC]
    node = plan_node(seen, observe.desired(inv, store.get(seen.node), store))
    [blocker] = node.blockers
    assert blocker.kind == "unreadable" and seen.errors[Source.BMC] in blocker.message
    assert not node.steps

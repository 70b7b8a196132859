"""Failed BMC calls by vendor and class: real BMC peers fail, the store records each call, a scrape counts them.

The peers are the project's Redfish emulator serving captured Dell, OpenBMC
and HPE trees with injected faults, its IPMI emulator answering "node busy",
and a UDP port that never answers (an IPMI BMC that is down). Calls go
through the workflows' ``open_bmc`` and the one retry layer (each attempt is
a call, counted once), and through the planner's refresh for the IPMI node;
the scrape is over HTTP, parsed with ``prometheus_client.parser``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from lifecycle.drivers.errors import AuthFailed, Busy, Unreachable
from lifecycle.lab.redfish_emulator import BmcConfig, RedfishEmulator
from lifecycle.model.inventory import BmcSpec, Inventory, load_inventory
from lifecycle.planner import observe
from lifecycle.service import metrics
from lifecycle.store import Store, db
from lifecycle.workflows.bmc_calls import open_bmc
from lifecycle.workflows.retry import Retrier, RetryPolicy, using
from tests.bmc.ipmi_fixtures import BlackHole, Lab, black_hole_fixture, ipmi_lab_fixture  # noqa: F401 - fixtures
from tests.service.test_metrics import parse, scrape

USER, PASSWORD = "racklife", "emulator-S3cret!"
TREES = {"r01-n01": "dell-idrac-bmclib", "r01-n02": "openbmc-stock", "r01-n03": "hpe-ilo5-dl325"}
IPMI_NODE, DOWN_NODE = "r01-n08", "r01-n07"


@pytest.fixture
def emulator(fixtures_dir: Path) -> Iterator[RedfishEmulator]:
    bmcs = [BmcConfig(name=tree, tree=fixtures_dir / "redfish" / tree, username=USER, password=PASSWORD)
            for tree in TREES.values()]
    with RedfishEmulator(bmcs) as emu:
        yield emu


@pytest.fixture
def store(tmp_path: Path, repo_dir: Path, emulator: RedfishEmulator, ipmi_lab: Lab, black_hole: BlackHole,
          monkeypatch: pytest.MonkeyPatch) -> Iterator[Store]:
    monkeypatch.setenv("RL_TEST_BMC", f"{USER}:{PASSWORD}")
    monkeypatch.setenv("RL_TEST_BMC_WRONG", f"{USER}:not-the-password")
    inv = load_inventory(repo_dir / "examples" / "site-h100-2rack.yaml")
    bmcs = {node: BmcSpec(driver="redfish", address=emulator.urls[tree], verify_tls=False,
                          credentials="env:RL_TEST_BMC_WRONG" if node == "r01-n03" else "env:RL_TEST_BMC")
            for node, tree in TREES.items()}
    bmcs[IPMI_NODE] = BmcSpec(driver="ipmi", address=ipmi_lab.address, credentials="env:RL_TEST_BMC_IPMI")
    bmcs[DOWN_NODE] = BmcSpec(driver="ipmi", address=f"127.0.0.1:{black_hole.port}", credentials="env:RL_TEST_BMC")
    monkeypatch.setenv("RL_TEST_BMC_IPMI", f"{ipmi_lab.spec.username}:{ipmi_lab.spec.password}")
    inv = Inventory.model_validate(inv.model_dump() | {"nodes": [
        (n.model_copy(update={"bmc": bmcs[n.name]}) if n.name in bmcs else n).model_dump() for n in inv.nodes]})
    s = Store(f"sqlite:///{tmp_path / 'rl.sqlite'}")
    s.import_inventory(inv)
    yield s
    s.close()


def power_state(node: str, store: Store, timeout: float = 10.0) -> str:
    bmc = open_bmc(node, store, timeout=timeout)
    try:
        return bmc.power_state().value
    finally:
        bmc.close()


def test_each_failed_call_is_counted_by_vendor_and_class(store: Store, emulator: RedfishEmulator,
                                                         ipmi_lab: Lab) -> None:
    waits: list[float] = []
    two_tries = Retrier(RetryPolicy(attempts=2, backoff_s=1.0), waits.append)

    # Dell: read once (the driver names the vendor), then every request answers 500: two tries, two calls.
    assert power_state("r01-n01", store) in ("on", "off")
    emulator.set_fault(TREES["r01-n01"], status=500)
    with using(two_tries), pytest.raises(Busy, match="HTTP 500"):
        two_tries.call(power_state, "r01-n01", store)

    # OpenBMC: named once, then it hangs: a fresh driver times out on the service root, before it could
    # name the vendor itself; the store remembers which vendor the node's BMC is.
    assert power_state("r01-n02", store) in ("on", "off")
    emulator.set_fault(TREES["r01-n02"], timeout=True)
    with using(two_tries), pytest.raises(Unreachable, match="timed out"):
        two_tries.call(power_state, "r01-n02", store, 0.3)

    # HPE, wrong password: permanent, so one call; the service root named the vendor before the login.
    with using(two_tries), pytest.raises(AuthFailed):
        two_tries.call(power_state, "r01-n03", store)

    # IPMI through the planner's refresh: the FRU names Supermicro; busy once (C0h), read on the retry.
    rec = store.get(IPMI_NODE)
    sources = observe.default_sources(firmware=True, store=store)
    with using(two_tries):
        [first] = observe.observe(store, [rec], sources, {rec.name: "none"})
        assert first.errors == {}, first.errors
        ipmi_lab.bmc.busy = 1
        [seen] = observe.observe(store, [rec], sources, {rec.name: "none"})
    assert seen.errors == {} and seen.bmc is not None, seen

    # An IPMI BMC that never answers, never identified: its vendor is unknown.
    with using(Retrier(RetryPolicy(attempts=1))), pytest.raises(Unreachable):
        retry_once = Retrier(RetryPolicy(attempts=1))
        retry_once.call(power_state, DOWN_NODE, store)

    assert waits == [1.0, 1.0, 1.0]  # Dell, OpenBMC and the busy IPMI BMC were each retried once
    server = metrics.serve(store, "127.0.0.1", 0)
    try:
        samples, types = parse(scrape(f"http://127.0.0.1:{server.port}/metrics"))
    finally:
        server.close()
    assert types["racklife_bmc_call_errors"] == "counter"
    counted = {tuple(sorted(labels)): v for (name, labels), v in samples.items()
               if name == "racklife_bmc_call_errors_total"}
    assert counted == {
        (("class", "http_5xx"), ("driver", "redfish"), ("vendor", "Dell")): 2,
        (("class", "timeout"), ("driver", "redfish"), ("vendor", "OpenBMC")): 2,
        (("class", "auth"), ("driver", "redfish"), ("vendor", "HPE")): 1,
        (("class", "throttled"), ("driver", "ipmi"), ("vendor", "Supermicro")): 1,
        (("class", "timeout"), ("driver", "ipmi"), ("vendor", "unknown")): 1,
    }
    with store.engine.connect() as conn:
        rows = conn.execute(sa.select(db.bmc_call_errors.c.node, db.bmc_call_errors.c.message)).all()
    assert sorted({r.node for r in rows}) == ["r01-n01", "r01-n02", "r01-n03", "r01-n07", "r01-n08"]
    assert not [r for r in rows if PASSWORD in r.message or "not-the-password" in r.message]


def test_a_store_that_cannot_record_leaves_the_bmc_error_unchanged(store: Store, emulator: RedfishEmulator) -> None:
    """Recording never hides the BMC's own error: the table gone, the workflow still sees the 500."""
    with store.engine.begin() as conn:
        conn.exec_driver_sql("DROP TABLE racklife_bmc_call_errors")
    emulator.set_fault(TREES["r01-n01"], status=500)
    with pytest.raises(Busy, match="HTTP 500"):
        power_state("r01-n01", store)


def test_every_workflow_opens_its_bmc_through_open_bmc(repo_dir: Path) -> None:
    """A workflow that built its driver itself would fail its calls unrecorded (and unseen by the metrics)."""
    own = repo_dir / "lifecycle" / "workflows" / "bmc_calls.py"
    found = [f"{p.relative_to(repo_dir)}:{i}" for p in sorted((repo_dir / "lifecycle" / "workflows").rglob("*.py"))
             if p != own for i, line in enumerate(p.read_text().splitlines(), 1)
             if "driver_for(" in line or "driver_from_args(" in line]
    assert not found, found

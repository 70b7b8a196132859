"""Inventory imports as changes (issue 14): the serial is the node, renames follow it, removals are reported.

Before, a rename keeping the serial ended in an IntegrityError traceback, a
swap of two serials too, a new pool or BMC left no trace, removed nodes were
kept silently and a new node could take a removed node's rack slot.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from lifecycle.model.inventory import Inventory, Node, load_inventory
from lifecycle.model.states import Actor, State
from lifecycle.store import ImportRefused, Store
from lifecycle.store import db as dbm
from tests.cli.test_foundation_cli import EXAMPLE, racklife


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = Store(f"sqlite:///{tmp_path / 'rl.sqlite'}")
    yield s
    s.close()


@pytest.fixture
def inv() -> Inventory:
    return load_inventory(EXAMPLE)


def edit(inv: Inventory, **changes: dict[str, object]) -> Inventory:
    """The inventory with the named nodes' fields replaced (``r01_n01={"name": ...}``)."""
    wanted = {k.replace("_", "-"): v for k, v in changes.items()}
    nodes = [Node.model_validate({**n.model_dump(), **wanted[n.name]}) if n.name in wanted else n for n in inv.nodes]
    return inv.model_copy(update={"nodes": nodes})


def without(inv: Inventory, *names: str) -> Inventory:
    return inv.model_copy(update={"nodes": [n for n in inv.nodes if n.name not in names]})


def dump(store: Store) -> list[tuple[object, ...]]:
    with store.engine.connect() as conn:
        return [tuple(r) for t in dbm.metadata.sorted_tables for r in conn.execute(sa.select(t))]


def test_rename_keeping_the_serial_is_a_rename(store: Store, inv: Inventory) -> None:
    store.import_inventory(inv)
    store.transition("r01-n01", "inspect", Actor.WORKFLOW, "inspect")
    report = store.import_inventory(edit(inv, r01_n01={"name": "r01-n01b"}))
    assert report.renamed == [("r01-n01", "r01-n01b")] and report.added == []
    moved = store.get("r01-n01b")
    assert moved.serial == "SN-H100-0101" and moved.state == State.INSPECTING
    assert [t.event for t in store.history("r01-n01b")] == ["enroll", "inspect"]  # the history followed it
    assert [(c.kind, c.old, c.new) for c in store.changes("r01-n01b")] == [("rename", "r01-n01", "r01-n01b")]
    assert "r01-n01" not in {r.name for r in store.nodes()}


def test_swapping_two_serials_is_refused_and_writes_nothing(store: Store, inv: Inventory) -> None:
    store.import_inventory(inv)
    before = dump(store)
    swapped = edit(inv, r01_n01={"name": "r01-n02"}, r01_n02={"name": "r01-n01"})
    with pytest.raises(ImportRefused) as info:
        store.import_inventory(swapped)
    assert any("swap or rotate" in p and "r01-n01" in p and "r01-n02" in p for p in info.value.problems)
    assert dump(store) == before


def test_a_new_serial_under_a_known_name_is_another_server(store: Store, inv: Inventory) -> None:
    store.import_inventory(inv)
    before = dump(store)
    with pytest.raises(ImportRefused) as info:
        store.import_inventory(edit(inv, r01_n01={"serial": "SN-NEW-1"}))
    assert any(p.startswith("r01-n01: the store knows this name as serial SN-H100-0101") for p in info.value.problems)
    assert dump(store) == before


def test_pool_and_bmc_changes_get_history_rows(store: Store, inv: Inventory) -> None:
    store.import_inventory(inv)
    bmc = {**inv.node("r01-n02").bmc.model_dump(), "address": "https://10.10.9.12"}
    report = store.import_inventory(edit(inv, r01_n02={"pool": "inference", "bmc": bmc, "u": 40}))
    assert report.updated == ["r01-n02"]
    kinds = {c.kind: (c.old, c.new) for c in store.changes("r01-n02")}
    assert kinds["pool"] == ("training", "inference")
    assert kinds["bmc"] == ("redfish https://10.10.1.12", "redfish https://10.10.9.12")
    assert kinds["spec"] == (None, "changed: u")
    assert store.get("r01-n02").pool == "inference"


def test_removed_nodes_are_reported_and_kept(store: Store, inv: Inventory) -> None:
    store.import_inventory(inv)
    store.transition("r02-n08", "inspect", Actor.WORKFLOW, "inspect")
    report = store.import_inventory(without(inv, "r02-n08", "r01-n03"))
    assert [(r.node, r.serial, r.state) for r in report.removed] == [
        ("r01-n03", "SN-H100-0103", State.ENROLLED), ("r02-n08", "SN-H100-0208", State.INSPECTING)]
    assert store.get("r02-n08").state == State.INSPECTING  # kept, state untouched
    again = store.import_inventory(inv)  # back in the file: no longer removed, nothing added
    assert again.removed == [] and again.added == []


def test_a_new_node_cannot_take_a_removed_nodes_slot(store: Store, inv: Inventory) -> None:
    store.import_inventory(inv)
    gone = inv.node("r01-n03")
    newcomer = Node.model_validate({**gone.model_dump(), "name": "r01-n99", "serial": "SN-NEW-99",
                                    "nics": [{**gone.nics[0].model_dump(), "mac": "3c:ec:ef:99:99:99"}],
                                    "bmc": {**gone.bmc.model_dump(), "address": "https://10.10.9.99"},
                                    "boot_ip": None, "mgmt_ip": None})
    changed = without(inv, "r01-n03").model_copy(update={"nodes": [*without(inv, "r01-n03").nodes, newcomer]})
    before = dump(store)
    with pytest.raises(ImportRefused) as info:
        store.import_inventory(changed)
    assert any(f"rack r01 U{gone.u} is still held by r01-n03" in p for p in info.value.problems)
    assert dump(store) == before


def test_renaming_a_node_a_scheduler_uses_is_refused(store: Store, inv: Inventory) -> None:
    store.import_inventory(inv)
    with store.engine.begin() as conn:
        conn.execute(sa.update(dbm.nodes).where(dbm.nodes.c.name == "r01-n01").values(state="in_service"))
    with pytest.raises(ImportRefused, match="refusing to rename to r01-x a node that a scheduler is using"):
        store.import_inventory(edit(inv, r01_n01={"name": "r01-x"}))


def test_import_command_reports_renames_removals_and_refusals(tmp_path: Path) -> None:
    racklife(tmp_path, "inventory", "import", str(EXAMPLE), check=True)
    text = EXAMPLE.read_text()
    renamed = tmp_path / "renamed.yaml"
    renamed.write_text(text.replace("name: r01-n01\n", "name: r01-n01b\n", 1))
    out = json.loads(racklife(tmp_path, "inventory", "import", str(renamed), "--json", check=True).stdout)
    assert out["renamed"] == [{"from": "r01-n01", "to": "r01-n01b"}]
    assert {"node": "r01-n01b", "serial": "SN-H100-0101", "kind": "rename", "old": "r01-n01",
            "new": "r01-n01b"} in out["changes"]
    hist = json.loads(racklife(tmp_path, "node", "history", "r01-n01b", "--json", check=True).stdout)
    assert [h["event"] for h in hist] == ["enroll", "rename"]

    swapped = tmp_path / "swapped.yaml"
    swapped.write_text(renamed.read_text().replace("name: r01-n01b\n", "name: TMP\n")
                       .replace("name: r01-n02\n", "name: r01-n01b\n").replace("name: TMP\n", "name: r01-n02\n"))
    res = racklife(tmp_path, "inventory", "import", str(swapped), "--json")
    assert res.returncode == 5 and "Traceback" not in res.stderr
    assert "swap or rotate" in json.loads(res.stdout)["problems"][0]
    res = racklife(tmp_path, "inventory", "import", str(swapped))
    assert res.returncode == 5 and "nothing was written" in res.stderr and "Traceback" not in res.stderr

    shorter = tmp_path / "shorter.yaml"
    cut = renamed.read_text()
    start = cut.index("  - name: r02-n08\n")
    shorter.write_text(cut[:start])
    out = json.loads(racklife(tmp_path, "inventory", "import", str(shorter), "--json", check=True).stdout)
    assert out["removed"] == [{"node": "r02-n08", "serial": "SN-H100-0208", "state": "enrolled"}]
    res = racklife(tmp_path, "inventory", "import", str(shorter), check=True)
    assert "r02-n08 (serial SN-H100-0208, enrolled): not in the file" in res.stdout


def test_a_stored_record_that_a_new_rule_refuses_is_a_clear_error(store: Store, inv: Inventory) -> None:
    """A store written before the label rule held 'a b' as a label key: a StoreError naming the field, not pydantic's."""
    from lifecycle.store import StoreError

    store.import_inventory(inv)
    spec = json.loads(json.dumps(store.get("r01-n01").spec))
    spec["labels"] = {"a b": "c"}
    with store.engine.begin() as conn:
        text = json.dumps(spec, sort_keys=True, separators=(",", ":"))
        conn.execute(sa.update(dbm.nodes).where(dbm.nodes.c.name == "r01-n01")
                     .values(spec=text, spec_sha256=hashlib.sha256(text.encode()).hexdigest()))
    with pytest.raises(StoreError, match=r"stored record of r01-n01 no longer passes .*labels"):
        store.get("r01-n01").node()
    assert store.import_inventory(inv).updated == ["r01-n01"]  # a corrected import mends it
    assert store.get("r01-n01").node().labels == {}


def _decommission(store: Store, name: str) -> None:
    store.transition(name, "decommission", Actor.OPERATOR, "retired", run_id="dec-1")
    store.transition(name, "decommission_done", Actor.WORKFLOW, "retired", run_id="dec-1")


def test_a_decommissioned_servers_name_goes_to_a_new_server(store: Store, inv: Inventory) -> None:
    """Before, a decommissioned node's name stayed taken for ever (the import refused the new serial)."""
    store.import_inventory(inv)
    _decommission(store, "r01-n01")
    report = store.import_inventory(edit(inv, r01_n01={"serial": "SN-NEW-1"}))
    assert report.renamed == [("r01-n01", "r01-n01~SN-H100-0101")] and report.added == ["r01-n01"]
    new, old = store.get("r01-n01"), store.get("r01-n01~SN-H100-0101")
    assert (new.serial, new.state) == ("SN-NEW-1", State.ENROLLED)
    assert (old.serial, old.state) == ("SN-H100-0101", State.DECOMMISSIONED)
    assert [t.event for t in store.history("r01-n01~SN-H100-0101")] == ["enroll", "decommission", "decommission_done"]
    assert [t.event for t in store.history("r01-n01")] == ["enroll"]  # the new server's own history
    assert [(c.kind, c.old, c.new) for c in store.changes("r01-n01~SN-H100-0101")] == [
        ("rename", "r01-n01", "r01-n01~SN-H100-0101")]
    assert store.import_inventory(edit(inv, r01_n01={"serial": "SN-NEW-1"})).renamed == []  # idempotent


def test_a_rename_may_take_a_decommissioned_servers_name(store: Store, inv: Inventory) -> None:
    store.import_inventory(inv)
    _decommission(store, "r01-n03")
    report = store.import_inventory(edit(without(inv, "r01-n03"), r01_n02={"name": "r01-n03"}))
    assert ("r01-n02", "r01-n03") in report.renamed and ("r01-n03", "r01-n03~SN-H100-0103") in report.renamed
    assert store.get("r01-n03").serial == "SN-H100-0102"


def test_a_removed_node_not_yet_decommissioned_keeps_its_name(store: Store, inv: Inventory) -> None:
    store.import_inventory(inv)
    store.transition("r01-n01", "decommission", Actor.OPERATOR, "retiring", run_id="dec-1")  # decommissioning
    before = dump(store)
    with pytest.raises(ImportRefused):
        store.import_inventory(edit(inv, r01_n01={"serial": "SN-NEW-1"}))
    assert dump(store) == before

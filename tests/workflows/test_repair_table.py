"""The repair table covers NVIDIA's whole XID catalog, and fails closed where it does not know."""

from __future__ import annotations

from pathlib import Path

import pytest

from burnin.parsers import xid
from lifecycle.workflows import repair_table
from lifecycle.workflows.repair_table import RepairAction


def test_every_bucket_the_parser_knows_has_a_rule() -> None:
    # A bucket added to the parser's ACTIONS without a repair rule fails here, not in production.
    assert set(repair_table.TABLE) == set(xid.ACTIONS)


def test_every_catalog_code_maps_to_a_recorded_action() -> None:
    seen: dict[RepairAction, int] = {}
    for code, entry in xid.catalog().items():
        rep = repair_table.for_xid(code)
        assert rep.bucket == entry.bucket and rep.action is repair_table.TABLE[entry.bucket].action
        assert rep.reason.startswith(f"Xid {code} ") and entry.bucket in rep.reason
        seen[rep.action] = seen.get(rep.action, 0) + 1
    # The catalog exercises every action but reimage's single row, and most codes need no node action.
    assert set(seen) == set(RepairAction), seen
    assert seen[RepairAction.NONE] == sum(1 for e in xid.catalog().values() if e.bucket in xid.HARMLESS_BUCKETS)


@pytest.mark.parametrize(("code", "action"), [
    (79, RepairAction.REBOOT),       # GPU has fallen off the bus: RESTART_BM
    (48, RepairAction.RESET_GPU),    # double-bit ECC: NVIDIA's XID-48 workflow
    (13, RepairAction.NONE),         # graphics engine exception: the application's
    (31, RepairAction.NONE),         # MMU fault: RESTART_APP
    (54, RepairAction.RMA),          # power-reduced clocking: CHECK_MECHANICALS
])
def test_known_codes(code: int, action: RepairAction) -> None:
    assert repair_table.for_xid(code).action is action, repair_table.for_xid(code)


def test_none_only_for_the_harmless_buckets() -> None:
    none = {b for b, r in repair_table.TABLE.items() if r.action is RepairAction.NONE}
    assert none == set(xid.HARMLESS_BUCKETS)


def test_unknown_code_and_unknown_bucket_fail_closed() -> None:
    assert 99_999 not in xid.catalog()
    rep = repair_table.for_xid(99_999)
    assert (rep.bucket, rep.action) == ("UNKNOWN", RepairAction.RMA)
    assert "not in NVIDIA's XID catalog" in rep.reason
    rule = repair_table.for_bucket("SOMETHING_NEW")
    assert rule.action is RepairAction.RMA and "not in the repair table" in rule.why


def test_every_action_of_the_table_is_built_or_quarantines() -> None:
    from lifecycle.workflows.repair import BUILT

    assert set(BUILT) | {RepairAction.NONE} == set(RepairAction)


LOAD_CHECKS = {"stress", "nccl", "dcgm"}  # the GEMM soak, nccl-tests across the node's GPUs, DCGM diagnostics


def test_a_repair_retest_runs_under_load_at_every_level(tmp_path: Path) -> None:
    """After a repair action the re-test is acceptance at the pool's retest_level: every level of every shipped
    profile runs the load checks, so a repaired node is judged busy, not idle; the lab's profile (no GEMM to run
    on fake GPUs) keeps nccl-tests and DCGM."""
    import tomllib
    from importlib import resources

    from lifecycle.lab.layout import write_lab_profile

    for f in resources.files("burnin.profiles").iterdir():
        if not f.name.endswith(".toml"):
            continue
        checks = tomllib.loads(f.read_text(encoding="utf-8"))["checks"]
        assert {"quick", "standard", "full"} <= set(checks), f.name
        for level, names in checks.items():
            assert set(names) >= LOAD_CHECKS, (f.name, level, names)
        lab = tomllib.loads(write_lab_profile(f.name.removesuffix(".toml"), tmp_path / f.name)
                            .read_text(encoding="utf-8"))["checks"]
        assert all({"nccl", "dcgm"} <= set(names) for names in lab.values()), (f.name, lab)

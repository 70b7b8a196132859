"""The `--faults FILE` format: valid files load, every problem in a bad one is reported with its line."""

from __future__ import annotations

from pathlib import Path

import pytest

from lifecycle.lab.faults import (
    HEALTHY,
    PROFILES,
    Fault,
    FaultFileError,
    load_faults,
    parse_faults,
    read_fault,
    write_fault,
)

NODES = {"node-01": 8, "node-02": 8, "node-03": 4}


def test_bare_names_and_mappings() -> None:
    faults = parse_faults("node-01: xid79\nnode-03: {profile: pcie-degraded, gpu: 3}\n", "f.yaml", NODES)
    assert faults == {"node-01": Fault("xid79", 0), "node-03": Fault("pcie-degraded", 3)}


def test_every_profile_is_accepted() -> None:
    text = "".join(f"n{i}: {p}\n" for i, p in enumerate(PROFILES))
    assert {f.profile for f in parse_faults(text).values()} == set(PROFILES)


def test_empty_file_means_no_faults() -> None:
    assert parse_faults("", "f.yaml") == {}


def test_all_problems_reported_with_lines() -> None:
    text = (
        "node-01: xid97\n"                      # 1: unknown profile
        "node-09: ecc\n"                        # 2: not in the lab
        "node-03: {profile: ecc, gpu: 4}\n"     # 3: gpu out of range (4 GPUs)
        "node-02: {profile: ecc, colour: red}\n"  # 4: unknown key
        "node-02: ecc\n"                        # 5: listed twice
        "Node_1: ecc\n"                         # 6: not a node name
    )
    with pytest.raises(FaultFileError) as err:
        parse_faults(text, "faults.yaml", NODES)
    lines = {p.line: p.message for p in err.value.problems}
    assert set(lines) == {1, 2, 3, 4, 5, 6}
    assert "unknown profile 'xid97'" in lines[1] and "healthy" in lines[1]
    assert "no such node" in lines[2]
    assert "gpu 4 does not exist" in lines[3]
    assert "unknown key 'colour'" in lines[4]
    assert "listed twice" in lines[5]
    assert "not a node name" in lines[6]
    assert str(err.value).startswith("faults.yaml:1:")


def test_not_a_mapping_and_bad_yaml() -> None:
    with pytest.raises(FaultFileError, match="expected a mapping"):
        parse_faults("- node-01\n", "f.yaml")
    with pytest.raises(FaultFileError, match="not valid YAML"):
        parse_faults("node-01: [\n", "f.yaml")


def test_load_missing_file(tmp_path: Path) -> None:
    with pytest.raises(FaultFileError, match="cannot read"):
        load_faults(tmp_path / "nope.yaml")


def test_fault_file_round_trip(tmp_path: Path) -> None:
    assert read_fault(tmp_path) == HEALTHY
    write_fault(tmp_path, Fault("dcgm-power", 6))
    assert read_fault(tmp_path) == Fault("dcgm-power", 6)
    with pytest.raises(ValueError, match="unknown fault profile"):
        Fault("melted")

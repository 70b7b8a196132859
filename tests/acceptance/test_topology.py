"""The multi-node planner: pairs under one leaf, pairs across spines, NVLink blocks, the ring."""

from __future__ import annotations

import pytest

from acceptance.topology import (
    Placement,
    TopologyError,
    acceptance_rounds,
    cross_spine_pairs,
    fabric_order,
    nvlink_blocks,
    placements,
    ring,
    same_leaf_pairs,
)

# 10 nodes: two spines, three leaves (one with an odd count), one NVL block of four.
ROWS = [
    ("n01", "leaf-1", "spine-a", "nvl-1"), ("n02", "leaf-1", "spine-a", "nvl-1"),
    ("n03", "leaf-1", "spine-a", "nvl-1"), ("n04", "leaf-2", "spine-a", "nvl-1"),
    ("n05", "leaf-2", "spine-a", None), ("n06", "leaf-3", "spine-b", None),
    ("n07", "leaf-3", "spine-b", None), ("n08", "leaf-3", "spine-b", None),
    ("n09", "leaf-3", "spine-b", None), ("n10", "leaf-3", "spine-b", "nvl-2"),
]


def where(places: list, name: str) -> tuple[str, str]:  # type: ignore[type-arg]
    p = next(p for p in places if p.node == name)
    return p.leaf, p.spine


def disjoint(groups: tuple[tuple[str, ...], ...]) -> bool:
    flat = [n for g in groups for n in g]
    return len(flat) == len(set(flat))


def test_same_leaf_pairs_stay_under_one_leaf_then_one_spine() -> None:
    places = placements(ROWS)
    plan = same_leaf_pairs(places)
    assert disjoint(plan.groups)
    assert all(len(g) == 2 for g in plan.groups)
    same_leaf = [g for g in plan.groups if where(places, g[0])[0] == where(places, g[1])[0]]
    assert len(same_leaf) == 4  # leaf-1: 1 pair + n03 spare; leaf-2: 1; leaf-3: 2 + n10 spare
    assert all(where(places, g[0])[1] == where(places, g[1])[1] for g in plan.groups)  # never across spines
    covered = {n for g in plan.groups for n in g} | set(plan.left_out)
    assert covered == {r[0] for r in ROWS}


def test_cross_spine_pairs_cross_spines() -> None:
    places = placements(ROWS)
    plan = cross_spine_pairs(places)
    assert len(plan.groups) == 5 and disjoint(plan.groups) and not plan.left_out
    assert all(where(places, a)[1] != where(places, b)[1] for a, b in plan.groups)


def test_cross_spine_leaves_out_what_one_spine_cannot_pair() -> None:
    rows = [(f"n{i}", "leaf", "spine-a", None) for i in range(5)] + [("m0", "leaf-b", "spine-b", None)]
    plan = cross_spine_pairs(placements(rows))
    assert len(plan.groups) == 1 and len(plan.left_out) == 4


def test_nvlink_blocks_and_ring() -> None:
    places = placements(ROWS)
    blocks = nvlink_blocks(places)
    assert blocks.groups == (("n01", "n02", "n03", "n04"),)
    assert "n10" in blocks.left_out  # a block of one node has no NVLink peer
    r = ring(places)
    assert r.groups[0] == tuple(fabric_order(places)) and len(r.groups[0]) == 10
    order = list(r.groups[0])
    assert order.index("n05") < order.index("n06")  # spine-a's nodes first, leaves contiguous
    assert [p.kind for p in acceptance_rounds(places)] == ["same_leaf_pairs", "cross_spine_pairs",
                                                          "nvlink_blocks", "ring"]


def test_bad_rows_are_refused() -> None:
    with pytest.raises(TopologyError, match="duplicate"):
        placements([("a", "l", "s", None), ("a", "l", "s", None)])
    with pytest.raises(TopologyError, match="required"):
        placements([("a", "", "s", None)])


def test_a_round_that_repeats_earlier_groups_is_dropped() -> None:
    two = [Placement("node-07", "leaf-1", "spine"), Placement("node-08", "leaf-1", "spine")]
    assert [p.kind for p in acceptance_rounds(two)] == ["same_leaf_pairs"]  # their ring is their pair

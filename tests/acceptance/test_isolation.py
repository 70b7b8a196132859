"""Isolation of slow nodes and links: simulated fabrics with known faults, every answer checked."""

from __future__ import annotations

import math
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from acceptance.isolation import (
    FaultModel,
    Group,
    IsolationError,
    all_pairs_baseline,
    bound,
    isolate,
    link,
    one_good_baseline,
)


def names(n: int) -> list[str]:
    return [f"gpu-{i:04d}" for i in range(n)]


@st.composite
def fabrics(draw: st.DrawFn) -> tuple[list[str], frozenset[str]]:
    k = draw(st.integers(min_value=1, max_value=4))
    n = draw(st.integers(min_value=2 * k + 2, max_value=1024))
    nodes = names(n)
    bad = draw(st.sets(st.sampled_from(nodes), min_size=k, max_size=k))
    return nodes, frozenset(bad)


class CountingOracle:
    """The fault model, plus checks that every round is a set of disjoint groups of two or more."""

    def __init__(self, model: FaultModel) -> None:
        self.model = model
        self.calls = 0

    def __call__(self, groups: Sequence[Group]) -> list[bool]:
        self.calls += 1
        seen: set[str] = set()
        for g in groups:
            assert len(g) >= 2, f"a multi-node run needs two nodes: {g}"
            assert not seen & set(g), f"groups of one round overlap: {g}"
            seen.update(g)
        return self.model(groups)


@settings(max_examples=120, deadline=None, derandomize=True)
@given(fabrics(), st.sampled_from(["pairs", "binary"]))
def test_finds_exactly_the_bad_nodes_within_the_round_budget(fabric: tuple[list[str], frozenset[str]],
                                                             split: str) -> None:
    nodes, bad = fabric
    oracle = CountingOracle(FaultModel(bad))
    res = isolate(nodes, oracle, split=split)  # type: ignore[arg-type]
    assert res.bad_nodes == bad
    assert not res.bad_links and not res.unresolved
    assert res.good_nodes == frozenset(nodes) - bad
    assert res.n_rounds == oracle.calls
    k, n = len(bad), len(nodes)
    assert res.n_rounds <= k * math.ceil(math.log2(n)) + 2 == bound(n, k)
    for node in bad:
        assert "slow with proven-good" in res.reasons[node]


@pytest.mark.parametrize("n", [16, 64, 256, 1024])
@pytest.mark.parametrize("k", [1, 2, 4])
def test_pairs_take_three_rounds_and_beat_both_baselines(n: int, k: int) -> None:
    nodes = names(n)
    bad = frozenset(nodes[i * (n // k) + 1] for i in range(k))  # spread through the rack
    res = isolate(nodes, FaultModel(bad), split="pairs")
    assert res.bad_nodes == bad
    assert res.n_rounds == 3  # screen in pairs, each suspect with a good partner, verify the rest
    assert res.n_rounds < one_good_baseline(n)[0] and res.n_rounds < all_pairs_baseline(n)[0]


def test_binary_split_uses_fewer_runs_than_pairs_at_scale() -> None:
    nodes = names(1024)
    bad = frozenset({nodes[5], nodes[700]})
    pairs = isolate(nodes, FaultModel(bad), split="pairs")
    binary = isolate(nodes, FaultModel(bad), split="binary")
    assert pairs.bad_nodes == binary.bad_nodes == bad
    assert binary.n_tests < pairs.n_tests / 5
    assert binary.n_rounds > pairs.n_rounds


def test_max_parallel_caps_every_round() -> None:
    nodes = names(200)
    bad = frozenset({nodes[17], nodes[150]})
    res = isolate(nodes, FaultModel(bad), split="pairs", max_parallel=8)
    assert res.bad_nodes == bad
    assert max(len(r.groups) for r in res.rounds) <= 8


def test_both_nodes_of_one_pair_bad() -> None:
    nodes = names(32)
    bad = frozenset({nodes[0], nodes[1]})  # screened together in round one
    res = isolate(nodes, FaultModel(bad))
    assert res.bad_nodes == bad and res.n_rounds == 3


def test_link_fault_inside_a_pair_is_told_apart_from_bad_nodes() -> None:
    nodes = names(64)
    model = FaultModel(frozenset({nodes[40]}), frozenset({link(nodes[10], nodes[11])}))
    res = isolate(nodes, model, confirm=2)
    assert res.bad_nodes == {nodes[40]}
    assert res.bad_links == {link(nodes[10], nodes[11])}
    assert nodes[10] in res.good_nodes and nodes[11] in res.good_nodes


def test_link_fault_between_pairs_is_found_by_the_verify_round() -> None:
    nodes = names(64)
    hidden = link(nodes[3], nodes[50])  # never in the same screening pair
    res = isolate(nodes, FaultModel(frozenset({nodes[20]}), frozenset({hidden})), confirm=2)
    assert res.bad_nodes == {nodes[20]}
    assert res.bad_links == {hidden}


@settings(max_examples=60, deadline=None, derandomize=True)
@given(st.integers(min_value=12, max_value=300), st.data())
def test_nodes_and_links_together(n: int, data: st.DataObject) -> None:
    nodes = names(n)
    picks = data.draw(st.lists(st.sampled_from(nodes), min_size=5, max_size=5, unique=True))
    model = FaultModel(frozenset(picks[:1]), frozenset({link(picks[1], picks[2]), link(picks[3], picks[4])}))
    res = isolate(nodes, model, confirm=2, split=data.draw(st.sampled_from(["pairs", "binary"])))
    assert res.bad_nodes == model.bad_nodes
    assert res.bad_links == model.bad_links
    assert not res.unresolved


def test_a_slow_run_that_does_not_reproduce_blames_nobody() -> None:
    nodes = names(40)
    res = isolate(nodes, FaultModel())  # the caller saw a slow ring; the fabric is healthy now
    assert not res.bad_nodes and not res.bad_links and not res.unresolved
    assert "unreproduced" in res.reasons


def test_no_faults_screening_takes_two_rounds() -> None:
    res = isolate(names(128), FaultModel(), assume_slow=False)
    assert res.n_rounds == 2 and not res.bad_nodes


def test_two_nodes_cannot_be_told_apart() -> None:
    nodes = names(2)
    res = isolate(nodes, FaultModel(frozenset({nodes[0]})))
    assert res.unresolved == frozenset(nodes) and not res.bad_nodes


def test_known_good_nodes_from_outside_resolve_a_small_set() -> None:
    nodes = names(2)
    res = isolate(nodes, FaultModel(frozenset({nodes[1]})), known_good=["spare-1", "spare-2"])
    assert res.bad_nodes == {nodes[1]} and res.good_nodes == {nodes[0]}


def test_duplicate_names_and_wrong_oracle_answers_raise() -> None:
    with pytest.raises(IsolationError):
        isolate(["a", "a", "b"], FaultModel())
    with pytest.raises(IsolationError, match="answered"):
        isolate(names(8), lambda groups: [True])


def test_baselines() -> None:
    assert all_pairs_baseline(16) == (15, 120)
    assert one_good_baseline(1024) == (1023, 1023)

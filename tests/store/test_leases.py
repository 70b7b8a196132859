"""Leases: one run per node, all or nothing, taken over only from runs the caller found over."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from lifecycle.model.inventory import load_inventory
from lifecycle.model.states import Actor
from lifecycle.store import NodeNotFound, Store, leases


@pytest.fixture
def store(tmp_path: Path, repo_dir: Path) -> Iterator[Store]:
    s = Store(f"sqlite:///{tmp_path / 'rl.sqlite'}")
    s.import_inventory(load_inventory(repo_dir / "examples" / "site-h100-2rack.yaml"))
    yield s
    s.close()


def test_a_held_node_refuses_the_whole_take_and_names_its_holder(store: Store) -> None:
    assert leases.take(store, ["r01-n01"], "run-a", "accept_nodes").ok
    out = leases.take(store, ["r01-n02", "r01-n01"], "run-b", "accept_nodes")
    assert not out.ok and out.taken == ()
    assert {n: le.run_id for n, le in out.held.items()} == {"r01-n01": "run-a"}
    assert leases.holders(store, ["r01-n02"]) == {}  # all or nothing: r01-n02 not taken either


def test_the_holder_retaking_is_a_replay_not_a_conflict(store: Store) -> None:
    assert leases.take(store, ["r01-n01", "r01-n02"], "run-a", "accept_nodes").ok
    again = leases.take(store, ["r01-n01", "r01-n02"], "run-a", "accept_nodes")
    assert again.ok and again.taken == ("r01-n01", "r01-n02")


def test_a_lease_of_a_run_found_over_is_taken_over(store: Store) -> None:
    assert leases.take(store, ["r01-n01"], "run-a", "accept_nodes").ok
    out = leases.take(store, ["r01-n01"], "run-b", "provision_node", replaceable={"run-a"})
    assert out.ok
    assert leases.holders(store)["r01-n01"].run_id == "run-b"


def test_release_frees_only_the_runs_nodes(store: Store) -> None:
    leases.take(store, ["r01-n01"], "run-a", "accept_nodes")
    leases.take(store, ["r01-n02"], "run-b", "accept_nodes")
    assert leases.release(store, "run-a") == ["r01-n01"]
    assert list(leases.holders(store)) == ["r01-n02"]
    assert leases.release(store, "run-a") == []


def test_unknown_node_is_an_error_and_takes_nothing(store: Store) -> None:
    with pytest.raises(NodeNotFound):
        leases.take(store, ["r01-n01", "nope"], "run-a", "accept_nodes")
    assert leases.holders(store) == {}


def test_last_moved_by_names_the_nodes_a_run_moved_last(store: Store) -> None:
    store.transition("r01-n01", "inspect", Actor.WORKFLOW, "inspect", run_id="run-a")
    store.transition("r01-n02", "inspect", Actor.WORKFLOW, "inspect", run_id="run-a")
    store.transition("r01-n02", "inspect_done", Actor.WORKFLOW, "done", run_id="run-b")
    assert [r.name for r in store.last_moved_by("run-a")] == ["r01-n01"]

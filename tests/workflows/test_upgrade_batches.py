"""Batch planning of a rolling upgrade: canary first, max unavailable (N or P%), pool floors, the threshold."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from lifecycle.model.limits import Unavailable
from lifecycle.workflows.upgrade import Window
from lifecycle.workflows.upgrade_batches import Member, NoRoom, PoolNow, Threshold, plan_batches, take_batch


def pool(name: str, size: int, in_service: int | None = None, floor: int = 0) -> tuple[list[Member], PoolNow]:
    members = [Member(f"{name}-{i:02d}", name) for i in range(1, size + 1)]
    return members, PoolNow(name, size, size if in_service is None else in_service, floor)


def sizes(batches: list[list[Member]]) -> list[int]:
    return [len(b) for b in batches]


def test_64_nodes_25_percent_canary_1_is_the_benchmarks_shape() -> None:
    members, p = pool("training", 64)
    batches = plan_batches(members, {"training": p}, Unavailable.parse("25%"), canary=1)
    assert sizes(batches) == [1, 16, 16, 16, 15]
    assert [m.node for b in batches for m in b] == [m.node for m in members]  # each node once, in order


def test_a_count_limit_and_no_canary() -> None:
    members, p = pool("training", 5)
    assert sizes(plan_batches(members, {"training": p}, Unavailable.parse("2"), canary=0)) == [2, 2, 1]


def test_the_canary_is_capped_by_the_limit_too() -> None:
    members, p = pool("training", 8)
    assert sizes(plan_batches(members, {"training": p}, Unavailable.parse("2"), canary=3)) == [2, 2, 2, 2]


def test_nodes_already_out_of_service_use_up_the_room() -> None:
    members, p = pool("training", 8, in_service=7)  # one is drained for repair
    assert take_batch(members, {"training": p}, Unavailable.parse("25%")) == members[:1]


def test_the_floor_limits_a_batch() -> None:
    members, p = pool("training", 8, floor=6)
    assert sizes(plan_batches(members, {"training": p}, Unavailable.parse("50%"), canary=1)) == [1, 2, 2, 2, 1]


def test_a_pool_at_its_floor_has_no_room_and_the_plan_says_so_with_the_numbers() -> None:
    members, p = pool("training", 4, in_service=3, floor=3)
    with pytest.raises(NoRoom, match=r"pool training: 3 of 4 in service, max unavailable 1, min_nodes 3"):
        plan_batches(members, {"training": p}, Unavailable.parse("25%"), canary=1)


def test_pools_are_limited_each_on_its_own() -> None:
    train, tp = pool("training", 8)
    infer, ip = pool("inference", 4)
    mixed = [m for pair in zip(train, infer + [None] * 4, strict=True) for m in pair if m is not None]
    batches = plan_batches(mixed, {"training": tp, "inference": ip}, Unavailable.parse("25%"), canary=1)
    assert sizes(batches)[0] == 1
    for b in batches:
        assert sum(m.pool == "training" for m in b) <= 2 and sum(m.pool == "inference" for m in b) <= 1
    assert sorted(m.node for b in batches for m in b) == sorted(m.node for m in mixed)


def test_the_failure_threshold_after_the_canary() -> None:
    assert Threshold().canary == 0  # the first failed canary node halts
    assert Threshold().allowed_after(63) == 6 and Threshold().allowed_after(9) == 0


@pytest.mark.parametrize(("text", "at", "wait_s"), [
    ("22:00-04:00", "23:30", 0.0), ("22:00-04:00", "03:59", 0.0), ("22:00-04:00", "12:00", 10 * 3600.0),
    ("01:00-02:00", "00:30", 1800.0), ("01:00-02:00", "02:00", 23 * 3600.0),
])
def test_the_window(text: str, at: str, wait_s: float) -> None:
    h, m = (int(x) for x in at.split(":"))
    epoch = datetime(2026, 12, 1, h, m, tzinfo=UTC).timestamp()
    assert Window.parse(text).wait_s(epoch) == pytest.approx(wait_s)


@pytest.mark.parametrize("text", ["", "22:00", "24:00-01:00", "10:00-10:00", "9:00-10:00", "22:00-04:60"])
def test_a_bad_window_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="--window"):
        Window.parse(text)

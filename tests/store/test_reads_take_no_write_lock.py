"""Reads of the store do not take SQLite's write lock: they go on while a writer holds it.

They began ``BEGIN IMMEDIATE`` (every connection of the store's engine does, so that a read-then-write
cannot race another process), so a metrics scrape, `racklife status` or a plan's read of leases and
observations waited for every write transaction of a busy controller, and held up the next one in turn.
In WAL mode a ``BEGIN DEFERRED`` read waits for nobody.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from lifecycle.store import Store, bmc_calls, health, leases, observations, repair_breaker, waits
from lifecycle.store.connect import LOCK_TIMEOUT_S

READS: dict[str, Callable[[Store], Any]] = {
    "leases.holders": lambda s: leases.holders(s),
    "leases.executors": leases.executors,
    "leases.floor_count": lambda s: leases.floor_count(s, "training", ()),
    "observations.load": lambda s: observations.load(s),
    "observations.last_boots": lambda s: observations.last_boots(s),
    "observations.newest_acceptance": lambda s: observations.newest_acceptance(s),
    "waits.current": lambda s: waits.current(s),
    "health.events": lambda s: health.events(s),
    "health.counts": health.counts,
    "bmc_calls.counts": bmc_calls.counts,
    "repair_breaker.counts": repair_breaker.counts,
}


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = Store(f"sqlite:///{tmp_path / 'rl.sqlite'}")
    leases.holders(s)  # the schema exists before the writer below takes the lock
    yield s
    s.close()


@pytest.mark.parametrize("name", sorted(READS))
def test_a_read_goes_on_while_a_writer_holds_the_lock(store: Store, tmp_path: Path, name: str) -> None:
    writer = sqlite3.connect(tmp_path / "rl.sqlite", isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")  # another process's write transaction, under way
    done = threading.Event()
    failed: list[BaseException] = []

    def read() -> None:
        try:
            READS[name](store)
        except BaseException as exc:  # reported below
            failed.append(exc)
        finally:
            done.set()

    try:
        threading.Thread(target=read, daemon=True).start()
        # A read behind the lock would wait the whole busy timeout (LOCK_TIMEOUT_S, 30 s by default).
        assert done.wait(min(10.0, LOCK_TIMEOUT_S / 2)), f"{name} waited for the writer's lock"
        assert not failed, failed
    finally:
        writer.execute("ROLLBACK")
        writer.close()

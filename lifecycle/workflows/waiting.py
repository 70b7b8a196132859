"""The one way a step says what it is waiting on: ``with waiting(node, phase, what) as say: …``.

Every long wait of a workflow (the BMC's power state, a phone-home, burn-in
on the node, the drain of a Slurm job, the eviction of a pod, Slurm or the
kubelet having the node back) goes through :func:`waiting`, which writes the
run's wait record for the node (``lifecycle.store.waits``) and removes it when
the wait ends, however it ends. Drivers cannot reach the store: they are given
the ``say`` this yields (``on_wait``), called with what they wait on now
("drain of job 12 (alice, train.sh)"); only a change is written.

The record is for people watching; a store that cannot take it (a locked
SQLite file, a brief outage) only makes progress less precise, so writing it
never fails the step.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from dbos import DBOS

from lifecycle.store import Store, shared_store, waits

log = logging.getLogger(__name__)

Say = Callable[[str], None]


def _nothing(_what: str) -> None:
    return None


@contextmanager
def waiting(node: str, phase: str, what: str, *, store: Store | None = None,
            run_id: str | None = None) -> Iterator[Say]:
    """Record that ``node`` waits on ``what`` in ``phase`` while the block runs; yield ``say(what)`` to update it.

    Outside a workflow (a driver used by a test or a one-off command) there is no run to
    attach the wait to: nothing is recorded and ``say`` does nothing.
    """
    run = run_id or DBOS.workflow_id
    if run is None:
        yield _nothing
        return
    db = store or shared_store()
    lock = threading.Lock()
    last = [""]

    def say(now: str) -> None:
        with lock:
            if now == last[0]:
                return
            last[0] = now
            try:
                waits.record(db, run, node, phase, now)
            except Exception:  # progress is for people: a missed write never fails the step
                log.debug("wait record for %s not written", node, exc_info=True)

    say(what)
    try:
        yield say
    finally:
        try:
            waits.clear(db, run, node)
        except Exception:
            log.debug("wait record for %s not cleared", node, exc_info=True)

"""Calls that Terraform makes together become one call of the planner.

Terraform refreshes and applies up to ten resources at once, each in its own
gRPC call to the one provider process. Run one by one, four nodes' creates
would be four provisioning runs and four acceptance runs that cannot pair
nodes for the multi-node checks; run side by side, they would be four
workflow engines in one process. A :class:`Batcher` gathers the calls that
arrive within a short window, runs the planner once for all of them (one
at a time per process: ``lock``), and hands each caller its own result.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Generic, TypeVar

V = TypeVar("V")
R = TypeVar("R")


@dataclass
class _Round(Generic[V, R]):
    asks: dict[str, V] = field(default_factory=dict)
    closed: bool = False
    done: threading.Event = field(default_factory=threading.Event)
    results: Mapping[str, R] = field(default_factory=dict)
    error: BaseException | None = None


class Batcher(Generic[V, R]):
    """``submit(key, value)`` returns ``run({key: value, …})[key]`` for the keys gathered with it."""

    def __init__(self, run: Callable[[dict[str, V]], Mapping[str, R]], window_s: float,
                 lock: threading.Lock) -> None:
        self._run = run
        self._window_s = window_s
        self._lock = lock
        self._guard = threading.Lock()
        self._open: _Round[V, R] | None = None

    def submit(self, key: str, value: V) -> R:
        with self._guard:
            current = self._open
            leader = current is None or current.closed
            if current is None or current.closed:
                current = self._open = _Round()
            current.asks[key] = value
        if leader:
            time.sleep(self._window_s)  # the other calls Terraform makes at the same time join this round
            with self._guard:
                current.closed = True
                self._open = None
            with self._lock:
                try:
                    current.results = self._run(dict(current.asks))
                except BaseException as exc:  # every caller of the round sees the failure
                    current.error = exc
            current.done.set()
        else:
            current.done.wait()
        if current.error is not None:
            raise current.error
        return current.results[key]

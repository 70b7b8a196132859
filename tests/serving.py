"""Waiting for a `racklife serve` a test started: its heartbeat row in the store, the one way the tests read it."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Iterable
from pathlib import Path

from lifecycle.store import Store, leases
from lifecycle.workflows.controller import live_services


def wait_live(proc: subprocess.Popen[bytes], url: str, log: Path, timeout_s: float = 60) -> list[leases.Executor]:
    """The live services once ``proc``'s heartbeat shows in ``url``'s store; fails (with its log) if it ends first.

    The SQLite file is opened only once the service has made it (a Store would create it)."""
    deadline = time.monotonic() + timeout_s
    while True:
        assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
        if Path(url.removeprefix("sqlite:///")).exists():
            store = Store(url)
            try:
                found = live_services(store)
            finally:
                store.close()
            if found:
                return found
        time.sleep(0.3)


def stop_services(procs: Iterable[subprocess.Popen[bytes]], grace_s: float = 30) -> None:
    """SIGTERM to each service still running, then wait for each (killed after ``grace_s``)."""
    procs = list(procs)
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            p.wait(grace_s)
        except subprocess.TimeoutExpired:
            p.kill()

"""Two burn-ins into the same output directory never run at once: the second waits for the first."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from burnin.cli import one_at_a_time

HOLDER = """
import sys, time
from pathlib import Path
from burnin.cli import one_at_a_time
with one_at_a_time(Path(sys.argv[1])):
    Path(sys.argv[2]).touch()
    time.sleep(float(sys.argv[3]))
"""


def test_second_burn_in_waits_for_the_first(tmp_path: Path) -> None:
    out = tmp_path / "burnin" / "run-1" / "node-01"
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(out), str(tmp_path / "held"), "1.5"])
    try:
        deadline = time.monotonic() + 30
        while not (tmp_path / "held").exists():
            assert holder.poll() is None and time.monotonic() < deadline
            time.sleep(0.02)
        start = time.monotonic()
        with one_at_a_time(out):
            waited = time.monotonic() - start
    finally:
        holder.wait(30)
    assert waited > 1.0, waited  # the first held it for 1.5 s from before the second asked
    assert (out.parent / "node-01.lock").exists() and not out.exists()


def test_other_nodes_and_runs_do_not_wait(tmp_path: Path) -> None:
    with one_at_a_time(tmp_path / "run-1" / "node-01"):
        start = time.monotonic()
        with one_at_a_time(tmp_path / "run-1" / "node-02"), one_at_a_time(tmp_path / "run-2" / "node-01"):
            assert time.monotonic() - start < 0.5

"""Progress while a command waits: per node its phase, elapsed time and what it waits on.

Off a terminal: timestamped plain lines, one per change, never wrapped; on one,
a Rich Live table; nothing under -o json. The wait records are real rows in a
real store written through the workflows' one helper. The CLI as a subprocess
(with and without a TTY, a real drain of a real Slurm job) is in
tests/slurm/test_slurm_progress.py; the lab's role swap in tests/e2e.
"""

from __future__ import annotations

import io
import re
import time
from collections.abc import Collection, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from rich.console import Console

from lifecycle.cli import _output, _progress
from lifecycle.cli._runs import progress
from lifecycle.model.inventory import load_inventory
from lifecycle.store import Store, waits
from lifecycle.workflows.waiting import waiting

CALLS: list[int] = []


def reader(*answers: list[_progress.NodeProgress]) -> _progress.Reader:
    it = iter(answers)
    last: list[_progress.NodeProgress] = []
    CALLS.clear()

    def read(nodes: Sequence[str], runs: Collection[str] | None) -> list[_progress.NodeProgress]:
        nonlocal last
        last = next(it, last)
        CALLS.append(1)
        return last
    return read


def ticks(n: int) -> None:
    """Wait until the display has read the store ``n`` times (a loaded machine is slow to schedule it)."""
    deadline = time.monotonic() + 60
    while len(CALLS) < n:
        assert time.monotonic() < deadline, "the progress thread never ticked"
        time.sleep(0.02)


AGO = datetime.now(UTC) - timedelta(seconds=75)


def test_a_line_per_node_when_it_changes_naming_the_wait(capsys: pytest.CaptureFixture[str]) -> None:
    ago = datetime.now(UTC) - timedelta(seconds=75)
    read = reader([_progress.NodeProgress("n1", "draining", ago, "drain of job 12 (alice, train)", ago, "leave"),
                   _progress.NodeProgress("n2", "draining", ago)],
                  [_progress.NodeProgress("n1", "draining", ago, "drain of job 12 (alice, train)", ago, "leave"),
                   _progress.NodeProgress("n2", "drained", ago)])
    with progress(["n1", "n2"], "slurm leave", read=read, tick_s=0.05):
        ticks(4)
    lines = capsys.readouterr().err.splitlines()
    assert re.fullmatch(r"\d\d:\d\d:\d\d slurm leave: following 2 node\(s\)", lines[0]), lines
    assert re.fullmatch(r"\d\d:\d\d:\d\d n1 draining \(1 m \d\d s\): waiting on drain of job 12 \(alice, train\) "
                        r"for 1 m \d\d s", lines[1]), lines
    assert re.search(r"n2 draining \(1 m \d\d s\)$", lines[2]), lines
    assert re.search(r"n2 drained \(1 m \d\d s\)$", lines[3]), lines
    assert len(lines) == 4, lines  # one per change, not one per tick


def test_elapsed_reads_as_time() -> None:
    now = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
    assert _progress.elapsed(now - timedelta(seconds=7), now) == "7 s"
    assert _progress.elapsed(now - timedelta(seconds=185), now) == "3 m 05 s"
    assert _progress.elapsed(now - timedelta(hours=2, minutes=4), now) == "2 h 04 m"
    assert _progress.elapsed(None, now) == "-"


@pytest.mark.parametrize("width", [60, 200])
def test_the_live_table_folds_rather_than_cuts(width: int) -> None:
    what = "drain of job 12 (alice, a-long-training-job-name) (deadline 600 s), then job 13 (bob, eval)"
    rows = [_progress.NodeProgress("gpu-010", "draining", AGO, what, AGO, "leave")]
    buf = io.StringIO()
    Console(file=buf, width=width, force_terminal=True, no_color=True).print(_progress.table("role swap", 3, rows))
    shown = re.sub(r"\x1b\[[0-9;]*m", "", buf.getvalue())
    assert max(len(x) for x in shown.splitlines()) <= width
    cells = re.sub(r"[\s│┃┏┓┗┛━─┡┩└┘┌┐╇╈┳┻┼┬┴╭╮╰╯|]", "", shown)
    assert "gpu-010" in cells and "draining" in cells  # never cut
    assert "drainofjob12(alice,a-long-training-job-name)(deadline600s),thenjob13(bob,eval)" in cells  # folded


def test_nothing_extra_under_json(capsys: pytest.CaptureFixture[str]) -> None:
    read = reader([_progress.NodeProgress("n1", "provisioning")])
    with _output.using(_output.Output(_output.Format.JSON)), progress(["n1"], "accepting", read=read, tick_s=0.05):
        time.sleep(0.3)
    out = capsys.readouterr()
    assert out.err == "" and out.out == ""


@pytest.fixture
def store(tmp_path: Path) -> Store:
    s = Store(f"sqlite:///{tmp_path / 'rl.sqlite'}")
    s.import_inventory(load_inventory(Path(__file__).parents[1] / "slurm" / "data" / "site-16.yaml"))
    return s


def test_the_helper_records_the_wait_and_clears_it(store: Store) -> None:
    with waiting("gpu-001", "leave", "Slurm to drain the node", store=store, run_id="slurm-leave-1") as say:
        [w] = waits.current(store, nodes=["gpu-001"])
        assert (w.run_id, w.phase, w.waiting_on) == ("slurm-leave-1", "leave", "Slurm to drain the node")
        say("drain of job 12 (alice, train) (deadline 600 s)")
        say("drain of job 12 (alice, train) (deadline 600 s)")  # the same: not written again
        [w2] = waits.current(store, runs=["slurm-leave-1"])
        assert w2.waiting_on.startswith("drain of job 12") and w2.since == w.since  # one wait, one start
        assert waits.current(store, runs=["slurm"]) == []  # another run's id is not a prefix match
    assert waits.current(store) == []


def test_a_child_run_counts_and_a_dead_runs_row_is_replaced(store: Store) -> None:
    waits.record(store, "upgrade-abc-3", "gpu-002", "leave", "drain of job 7")
    assert [w.node for w in waits.current(store, runs=["upgrade-abc"])] == ["gpu-002"]
    assert waits.nodes_of(store, "upgrade-abc") == ["gpu-002"]
    waits.record(store, "repair-xyz", "gpu-002", "reboot", "the node to answer over SSH")
    assert [(w.run_id, w.phase) for w in waits.current(store, nodes=["gpu-002"])] == [("repair-xyz", "reboot")]


def test_a_secret_never_reaches_the_record(store: Store) -> None:
    waits.record(store, "r-1", "gpu-003", "boot", "phone-home from https://admin:hunter2@10.0.0.1/x")
    [w] = waits.current(store)
    assert "hunter2" not in w.waiting_on


def test_the_store_reader_joins_states_and_waits(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RACKLIFE_DB", str(store.url))
    waits.record(store, "role-swap-1", "gpu-004", "leave", "drain of job 12 (root, wrap)")
    rows = _progress.read_store(["gpu-004", "gpu-005", "gpu-999"], ["role-swap-1"])
    assert [(r.node, r.state, r.waiting_on) for r in rows] == [
        ("gpu-004", "enrolled", "drain of job 12 (root, wrap)"), ("gpu-005", "enrolled", ""),
        ("gpu-999", "unknown", "")]
    assert _progress.read_store(["gpu-004"], ["other-run"])[0].waiting_on == ""

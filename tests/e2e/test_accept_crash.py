"""`racklife accept` SIGKILLed mid-burn-in, then run again on the same nodes (issue 15); then Ctrl-C'd (issue 21).

Before: the second command started a second run while DBOS recovered the first
in the background on the same nodes, then shut DBOS down under it (a traceback,
exit 0, the first run PENDING for ever): two runs burned in the same nodes.
Now the second command finds the first run's process dead, recovers that run
and finishes it as its own answer: one run did the work, each node was moved
to burning_in once and judged once, nothing is left PENDING and no node is
leased any more.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from lifecycle.model.states import State
from lifecycle.store import Store, leases
from tests.e2e.conftest import EXE, RunningLab

pytestmark = [pytest.mark.xdist_group("lab"), pytest.mark.slow]


@pytest.fixture(scope="module")
def lab4() -> Iterator[RunningLab]:
    lab = RunningLab(4)
    try:
        yield lab
    finally:
        lab.down()


def _store(lab: RunningLab) -> Store:
    return Store(f"sqlite:///{Path(lab.env['RACKLIFE_HOME']) / 'racklife.sqlite'}")


def test_accept_killed_mid_burn_in_then_run_again(lab4: RunningLab, minimal_image: Path, tmp_path: Path) -> None:
    assert lab4.racklife("inventory", "import", str(lab4.inventory)).returncode == 0
    prov = lab4.racklife("provision", "--all", "--boot-timeout", "60", "--images", str(minimal_image))
    assert prov.returncode == 0, prov.stdout + prov.stderr
    args = [EXE, "accept", "rack-1", "--level", "quick", "--json", "--operator", "ops@example",
            "--report-dir", str(tmp_path / "reports")]
    store = _store(lab4)
    try:
        nodes = [r.name for r in store.nodes(rack="rack-1")]
        with (tmp_path / "first.log").open("wb") as log:
            first = subprocess.Popen(args, env=lab4.env, stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 300
            while not all(store.get(n).state == State.BURNING_IN for n in nodes):
                assert time.monotonic() < deadline and first.poll() is None, (tmp_path / "first.log").read_text()
                time.sleep(0.1)
            time.sleep(1.0)  # the burn-ins are under way on the nodes
        finally:
            first.send_signal(signal.SIGKILL)
            first.wait(30)
        assert not any(store.acceptance_records(n) for n in nodes), "the kill came after judging"
        [run_id] = {t.run_id for n in nodes for t in store.history(n) if t.event == "burn_in"}
        assert run_id and leases.leased_to(store, run_id) == sorted(nodes)

        second = subprocess.run(args, env=lab4.env, capture_output=True, text=True, timeout=900)
        assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
        assert "Traceback" not in second.stderr and "accessed before DBOS" not in second.stderr, second.stderr
        assert f"resuming acceptance run {run_id}" in second.stderr, second.stderr
        doc = json.loads(second.stdout)
        assert doc["run_id"] == run_id
        assert sorted(v["node"] for v in doc["nodes"]) == sorted(nodes)
        assert all(v["passed"] and v["state"] == "accepted" for v in doc["nodes"]), doc["nodes"]

        for n in nodes:
            events = [(t.event, t.run_id) for t in store.history(n) if t.event in ("burn_in", "accept", "quarantine")]
            assert events == [("burn_in", run_id), ("accept", run_id)], (n, events)
            [record] = store.acceptance_records(n)
            assert record.run_id == run_id and record.accepted_by == "ops@example"
        assert leases.holders(store) == {}
        pending = json.loads(lab4.racklife("workflows", "list", "--status", "pending", "--json").stdout)
        enqueued = json.loads(lab4.racklife("workflows", "list", "--status", "enqueued", "--json").stdout)
        assert pending == [] and enqueued == [], (pending, enqueued)
        [run] = [r for r in json.loads(lab4.racklife("workflows", "list", "--json").stdout) if r["id"] == run_id]
        assert run["status"] == "SUCCESS"

        _ctrl_c_mid_burn_in(lab4, store, nodes, tmp_path)  # in order, after the kill: the same accepted nodes
    finally:
        store.close()


# A shell starts a background job with SIGINT ignored, and the ignore is inherited through exec (under nox a
# child ignored the SIGINT and went on waiting). A terminal's Ctrl-C reaches racklife with the default.
DEFAULT_SIGINT = "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.execv(sys.argv[1], sys.argv[1:])"


def _ctrl_c_mid_burn_in(lab: RunningLab, store: Store, nodes: list[str], tmp_path: Path) -> None:
    """Ctrl-C (SIGINT) on a running `accept`: exit 130, no traceback, the run named with how to go on.

    Before: it went on for 20 s, printed two 40-line DBOS tracebacks, left a node burning_in and the run
    PENDING without a word, and every later `accept` printed the same tracebacks. What main does: the
    command stops waiting, not the run (left pending, holding its nodes, steps journaled); the next
    `accept` recovers it and says so, whatever nodes it was asked for.
    """
    import sys

    first, rest = nodes[:2], nodes[2:]
    args = [EXE, "accept", *first, "--level", "quick", "--operator", "ops@example",
            "--report-dir", str(tmp_path / "reports-interrupted")]
    with (tmp_path / "interrupted.err").open("w") as err:
        running = subprocess.Popen([sys.executable, "-c", DEFAULT_SIGINT, *args], env=lab.env,
                                   stdout=subprocess.DEVNULL, stderr=err, text=True)
        try:
            deadline = time.monotonic() + 300
            while not all(store.get(n).state == State.BURNING_IN for n in first):
                assert time.monotonic() < deadline and running.poll() is None, (tmp_path / "interrupted.err").read_text()
                time.sleep(0.1)
            time.sleep(1.0)  # the burn-ins are under way
            running.send_signal(signal.SIGINT)
            code = running.wait(60)
        finally:
            if running.poll() is None:
                running.kill()
    said = (tmp_path / "interrupted.err").read_text()
    assert code == 130, said
    assert "Traceback" not in said and "DBOS" not in said, said
    [line] = [x for x in said.splitlines() if "was left pending" in x]
    run_id = line.split("run ", 1)[1].split(" ", 1)[0]
    assert f"racklife workflows cancel {run_id}" in line and "the next `racklife accept` recovers" in line, line
    # No node is burning_in without the run that owns it: the run is PENDING and holds each such node.
    [status] = [r["status"] for r in json.loads(lab.racklife("workflows", "list", "--json").stdout)
                if r["id"] == run_id]
    held = leases.leased_to(store, run_id)
    assert status == "PENDING" and sorted(held) == sorted(first), (status, held)
    assert all(store.get(n).state != State.BURNING_IN or n in held for n in nodes)

    # A later accept of other nodes: no traceback, and it says it picks the cut-off run up, never silently.
    later = lab.racklife("accept", *rest, "--level", "quick", "--json", "--operator", "ops@example",
                         "--report-dir", str(tmp_path / "reports-later"), timeout=900)
    assert "Traceback" not in later.stderr and "DBOS" not in later.stderr, later.stderr
    assert f"recovering run {run_id} (accept_nodes) of a process that is gone" in later.stderr, later.stderr
    assert later.returncode == 0, later.stdout[-3000:] + later.stderr[-3000:]
    doc = json.loads(later.stdout)
    assert doc["run_id"] != run_id and sorted(v["node"] for v in doc["nodes"]) == sorted(rest), doc
    # The interrupted run was finished by that command, in the open: its nodes judged once, nothing left held.
    [status] = [r["status"] for r in json.loads(lab.racklife("workflows", "list", "--json").stdout)
                if r["id"] == run_id]
    assert status == "SUCCESS" and leases.holders(store) == {}
    for n in first:
        assert store.get(n).state == State.ACCEPTED
        assert [t.event for t in store.history(n) if t.run_id == run_id] == ["burn_in", "accept"], n

"""Control of a running upgrade between and during batches, with real DBOS on a SQLite store.

The upgrade run is the real one; each node's cycle is a stand-in that waits for the test's go file
(``upgrade_app.py``), so the test decides when a batch is under way. Two defects found in review:
`racklife upgrade status RUN` showed nothing of a pause or abort sent mid-batch until the batch ended (the
message waits in the database until the run reads it), and an abort taken during the last batch ended the
run ``done`` (exit 0), since the run read messages only before a batch.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import typer

from lifecycle.cli.upgrade import finish
from lifecycle.workflows import engine
from lifecycle.workflows.upgrade import STATUS, Command, requested
from tests.cli.test_roleswap_cli import racklife

APP = Path(__file__).with_name("upgrade_app.py")
RUN = "upgrade-0000c0ffee00"


def _wait(cond: Callable[[], bool], proc: subprocess.Popen[str], what: str, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not cond():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def _status(home: Path) -> dict[str, Any]:
    res = racklife(home, "upgrade", "status", RUN, "--json")
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stdout + res.stderr
    doc: dict[str, Any] = json.loads(res.stdout)
    return doc


def _phase(home: Path) -> str:
    """The phase the run published, read in this process (polling through the CLI costs a process a poll)."""
    insp = engine.Inspector(f"sqlite:///{home / 'racklife.sqlite'}")
    try:
        report = insp.event(RUN, STATUS)
    finally:
        insp.close()
    return str(report.get("phase", "")) if isinstance(report, dict) else ""


def _start(home: Path, **extra: str) -> subprocess.Popen[str]:
    """upgrade_app.py's run of n1 and n2 under RUN, with the store at ``home``."""
    env = {k: v for k, v in os.environ.items() if k != "RACKLIFE_DB"} | {"RACKLIFE_HOME": str(home)} | extra
    return subprocess.Popen([sys.executable, str(APP), str(home), RUN, "n1", "n2"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _reap(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.kill()
        proc.communicate(timeout=30)


def test_a_pause_and_an_abort_sent_mid_batch_show_as_requested_and_an_abort_in_the_last_batch_ends_aborted(
        tmp_path: Path) -> None:
    proc = _start(tmp_path)
    try:
        _wait(lambda: (tmp_path / "in-n1").exists(), proc, "batch 1 to be under way")
        assert _status(tmp_path)["requested"] is None
        sent = racklife(tmp_path, "upgrade", "pause", RUN)
        assert sent.returncode == 0, sent.stdout + sent.stderr
        doc = _status(tmp_path)  # the run has not read it: batch 1 is under way
        assert doc["report"]["phase"] == "running" and doc["pending_commands"] == ["pause"], doc
        assert doc["requested"]["command"] == "pause" and "no new batch" in doc["requested"]["then"], doc
        shown = racklife(tmp_path, "upgrade", "status", RUN)
        assert "requested: pause (sent, not yet read by the run" in shown.stdout, shown.stdout
        (tmp_path / "go-n1").touch()
        _wait(lambda: _phase(tmp_path) == "paused", proc, "the run to pause after batch 1")
        doc = _status(tmp_path)
        assert doc["requested"] is None and doc["pending_commands"] == [], doc
        assert not (tmp_path / "in-n2").exists(), "a paused run started a batch"

        assert racklife(tmp_path, "upgrade", "resume", RUN).returncode == 0
        _wait(lambda: (tmp_path / "in-n2").exists(), proc, "batch 2 (the last) to be under way")
        sent = racklife(tmp_path, "upgrade", "abort", RUN)
        assert sent.returncode == 0, sent.stdout + sent.stderr
        doc = _status(tmp_path)
        assert doc["report"]["phase"] == "running" and doc["requested"]["command"] == "abort", doc
        assert "no further node starts" in doc["requested"]["then"], doc
        (tmp_path / "go-n2").touch()
        out, err = proc.communicate(timeout=60)
    finally:
        _reap(proc)
    assert proc.returncode == 0, out + err
    report = json.loads(out)
    # The abort came during the last batch: its node finished, and the run says it was aborted.
    assert report["phase"] == "aborted" and "during the last batch" in report["message"], report
    assert report["upgraded"] == ["n1", "n2"] and report["pending"] == [], report
    doc = _status(tmp_path)
    assert doc["status"] == "SUCCESS" and doc["report"]["phase"] == "aborted" and doc["requested"] is None, doc
    with pytest.raises(typer.Exit) as exited:  # the command that started it ends with exit 1, not 0
        finish(report, as_json=True)
    assert exited.value.exit_code == 1


def test_a_resume_sent_during_the_canary_batch_is_no_verdict_on_it(tmp_path: Path) -> None:
    """The canary's hold waits for a resume sent after it began: one sent while the canary's node was still
    in its cycle used to be read the moment the hold began, and the rollout went on unseen."""
    proc = _start(tmp_path, UPGRADE_CANARY="1")
    try:
        _wait(lambda: (tmp_path / "in-n1").exists(), proc, "the canary batch to be under way")
        early = racklife(tmp_path, "upgrade", "resume", RUN)
        assert early.returncode == 0, early.stdout + early.stderr
        (tmp_path / "go-n1").touch()
        _wait(lambda: _phase(tmp_path) == "held", proc, "the hold after the canary")
        time.sleep(3)  # the run polls its messages every HOLD_POLL_S: a resume it took would have moved it on
        assert _phase(tmp_path) == "held" and not (tmp_path / "in-n2").exists(), "the early resume was a verdict"
        assert racklife(tmp_path, "upgrade", "resume", RUN).returncode == 0
        _wait(lambda: (tmp_path / "in-n2").exists(), proc, "batch 2 after the verdict")
        (tmp_path / "go-n2").touch()
        out, err = proc.communicate(timeout=60)
    finally:
        _reap(proc)
    assert proc.returncode == 0, out + err
    report = json.loads(out)
    assert report["phase"] == "done" and report["upgraded"] == ["n1", "n2"], report


@pytest.mark.parametrize(("pending", "command"), [
    ([], None), (["pause"], Command.PAUSE), (["pause", "resume"], Command.RESUME),
    (["abort", "resume"], Command.ABORT), (["resume", "pause"], Command.PAUSE), (["nonsense"], None),
])
def test_what_unread_messages_will_do(pending: list[str], command: Command | None) -> None:
    assert requested(pending) is command

"""Events: one JSON line per transition and per step, with the required keys, and no secret anywhere."""

from __future__ import annotations

import io
import json
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from lifecycle.model import events
from lifecycle.model.states import Actor
from lifecycle.store import Store
from tests.service import scripted


@pytest.fixture
def captured() -> Iterator[io.StringIO]:
    buf = io.StringIO()
    handler = events.configure(stream=buf)
    assert handler is not None
    yield buf
    events.log.removeHandler(handler)


def lines(text: str) -> list[dict[str, object]]:
    out = [json.loads(line) for line in text.splitlines() if line.strip()]
    for doc in out:
        missing = [k for k in events.REQUIRED if k not in doc]
        assert not missing, (missing, doc)
    return out


def test_a_transition_is_one_line_with_the_time_in_its_source_state(tmp_path: Path, captured: io.StringIO) -> None:
    store = scripted.build(Path(__file__).resolve().parents[2], f"sqlite:///{tmp_path / 'rl.sqlite'}")
    captured.truncate(0)
    captured.seek(0)
    try:
        store.transition("r01-n05", "inspect", Actor.OPERATOR, "look at it", run_id="run-1")
        store.transition("r01-n05", "inspect", Actor.OPERATOR, "look at it", run_id="run-1")  # a replay
        store.transitions("r01-n05", [("inspect_done", "seen"), ("provision", "build")], Actor.WORKFLOW, "run-2")
    finally:
        store.close()
    docs = lines(captured.getvalue())
    assert [(d["kind"], d["node"], d["run_id"], d["step"], d["outcome"]) for d in docs] == [
        ("transition", "r01-n05", "run-1", "inspect", "inspecting"),
        ("transition", "r01-n05", "run-2", "inspect_done", "available"),
        ("transition", "r01-n05", "run-2", "provision", "provisioning"),
    ]
    assert docs[0]["source"] == "enrolled" and docs[0]["actor"] == "operator" and docs[0]["reason"] == "look at it"
    assert all(isinstance(d["duration_s"], float) and d["duration_s"] >= 0 for d in docs)
    assert str(docs[0]["time"]).endswith("+00:00")


def test_an_imported_node_announces_its_enrolment_once(tmp_path: Path, repo_dir: Path,
                                                      captured: io.StringIO) -> None:
    from lifecycle.model.inventory import load_inventory

    inv = load_inventory(repo_dir / "examples" / "site-h100-2rack.yaml")
    store = Store(f"sqlite:///{tmp_path / 'rl.sqlite'}")
    try:
        store.import_inventory(inv)
        store.import_inventory(inv)  # nothing new: no second line
    finally:
        store.close()
    docs = lines(captured.getvalue())
    assert sorted(d["node"] for d in docs) == sorted(n.name for n in inv.nodes)  # type: ignore[type-var]
    assert {(d["kind"], d["step"], d["outcome"], d["source"], d["run_id"], d["duration_s"]) for d in docs} == {
        ("transition", "enroll", "enrolled", None, None, None)}


def test_a_plain_log_record_gets_the_keys_too_and_is_redacted() -> None:
    fmt = events.JsonFormatter()
    rec = logging.LogRecord("racklife.events", logging.INFO, __file__, 1, "login with password=%s", ("s3cr3t-pw",),
                            None)
    doc = json.loads(fmt.format(rec))
    assert doc["node"] is None and doc["step"] is None
    assert "s3cr3t-pw" not in json.dumps(doc)


def test_workflow_steps_and_transitions_logged_as_json_without_the_credentials(repo_dir: Path, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'rl.sqlite'}"
    scripted.build(repo_dir, url).close()
    log = tmp_path / "events.jsonl"
    done = subprocess.run([sys.executable, "-m", "tests.service.runs_app", url],
                          env=os.environ | {"RACKLIFE_DB": url, "RACKLIFE_EVENT_LOG": str(log),
                                            "RACKLIFE_DBOS_LOG_LEVEL": "DEBUG"},
                          capture_output=True, text=True, timeout=120, cwd=repo_dir)
    assert done.returncode == 0, done.stderr
    docs = lines(log.read_text())
    steps = [(d["step"], d["node"], d["outcome"]) for d in docs if d["kind"] == "step"]
    assert steps == [("transition", "r02-n01", "ok"), ("transition", "r02-n01", "ok"), ("look", "r02-n01", "ok"),
                     ("look", "r01-n02", "ok"), ("break_it", "r01-n02", "error")]
    moves = [(d["node"], d["step"], d["outcome"]) for d in docs if d["kind"] == "transition"]
    assert moves == [("r02-n01", "inspect", "inspecting"), ("r02-n01", "inspect_done", "available")]
    runs = {d["run_id"] for d in docs}
    assert len(runs) == 2 and None not in runs  # every line names its DBOS run
    failed = next(d for d in docs if d["outcome"] == "error")
    assert "RuntimeError: scripted failure on r01-n02" in str(failed["error"])
    everything = log.read_text() + done.stdout + done.stderr
    for secret in scripted.SECRETS:
        assert secret not in everything
    assert "***" in everything  # the bait was there, masked
    store = Store(url)
    try:
        assert scripted.SECRETS[0] not in json.dumps([t.reason for t in store.history("r02-n01")])
    finally:
        store.close()

"""Runs two real DBOS workflows on a store, one that succeeds and one that fails; run as a subprocess.

argv: DB_URL. DBOS keeps process-global state, so the test that reads the
runs' rows back (through the metrics) starts this in a process of its own.
"""

from __future__ import annotations

import sys

from dbos import DBOS

from lifecycle.store import shared_store
from lifecycle.workflows import engine
from lifecycle.workflows.retry import step

URL = sys.argv[1]


@step(idempotent=True)
def look(node: str) -> str:
    return f"looked at {node}"


@step(idempotent=False)
def break_it(node: str) -> str:
    raise RuntimeError(f"scripted failure on {node} (password=hunter2-secret)")


@DBOS.workflow()
def metrics_ok(node: str) -> str:
    return look(node)


@DBOS.workflow()
def metrics_bad(node: str) -> str:
    look(node)
    return break_it(node)


shared_store(URL)
engine.launch(URL, role="metricstest")
try:
    print(DBOS.start_workflow(metrics_ok, "r01-n01").get_result(), flush=True)
    try:
        DBOS.start_workflow(metrics_bad, "r01-n02").get_result()
    except RuntimeError as exc:
        print("failed as scripted:", exc, flush=True)
finally:
    engine.shutdown()

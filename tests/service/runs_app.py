"""Runs real DBOS workflows on a store, one that succeeds and one that fails; run as a subprocess.

argv: DB_URL [hold WORK_DIR]. With ``hold``, one run instead that leases r02-n02,
completes two steps and waits in its third until WORK_DIR/go exists. DBOS keeps process-global state, so the tests that read the
runs back (through the metrics, and the event log) start this in a process
of their own. The test credential ``SECRET`` is registered with the
redaction filter, as a BMC password is when it is loaded, and then put in a
reason and an error on purpose: no log may show it.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from dbos import DBOS

from lifecycle.model import redact
from lifecycle.store import shared_store
from lifecycle.workflows import engine
from lifecycle.workflows.leasing import release_leases, take_leases
from lifecycle.workflows.node_ops import transition
from lifecycle.workflows.retry import step
from tests.service.scripted import SECRETS

URL = sys.argv[1]
SECRET, GENERIC = SECRETS[0], SECRETS[1]


@step(idempotent=True)
def look(node: str) -> str:
    return f"looked at {node}"


@step(idempotent=False)
def break_it(node: str) -> str:
    raise RuntimeError(f"scripted failure on {node}: BMC said 'login {SECRET} refused' (password={GENERIC})")


@DBOS.workflow()
def metrics_ok(node: str) -> str:
    transition(node, "inspect", f"inspect with credential {SECRET}")
    transition(node, "inspect_done", "inspected")
    return look(node)


@DBOS.workflow()
def metrics_bad(node: str) -> str:
    look(node)
    return break_it(node)


@step(idempotent=True)
def wait_for_go(node: str) -> str:
    work = Path(sys.argv[3])
    (work / "holding").touch()
    while not (work / "go").exists():
        time.sleep(0.05)
    return "went"


@DBOS.workflow()
def metrics_hold(node: str) -> str:
    refused = take_leases([node], "metrics_hold")
    assert not refused, refused
    try:
        look(node)
        return wait_for_go(node)
    finally:
        release_leases()


redact.register(SECRET, username="root")
shared_store(URL)
engine.launch(URL, role="metricstest")
try:
    if sys.argv[2:3] == ["hold"]:
        print(DBOS.start_workflow(metrics_hold, "r02-n02").get_result(), flush=True)
        sys.exit(0)
    print(DBOS.start_workflow(metrics_ok, "r02-n01").get_result(), flush=True)
    try:
        DBOS.start_workflow(metrics_bad, "r01-n02").get_result()
    except RuntimeError as exc:
        print("failed as scripted:", type(exc).__name__, flush=True)  # the text is the test's bait
finally:
    engine.shutdown()

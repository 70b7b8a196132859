"""A parent that enqueues four children and awaits them with ``provision.await_runs``; run as a
subprocess by test_await_runs.

argv: DB_URL RUN_ID MODE. MODE ``ok``: every child returns ten times its number, the later ones
first (child 0 sleeps longest); ``fail``: child 2 raises. Prints ``result JSON`` or ``error TYPE: MESSAGE``.
"""

from __future__ import annotations

import json
import sys
import time

from dbos import DBOS

from lifecycle.store import shared_store
from lifecycle.workflows.controller import Controller
from lifecycle.workflows.provision import QUEUE, await_runs

URL, RUN_ID, MODE = sys.argv[1], sys.argv[2], sys.argv[3]
# The provisioning queue: the one queue an embedded controller dequeues from (registry.EMBEDDED_QUEUES).


@DBOS.workflow(name="await_child")
def child(i: int) -> int:
    time.sleep(0.4 * (3 - i))
    if MODE == "fail" and i == 2:
        raise ValueError(f"child {i} broke")
    return i * 10


@DBOS.workflow(name="await_parent")
def parent(n: int) -> list[int]:
    queue = DBOS.retrieve_queue(QUEUE)
    assert queue is not None
    handles = [queue.enqueue(child, i) for i in range(n)]
    return await_runs([h.get_workflow_id() for h in handles])


shared_store(URL)
with Controller("awaittest", url=URL) as ctl:
    ctl.register_queue(QUEUE, 4)
    try:
        print("result", json.dumps(ctl.start(parent, 4, workflow_id=RUN_ID).get_result()), flush=True)
    except Exception as exc:
        print(f"error {type(exc).__name__}: {exc}", flush=True)

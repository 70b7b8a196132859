"""A workflow that holds its nodes until told to go; run as subprocesses by test_one_run_per_node.

argv: DB_URL WORK_DIR start RUN_ID NODE... | one NODE | recover. ``start`` runs ``hold_nodes`` under
the id RUN_ID through the Controller and prints its result as JSON; ``one`` runs ``hold_node`` for
NODE through ``Controller.start_or_finish`` (a one-node command: it finishes the node's cut-off run
if there is one); ``recover`` only enters the Controller (recovering dead processes' runs of the
role) and prints what it recovered and swept. ``RACKLIFE_TEST_APP_VERSION`` starts the run under another application version.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from dbos import DBOS

from lifecycle.model.states import Actor
from lifecycle.store import shared_store
from lifecycle.workflows import engine
from lifecycle.workflows.controller import Controller
from lifecycle.workflows.leasing import release_leases, take_leases
from lifecycle.workflows.node_ops import current_run_id, transition

URL, WORK, MODE = sys.argv[1], Path(sys.argv[2]), sys.argv[3]


@DBOS.step()
def hold(nodes: list[str]) -> None:
    (WORK / f"holding-{os.getpid()}").touch()
    while not (WORK / "go").exists():
        time.sleep(0.05)


@DBOS.workflow()
def hold_nodes(nodes: list[str]) -> dict[str, Any]:
    return _hold(nodes)


@DBOS.workflow()
def hold_node(node: str) -> dict[str, Any]:
    return _hold([node])


def _hold(nodes: list[str]) -> dict[str, Any]:
    held = take_leases(nodes, "hold_nodes")
    if held:
        return {"refused": held}
    try:
        for n in nodes:
            transition(n, "inspect", "lease test", Actor.WORKFLOW.value)
        hold(nodes)
        for n in nodes:
            transition(n, "inspect_done", "lease test")
        return {"done": nodes, "run": current_run_id()}
    finally:
        release_leases()


if os.environ.get("RACKLIFE_TEST_APP_VERSION"):
    engine.APP_VERSION = os.environ["RACKLIFE_TEST_APP_VERSION"]
shared_store(URL)
with Controller("leasetest", url=URL, say=lambda m: print("say:", m, flush=True)) as ctl:
    if MODE == "start":
        handle = ctl.start(hold_nodes, sys.argv[5:], workflow_id=sys.argv[4], nodes=sys.argv[5:])
        print("result", json.dumps(handle.get_result()), flush=True)
    elif MODE == "one":
        print("result", json.dumps(ctl.start_or_finish(hold_node, sys.argv[4]).get_result()), flush=True)
    else:
        for r in ctl.recovered:
            print("recovered", r.run_id, json.dumps(ctl.handle(r.run_id).get_result()), flush=True)

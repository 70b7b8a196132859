"""A run whose recorded argument is of a class only the starting process has; run as subprocesses by
test_one_run_per_node.

argv: DB_URL WORK_DIR start RUN_ID NODE | recover. ``start`` defines ``Opaque`` here (``__main__``), runs
``hold_opaque`` under RUN_ID holding NODE's lease until killed; ``recover`` (without ``Opaque``: DBOS
cannot decode the run's arguments) enters the Controller and prints what it recovered and abandoned.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dbos import DBOS

from lifecycle.store import shared_store
from lifecycle.workflows.controller import Controller
from lifecycle.workflows.leasing import take_leases

URL, WORK, MODE = sys.argv[1], Path(sys.argv[2]), sys.argv[3]

if MODE == "start":
    @dataclass(frozen=True)
    class Opaque:
        node: str


@DBOS.step()
def hold() -> None:
    (WORK / f"holding-{os.getpid()}").touch()
    while True:
        time.sleep(0.05)


@DBOS.workflow()
def hold_opaque(arg: Any) -> None:
    take_leases([arg.node], "hold_opaque")
    hold()


shared_store(URL)
with Controller("opaquetest", url=URL, say=lambda m: print("say:", m, flush=True)) as ctl:
    if MODE == "start":
        ctl.start(hold_opaque, Opaque(sys.argv[5]), workflow_id=sys.argv[4], nodes=[sys.argv[5]]).get_result()
    else:
        for r in ctl.recovered:
            print("recovered", r.run_id, flush=True)
        for a in ctl.sweep.abandoned:
            print("abandoned", a.run_id, flush=True)

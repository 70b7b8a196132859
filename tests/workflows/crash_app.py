"""A 4-step workflow whose steps append to a file; run as a subprocess by test_crash_resume.

argv: DB_URL OUT_FILE start|recover. With CRASH_HOLD=1, step 3 blocks after
announcing itself, so the test can SIGKILL the process between steps 2 and 3.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from dbos import DBOS

from lifecycle.workflows import engine

URL, OUT, MODE = sys.argv[1], Path(sys.argv[2]), sys.argv[3]


@DBOS.step()
def append(n: int) -> int:
    if n == 3:
        (OUT.parent / "step3-started").touch()
        if os.environ.get("CRASH_HOLD") == "1":
            time.sleep(300)
    with OUT.open("a") as f:
        f.write(f"step {n}\n")
        f.flush()
        os.fsync(f.fileno())
    return n


@DBOS.workflow()
def four_steps() -> int:
    for n in range(1, 5):
        append(n)
    return 4


engine.launch(URL, executor="crash-test")
if MODE == "start":
    with engine.with_id("crash-wf"):
        handle = DBOS.start_workflow(four_steps)
    print("result", handle.get_result(), flush=True)
else:
    # launch() has already recovered the pending run of this executor; wait for it.
    print("result", DBOS.retrieve_workflow("crash-wf").get_result(), flush=True)
engine.shutdown()

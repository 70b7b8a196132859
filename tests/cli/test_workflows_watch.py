"""`racklife workflows show RUN --watch`: follow a run that another process executes, to its end.

Before there was no way to follow a run but to run `workflows show` again
and again. The run here is a real DBOS workflow left PENDING by a killed
process (tests/workflows/crash_app.py); it ends when it is cancelled.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.cli.test_foundation_cli import CRASH_APP, racklife


def test_watch_prints_the_steps_and_ends_with_the_run(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'racklife.sqlite'}"
    with (tmp_path / "app.log").open("wb") as log:
        proc = subprocess.Popen([sys.executable, str(CRASH_APP), url, str(tmp_path / "steps.txt"), "start"],
                                env=os.environ | {"CRASH_HOLD": "1"}, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        while not (tmp_path / "step3-started").exists():
            assert time.monotonic() < deadline
            time.sleep(0.1)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    env = {k: v for k, v in os.environ.items() if k != "RACKLIFE_DB"} | {"RACKLIFE_HOME": str(tmp_path)}
    exe = shutil.which("racklife") or str(Path(sys.executable).with_name("racklife"))
    watcher = subprocess.Popen([exe, "workflows", "show", "crash-wf", "--watch", "0.2"], env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(3)
        assert watcher.poll() is None, watcher.communicate()  # still following a PENDING run
        assert racklife(tmp_path, "workflows", "cancel", "crash-wf").returncode == 0
        out, err = watcher.communicate(timeout=60)
    finally:
        if watcher.poll() is None:
            watcher.kill()
    assert watcher.returncode == 1, (out, err)  # the run ended, and not in success
    assert "crash-wf: step 1 append done" in err and "crash-wf: step 2 append done" in err, err
    assert "CANCELLED" in out and "Traceback" not in err
    doc = json.loads(racklife(tmp_path, "workflows", "show", "crash-wf", "--watch", "0.2", "--json").stdout)
    assert doc["status"] == "CANCELLED" and len(doc["steps"]) >= 2

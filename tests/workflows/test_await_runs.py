"""``provision.await_runs``: a parent awaits its children in one step, with get_result's answers.

A real DBOS on SQLite in a subprocess (tests/workflows/await_app.py): the results come back in the
children's order whatever order they end in, the parent's journal holds one record for the wait
(not one per child), and a child that raised fails the parent with the child's error.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from dbos import DBOSClient

APP = Path(__file__).with_name("await_app.py")


def _run(tmp_path: Path, mode: str) -> tuple[str, str]:
    url = f"sqlite:///{tmp_path / 'rl.sqlite'}"
    proc = subprocess.run([sys.executable, str(APP), url, "parent-1", mode], env=os.environ | {"RACKLIFE_DB": url},
                          capture_output=True, text=True, timeout=120)
    # (DBOS logs a failed run's traceback on stderr; the app's own answer is on stdout.)
    assert proc.returncode == 0 and "Traceback" not in proc.stdout, proc.stdout + proc.stderr
    return url, proc.stdout


def test_results_in_the_childrens_order_and_one_record_for_the_wait(tmp_path: Path) -> None:
    url, out = _run(tmp_path, "ok")
    assert "result [0, 10, 20, 30]" in out, out
    client = DBOSClient(system_database_url=url)
    try:
        steps = client.list_workflow_steps("parent-1")
        children = client.list_workflows(name="await_child", load_input=False)
    finally:
        client.destroy()
    names = [s["function_name"] for s in steps]
    assert names.count("await_runs") == 1 and len(names) == 5, names  # four enqueues and the wait
    assert sorted(c.status for c in children) == ["SUCCESS"] * 4
    # The children ended last first (child 3 sleeps least): the order is the handles', not the ends'.
    ends = {c.workflow_id: c.updated_at for c in children}
    ids = [s["child_workflow_id"] for s in steps if s["child_workflow_id"]]
    assert len(ids) == 4 and ends[ids[3]] < ends[ids[0]], (ids, ends)


def test_a_child_that_raised_fails_the_parent_with_its_error(tmp_path: Path) -> None:
    url, out = _run(tmp_path, "fail")
    assert "error ValueError: child 2 broke" in out, out
    client = DBOSClient(system_database_url=url)
    try:
        [run] = client.list_workflows(workflow_ids=["parent-1"])
    finally:
        client.destroy()
    assert run.status == "ERROR"

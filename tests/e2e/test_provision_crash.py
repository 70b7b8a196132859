"""Kill the controller during a 16-node provision; restart it; every node ends provisioned, cycled once per attempt.

The lab counts every power-on of every node itself (its own record, not
racklife's). After the crash and the restart each node has booted once at
`lab up` plus at most once per boot attempt its workflow made: no node was
power-cycled twice for the same step. (A node cycled just before the kill
may find no boot server, boot from disk and never phone home; its workflow
then times out and makes attempt 2, a new step with a new token — that is
the designed recovery, and it shows up as such here.)
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from lifecycle.model.states import State
from lifecycle.store import Store
from tests.e2e.conftest import EXE, RunningLab

pytestmark = [pytest.mark.xdist_group("lab"), pytest.mark.slow]


@pytest.fixture(scope="module")
def lab16() -> Iterator[RunningLab]:
    lab = RunningLab(16, boot_time=4.0)
    try:
        yield lab
    finally:
        lab.down()


def provisioned(lab: RunningLab) -> int:
    store = Store(f"sqlite:///{Path(lab.env['RACKLIFE_HOME']) / 'racklife.sqlite'}")
    try:
        return len(store.nodes(state=State.PROVISIONED))
    finally:
        store.close()


def test_kill_and_restart_mid_rack(lab16: RunningLab, minimal_image: Path, tmp_path: Path) -> None:
    assert lab16.racklife("inventory", "import", str(lab16.inventory)).returncode == 0
    args = [EXE, "provision", "--all", "--max-in-flight", "4", "--boot-timeout", "90",
            "--images", str(minimal_image), "--json"]
    with (tmp_path / "first.log").open("wb") as log:
        first = subprocess.Popen(args, env=lab16.env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 300
        while provisioned(lab16) < 4:
            assert time.monotonic() < deadline and first.poll() is None, (tmp_path / "first.log").read_text()
            time.sleep(0.2)
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(30)
    done_at_kill = provisioned(lab16)
    assert done_at_kill < 16, "the kill came too late to test anything"

    # Looking must not recover anything: the list shows the cut-off run still pending.
    runs = json.loads(lab16.racklife("workflows", "list", "--status", "pending", "--json").stdout)
    assert any(r["name"] == "provision_many" for r in runs), runs
    second = subprocess.run(args, env=lab16.env, capture_output=True, text=True, timeout=900)
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    assert "resuming provisioning run" in second.stderr
    outcomes = json.loads(second.stdout)
    assert len(outcomes) == 16 and all(o["state"] == "provisioned" for o in outcomes)

    status = json.loads(lab16.racklife("lab", "status", "--dir", str(lab16.dir), "--json").stdout)
    boots = {n["name"]: n["boots"] for n in status["nodes"]}
    attempts = {o["node"]: sum(s.startswith("boot attempt") for s in o["steps"]) for o in outcomes}
    assert all(1 <= a <= 2 for a in attempts.values()), attempts
    # Never more provisioning boots than attempts: no step power-cycled a node twice. (One fewer is
    # possible for a node whose cycle was claimed but not yet sent when the controller died: the
    # claim makes the cycle at-most-once, and the attempt's timeout brings the retry.)
    for n in boots:
        assert 0 < boots[n] - 1 <= attempts[n], (n, boots, attempts)
    assert sum(boots[n] - 1 == attempts[n] == 1 for n in boots) >= 12, (boots, attempts)
    assert os.path.exists(lab16.env["RACKLIFE_HOME"])

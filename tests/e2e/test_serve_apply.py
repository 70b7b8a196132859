"""`racklife build` with a `racklife serve` running: every run is handed to the service, which also runs the boot server.

The build (an import, then apply: provision, accept, join Slurm and
Kubernetes) is the unchanged command; it sees the service's heartbeat, starts
no engine and no boot server of its own, and hands each wave's runs to the
service. The nodes end in service, every run was executed by the service's
executor, and a second apply says "no changes".
"""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from lifecycle.store import Store
from lifecycle.workflows import engine
from lifecycle.workflows.controller import live_services
from tests.e2e.conftest import EXE, RunningLab

pytestmark = [pytest.mark.xdist_group("lab-b"), pytest.mark.slow]


@pytest.fixture(scope="module")
def lab2() -> Iterator[RunningLab]:
    lab = RunningLab(2)
    try:
        yield lab
    finally:
        lab.down()


def test_build_is_handed_to_the_service_and_converges(lab2: RunningLab, minimal_image: Path, tmp_path: Path) -> None:
    env = lab2.env
    url = f"sqlite:///{Path(env['RACKLIFE_HOME']) / 'racklife.sqlite'}"
    log = tmp_path / "serve.log"
    with log.open("wb") as out:
        serve = subprocess.Popen([EXE, "serve", "--refresh-interval", "0", "--boot-listen", env["RACKLIFE_BOOT_LISTEN"],
                                  "--boot-url", env["RACKLIFE_BOOT_URL"], "--images", str(minimal_image)],
                                 env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while True:
            assert serve.poll() is None and time.monotonic() < deadline, log.read_text()
            if Path(url.removeprefix("sqlite:///")).exists():
                store = Store(url)
                try:
                    found = live_services(store)
                finally:
                    store.close()
                if found:
                    break
            time.sleep(0.3)
        service = found[0].id

        build = lab2.racklife("build", str(lab2.inventory), "--images", str(minimal_image), "--boot-timeout", "60",
                              timeout=1200)
        assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:] + log.read_text()[-3000:]
        assert "handing runs to racklife serve" in build.stderr, build.stderr
        store = Store(url)
        try:
            assert {r.name: r.state.value for r in store.nodes()} == {"node-01": "in_service",
                                                                      "node-02": "in_service"}
        finally:
            store.close()
        insp = engine.Inspector(url)
        try:
            runs = insp.list_runs(limit=1000)
        finally:
            insp.close()
        names = {r.name for r in runs}
        assert {"provision_many", "provision_node", "accept_nodes", "join_node"} <= names, names
        assert all(r.executor == service for r in runs), {(r.name, r.executor) for r in runs}

        again = lab2.racklife("apply", str(lab2.inventory), "--yes", timeout=600)
        assert again.returncode == 0 and "no changes" in again.stderr, again.stdout + again.stderr
        serve.send_signal(signal.SIGTERM)
        assert serve.wait(60) == 0, log.read_text()[-3000:]
    finally:
        if serve.poll() is None:
            serve.kill()
            serve.wait()

"""Ctrl-C of `racklife build`: the stage running under it stops as its own Ctrl-C stops it, and build says so.

build runs its stages (inventory import, apply) as child processes. A SIGINT sent to
build alone (a supervisor, `kill -INT`) used to end it with exit 70, "internal error:
Exit: 130", and the stage was SIGKILLed by subprocess.run before it could say what it
left; and the stage itself took 54 s to stop, waiting out the hanging BMC's reads. Here a real BMC peer (our Redfish emulator, hanging) keeps `apply` busy reading it
while build gets the SIGINT.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from lifecycle.lab.redfish_emulator import BmcConfig, RedfishEmulator

TREE = "dmtf-public-rackmount1"

INVENTORY = """\
site: {{name: ams1}}
racks:
  - {{name: r01, units: 48}}
pools:
  training: {{scheduler: none}}
nodes:
  - name: r01-n01
    serial: SN-INT-0001
    rack: r01
    u: 2
    sku: h100-sxm-8
    pool: training
    bmc:
      driver: redfish
      address: {url}
      credentials: env:BMC_INT
      verify_tls: false
    nics:
      - {{name: eno1, mac: "3c:ec:ef:01:01:00", role: boot, ip: 10.20.1.11}}
"""


@pytest.fixture
def hanging_bmc(fixtures_dir: Path) -> Iterator[RedfishEmulator]:
    bmc = BmcConfig(name=TREE, tree=fixtures_dir / "redfish" / TREE, username="racklife", password="Int-Pa55")
    with RedfishEmulator([bmc]) as emu:
        emu.set_fault(TREE, timeout=True)
        yield emu


def _children(pid: int) -> list[int]:
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        return [int(c) for c in f.read().split()]


def _cmdline(pid: int) -> list[str]:
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        return [a.decode() for a in f.read().split(b"\0") if a]


def test_sigint_to_build_alone_stops_its_apply_stage_and_exits_130(tmp_path: Path,
                                                                   hanging_bmc: RedfishEmulator) -> None:
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text(INVENTORY.format(url=hanging_bmc.urls[TREE]))
    exe = shutil.which("racklife") or str(Path(sys.executable).with_name("racklife"))
    env = {k: v for k, v in os.environ.items() if k != "RACKLIFE_DB"} | {
        "RACKLIFE_HOME": str(tmp_path / "home"), "BMC_INT": "racklife:Int-Pa55"}
    # SIGINT at its default in the child: under nox it inherits an ignored one.
    build = subprocess.Popen([exe, "build", str(inventory)], env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True,
                             preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        apply_pid = None
        deadline = time.monotonic() + 60
        while apply_pid is None and time.monotonic() < deadline and build.poll() is None:
            apply_pid = next((c for c in _children(build.pid) if "apply" in _cmdline(c)), None)
            time.sleep(0.2)
        assert apply_pid is not None, "build never started its apply stage"
        time.sleep(2)  # apply is reading the hanging BMC (its retries take far longer than this)
        assert build.poll() is None, "build ended before the interrupt"
        build.send_signal(signal.SIGINT)  # to build alone, not its process group
        sent = time.monotonic()
        out, err = build.communicate(timeout=120)
        stopped_in = time.monotonic() - sent
    finally:
        if build.poll() is None:
            build.kill()
            build.communicate()
    assert build.returncode == 130, out + err
    assert "internal error" not in err and "Traceback" not in err, err
    assert "build stopped during `racklife apply`" in err, err
    assert "(exit 130, above)" in err, err  # the stage ended by its own ^C handling, not SIGKILLed
    assert not os.path.exists(f"/proc/{apply_pid}"), "the apply stage outlived build"
    # Ctrl-C stops the waiting: not after the hanging BMC's reads and retries (54 s, when the
    # refresh's thread pool was joined at exit), a bound far above a quiet stop (~2 s) and below that.
    assert stopped_in < 30, f"build took {stopped_in:.0f} s to stop"

"""A BMC that echoes the login request in its error message: the password reaches no output.

Several BMCs quote a refused request back, headers and body, in their error
message. Before the one redaction filter, that put the BMC password into the
node's transition reason (stored append-only) and every command that prints
it: `racklife provision`, `node history`, `node show`, `workflows show`. Here
a real client (the CLI, the Redfish driver) meets our emulator with that
fault; every output, the logs at DEBUG and the database files are searched
for the password in each spelling it could take.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import quote

import pytest

from lifecycle.lab.redfish_emulator import BmcConfig, RedfishEmulator

TREE = "dmtf-public-rackmount1"
USER = "racklife"
PASSWORD = "Echo-Pa55word-x9Q"  # a test credential, searched for below

INVENTORY = """\
site: {{name: ams1}}
racks:
  - {{name: r01, units: 48}}
pools:
  training: {{scheduler: none}}
nodes:
  - name: r01-n01
    serial: SN-ECHO-0001
    rack: r01
    u: 2
    sku: h100-sxm-8
    pool: training
    bmc:
      driver: redfish
      address: {url}
      credentials: env:BMC_ECHO
      verify_tls: false
    nics:
      - {{name: eno1, mac: "3c:ec:ef:01:01:00", role: boot, ip: 10.20.1.11}}
"""


def spellings() -> list[str]:
    return [PASSWORD, quote(PASSWORD, safe=""), base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode(),
            json.dumps(PASSWORD)[1:-1]]


@pytest.fixture
def echoing_bmc(fixtures_dir: Path) -> Iterator[RedfishEmulator]:
    bmc = BmcConfig(name=TREE, tree=fixtures_dir / "redfish" / TREE, username=USER, password=PASSWORD)
    with RedfishEmulator([bmc]) as emu:
        emu.set_fault(TREE, echo_request=True)
        yield emu


def test_echoed_password_reaches_no_reason_output_log_or_database(
        tmp_path: Path, echoing_bmc: RedfishEmulator, free_port: Callable[[], int]) -> None:
    home = tmp_path / "home"
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text(INVENTORY.format(url=echoing_bmc.urls[TREE]))
    images = tmp_path / "images" / "minimal-1"
    images.mkdir(parents=True)
    (images / "manifest.json").write_text(json.dumps({"name": "minimal", "version": "1", "kind": "initramfs"}))
    exe = shutil.which("racklife") or str(Path(sys.executable).with_name("racklife"))
    env = {k: v for k, v in os.environ.items() if k != "RACKLIFE_DB"} | {
        "RACKLIFE_HOME": str(home), "BMC_ECHO": f"{USER}:{PASSWORD}", "RACKLIFE_DBOS_LOG_LEVEL": "DEBUG"}
    outputs: list[str] = []

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        res = subprocess.run([exe, *args], env=env, capture_output=True, text=True, timeout=300)
        outputs.extend([res.stdout, res.stderr])
        return res

    assert run("inventory", "import", str(inventory)).returncode == 0
    prov = run("provision", "r01-n01", "--images", str(tmp_path / "images"), "--boot-timeout", "5",
               "--boot-listen", f"127.0.0.1:{free_port()}", "--json")
    assert prov.returncode == 1, prov.stderr  # the verdict: it failed, and says why
    outcome = json.loads(prov.stdout)[0]
    assert not outcome["ok"] and "Cannot process" in outcome["reason"], outcome  # the BMC's words reached it
    run("provision", "r01-n01", "--images", str(tmp_path / "images"), "--boot-timeout", "5",
        "--boot-listen", f"127.0.0.1:{free_port()}")  # the table form
    history = run("node", "history", "r01-n01", "--json")
    reasons = [t["reason"] for t in json.loads(history.stdout)]
    assert any("Cannot process" in r for r in reasons), reasons
    run("node", "history", "r01-n01")
    run("node", "show", "r01-n01")
    run("node", "show", "r01-n01", "--json")
    runs = json.loads(run("workflows", "list", "--json").stdout)
    assert runs
    for r in runs:
        run("workflows", "show", r["id"], "--json")
        run("workflows", "show", r["id"])
    run("workflows", "list")

    leaks = [(i, s) for i, text in enumerate(outputs) for s in spellings() if s in text]
    assert not leaks, [outputs[i][max(0, outputs[i].find(s) - 200):outputs[i].find(s) + 50] for i, s in leaks]
    for f in home.iterdir():
        if f.is_file():
            data = f.read_bytes()
            found = [s for s in spellings() if s.encode() in data]
            assert not found, f"{f.name} holds the password as {found}"

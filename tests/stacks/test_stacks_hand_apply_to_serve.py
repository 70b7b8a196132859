"""The stacks' applies go where the command's go: to a live `racklife serve`, as one durable run.

A Pulumi operation (``stacks.racklife_pulumi.engine.converge``, what every dynamic
resource's create and update call in the provider host) and a Terraform apply
(``stacks.terraform.fleet``) with a service running: the apply is the
service's ``apply_fleet`` run, executed by its executor and named as the
stack's operator's, and the node is enrolled by it. With no service, the
same call applies in its own process and no ``apply_fleet`` run exists.

The provider hosts are separate processes here too (a subprocess each, as
Pulumi's and Terraform's are), and the BMC is the IPMI emulator, so the
service's own reads of it are real.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from lifecycle.store import Store
from lifecycle.workflows import engine
from tests.bmc.ipmi_fixtures import PASSWORD, USER, Lab, ipmi_lab_fixture  # noqa: F401 - fixture
from tests.serving import wait_live

EXE = str(Path(sys.executable).with_name("racklife"))
CRED = "RACKLIFE_TEST_STACK_BMC"
REPO = Path(__file__).resolve().parents[2]

PULUMI = '''
import json, sys
from lifecycle.model.inventory import parse_inventory
from lifecycle.planner.plan import Action
from stacks.racklife_pulumi.engine import EngineSettings, converge
inv = parse_inventory(open(sys.argv[1]).read(), sys.argv[1])
final = converge(EngineSettings(operator="alice", home=sys.argv[2]), inv, sys.argv[3], frozenset({Action.ENROLL}),
                 say=lambda m: print(m, file=sys.stderr))
print(json.dumps({"state": final.state, "steps": [s.action.value for s in final.steps]}))
'''


def _inventory(path: Path, address: str, names: list[str]) -> Path:
    nodes = "".join(f"""  - name: {name}
    serial: SN{i:05d}
    rack: r01
    u: {2 * i}
    sku: h100-sxm-8
    pool: staging
    bmc: {{driver: ipmi, address: "{address}", credentials: "env:{CRED}"}}
    nics: [{{name: eno1, mac: "02:00:00:00:00:{i:02x}", role: boot}}]
""" for i, name in enumerate(names, start=1))
    path.write_text("site: {name: t}\nracks: [{name: r01}]\npools: {staging: {scheduler: none}}\nnodes:\n" + nodes)
    return path


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("RACKLIFE_") and k != "KUBECONFIG"}
    return base | {"RACKLIFE_HOME": str(tmp_path), CRED: f"{USER}:{PASSWORD}",
                   "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}


@pytest.fixture
def serve(env: dict[str, str], tmp_path: Path) -> Iterator[str]:
    """A `racklife serve` on the home's SQLite store; yields its executor id."""
    log = tmp_path / "serve.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([EXE, "serve", "--refresh-interval", "0"], env=env, stdout=out,
                                stderr=subprocess.STDOUT)
    try:
        yield wait_live(proc, f"sqlite:///{tmp_path / 'racklife.sqlite'}", log)[0].id
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0, log.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _runs(tmp_path: Path) -> list[engine.RunInfo]:
    insp = engine.Inspector(f"sqlite:///{tmp_path / 'racklife.sqlite'}")
    try:
        return [r for r in insp.list_runs(limit=100) if r.name == "apply_fleet"]
    finally:
        insp.close()


def _converge(env: dict[str, str], inv: Path, tmp_path: Path, node: str) -> tuple[dict[str, object], str]:
    res = subprocess.run([sys.executable, "-c", PULUMI, str(inv), str(tmp_path), node], env=env,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    doc: dict[str, object] = json.loads(res.stdout)
    return doc, res.stderr


def test_a_pulumi_operation_is_one_durable_run_of_the_live_service(
        env: dict[str, str], tmp_path: Path, ipmi_lab: Lab, serve: str) -> None:
    inv = _inventory(tmp_path / "inv.yaml", ipmi_lab.address, ["n01"])
    doc, said = _converge(env, inv, tmp_path, "n01")
    assert doc == {"state": "enrolled", "steps": ["provision", "accept"]}, doc  # ENROLL only: the rest is left
    assert "handing runs to racklife serve" in said and "runs in racklife serve" in said, said
    [run] = _runs(tmp_path)
    assert run.status == "SUCCESS" and run.executor == serve, run
    store = Store(f"sqlite:///{tmp_path / 'racklife.sqlite'}")
    try:
        assert store.get("n01").state.value == "enrolled"
        assert store.run_operator(run.id) == "pulumi, by alice"
    finally:
        store.close()


def test_without_a_service_the_operation_applies_in_its_own_process(
        env: dict[str, str], tmp_path: Path, ipmi_lab: Lab) -> None:
    inv = _inventory(tmp_path / "inv.yaml", ipmi_lab.address, ["n01"])
    doc, said = _converge(env, inv, tmp_path, "n01")
    assert doc["state"] == "enrolled", doc
    assert "racklife serve" not in said, said
    assert _runs(tmp_path) == []

"""A node Slurm runs a job on while racklife's store has it enrolled is blocked, not provisioned.

The case of an import of a fleet that already serves: every node enters the store enrolled, and the
plan's first step for an enrolled node is a provisioning, which power-cycles it. Real slurmctld and
slurmd run the job; the BMC is the IPMI emulator on loopback.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from lifecycle.drivers.bmc.base import BmcDriver
from lifecycle.drivers.slurm.driver import SlurmDriver
from lifecycle.drivers.slurm.runner import CommandRunner
from lifecycle.lab.slurm import LabSlurmConfig, running
from lifecycle.model.inventory import BmcSpec, Inventory
from lifecycle.planner import observe
from lifecycle.planner.plan import plan_node
from lifecycle.store import Store
from tests.bmc.ipmi_fixtures import Lab, ipmi_lab_fixture  # noqa: F401 - fixture
from tests.slurm.conftest import require_daemons, training_nodes

pytestmark = pytest.mark.xdist_group("slurm")


@pytest.fixture
def inv() -> Inventory:
    return training_nodes(2)


@pytest.fixture
def store(tmp_path: Path, inv: Inventory) -> Iterator[Store]:
    s = Store(f"sqlite:///{tmp_path / 'rl.sqlite'}")
    s.import_inventory(inv)
    yield s
    s.close()


def _no_kube() -> observe.KubeReader:
    raise AssertionError("no Kubernetes pool here")


def test_a_job_on_an_enrolled_node_blocks_its_provisioning(inv: Inventory, store: Store, ipmi_lab: Lab) -> None:
    require_daemons()
    busy, idle = inv.nodes[0].name, inv.nodes[1].name
    root = Path(tempfile.mkdtemp(prefix="rls-", dir="/tmp"))

    def bmc(_node: str, _spec: BmcSpec) -> BmcDriver:
        return ipmi_lab.driver()

    try:
        with running(LabSlurmConfig(inventory=inv, root=root)) as lab:
            env = lab.env()
            slurm = SlurmDriver(CommandRunner(env=env))
            deadline = time.monotonic() + 60
            while not all(n.state.serving for n in slurm.nodes()):
                assert time.monotonic() < deadline, [str(n.state) for n in slurm.nodes()]
                time.sleep(0.5)
            job = subprocess.run(["sbatch", "--parsable", "--chdir=/tmp", "--output=/dev/null", "-p", "train",
                                  "-w", busy, "--wrap", "sleep 300"],
                                 env=env, capture_output=True, text=True, check=True, timeout=15).stdout.strip()
            while slurm.job(job).state != "RUNNING":
                assert time.monotonic() < deadline, "the job did not start"
                time.sleep(0.3)
            sources = observe.Sources(bmc, lambda: slurm, _no_kube, firmware=False)
            records = [store.get(busy), store.get(idle)]
            seen = {o.node: o for o in observe.observe(store, records, sources, {busy: "slurm", idle: "slurm"})}
            subprocess.run(["scancel", job], env=env, check=False, timeout=15)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    wants = observe.desired_all(inv, records, store)
    blocked = plan_node(seen[busy], wants[busy])
    assert [b.kind for b in blocked.blockers] == ["jobs-running"], blocked.blockers
    assert f"jobs {job}" in blocked.blockers[0].message and not blocked.steps
    free = plan_node(seen[idle], wants[idle])
    assert not free.blockers and free.steps[0].action.value == "provision"

"""`racklife decommission --dry-run` refuses the last node Slurm has, and passes that check for any other.

slurmctld does not start on a slurm.conf that defines no node ("no nodes configured"): a decommission
that took Slurm's last node out would leave a controller that dies on its next restart. The refusal
comes from the pre-checks, before any drain. Real slurmctld in both clusters.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from lifecycle.lab.slurm import LabSlurmConfig, running
from lifecycle.model.inventory import Inventory
from lifecycle.store import Store
from tests.slurm.conftest import require_daemons, training_nodes

pytestmark = pytest.mark.xdist_group("slurm")
CHECK = "not the last node Slurm has"


def _dry_run(inv: Inventory, tmp_path: Path, node: str) -> tuple[int, dict[str, object]]:
    require_daemons()
    root = Path(tempfile.mkdtemp(prefix="rls-", dir="/tmp"))
    db = f"sqlite:///{tmp_path / 'rl.sqlite'}"
    store = Store(db)
    store.import_inventory(inv)
    store.close()
    exe = shutil.which("racklife") or str(Path(sys.executable).with_name("racklife"))
    try:
        with running(LabSlurmConfig(inventory=inv, root=root, start_nodes=[])) as lab:
            done = subprocess.run([exe, "decommission", node, "--dry-run", "--json"],
                                  env=lab.env() | {"RACKLIFE_DB": db, "RACKLIFE_HOME": str(tmp_path)},
                                  capture_output=True, text=True, timeout=120)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    [report] = json.loads(done.stdout)["nodes"]
    checks = {c["name"]: c for c in report["checks"]}
    return done.returncode, checks[CHECK]


def test_the_last_node_slurm_has_is_refused_before_anything_is_done(tmp_path: Path) -> None:
    inv = training_nodes(1)
    node = inv.nodes[0].name
    code, check = _dry_run(inv, tmp_path, node)
    assert code == 5  # refused: a precondition does not hold, nothing was done
    assert check["ok"] is False
    assert f"{node} is the last node Slurm has" in str(check["detail"])


def test_a_node_beside_others_passes_the_check(tmp_path: Path) -> None:
    inv = training_nodes(2)
    _code, check = _dry_run(inv, tmp_path, inv.nodes[0].name)
    assert check == {"name": CHECK, "ok": True, "detail": "ok"}

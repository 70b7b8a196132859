"""Fixtures for the Slurm tests: the 16-node inventory and a real lab cluster (root + Debian slurm)."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from lifecycle.lab.slurm import LabSlurm, LabSlurmConfig
from lifecycle.model.inventory import Inventory, load_inventory, parse_inventory

DATA = Path(__file__).resolve().parent / "data"
DAEMONS = ("munged", "slurmctld", "slurmd", "slurmrestd", "scontrol", "sbatch", "unshare", "nsenter")


@pytest.fixture(scope="session")
def inventory_path(repo_dir: Path) -> Path:
    """The lead's 16-node example when present, else this suite's own copy."""
    example = repo_dir / "examples" / "site-h100-2rack.yaml"
    return example if example.exists() else DATA / "site-16.yaml"


@pytest.fixture(scope="session")
def site16() -> Inventory:
    return load_inventory(DATA / "site-16.yaml")


def training_nodes(count: int) -> Inventory:
    """The 16-node site cut to its first ``count`` training nodes and the training pool alone."""
    doc = yaml.safe_load((DATA / "site-16.yaml").read_text())
    doc["nodes"] = [n for n in doc["nodes"] if n["pool"] == "training"][:count]
    doc["pools"] = {"training": doc["pools"]["training"]}
    return parse_inventory(yaml.safe_dump(doc), "site.yaml")


def require_daemons() -> None:
    """The lab tests need root and the Debian Slurm packages; missing them is a failure, not a skip."""
    assert os.geteuid() == 0, "the Slurm lab tests need root (namespaces, mknod, daemons)"
    missing = [d for d in DAEMONS if shutil.which(d) is None]
    assert not missing, (
        f"missing {missing}: apt-get install slurmctld slurmd slurm-client munge slurmrestd "
        "slurm-wlm-jwt-plugin"
    )


@pytest.fixture(scope="module")
def lab(site16: Inventory) -> Iterator[LabSlurm]:
    require_daemons()
    root = Path(tempfile.mkdtemp(prefix="rls-", dir="/tmp"))
    cluster = LabSlurm(
        LabSlurmConfig(inventory=site16, root=root, rest=True, suspend_time_s=3600,
                       resume_timeout_s=60)
    )
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.remove()


@pytest.fixture(scope="session")
def slurm_daemons() -> None:
    """Root and the Debian Slurm packages, asserted (a failure, not a skip)."""
    require_daemons()

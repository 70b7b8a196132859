"""Slurm as production runs it, in the lab: accounting, a backup slurmctld, configless slurmd.

A real cluster (munge, MariaDB, slurmdbd, two slurmctld, 14 configless
slurmd) from the same rendered files production gets; the clients are
Slurm's own (``sacct``, ``sacctmgr``, ``scontrol``).
"""

from __future__ import annotations

import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from lifecycle.drivers.slurm.driver import SlurmDriver
from lifecycle.drivers.slurm.leave import leave
from lifecycle.drivers.slurm.runner import CommandRunner
from lifecycle.lab import slurm_accounting, slurm_daemons
from lifecycle.lab.slurm import LabSlurm, LabSlurmConfig
from lifecycle.model.inventory import Inventory
from tests.slurm.conftest import require_daemons

pytestmark = [pytest.mark.root, pytest.mark.slow, pytest.mark.xdist_group("lab-b")]


def wait_for(cond: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


@pytest.fixture(scope="module")
def lab(site16: Inventory) -> Iterator[LabSlurm]:
    require_daemons()
    root = Path(tempfile.mkdtemp(prefix="rlp-", dir="/tmp"))
    cluster = LabSlurm(LabSlurmConfig(inventory=site16, root=root, accounting=True, backup_controller=True,
                                      configless=True))
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.remove()


def sacct(lab: LabSlurm, *args: str) -> list[list[str]]:
    res = subprocess.run(["sacct", "-n", "-P", *args], env=lab.env(), capture_output=True, text=True, timeout=15,
                         check=True)
    return [line.split("|") for line in res.stdout.splitlines() if line]


def test_sacct_reports_a_requeued_job_with_its_gpus(lab: LabSlurm) -> None:
    drv = SlurmDriver(CommandRunner(env=lab.env(), timeout_s=15))
    job = subprocess.run(["sbatch", "--parsable", "--chdir=/tmp", "--output=/dev/null", "-p", "train", "-N1",
                          "--gres=gpu:2", "--wrap", "sleep 300"], env=lab.env(), capture_output=True, text=True,
                         timeout=15, check=True).stdout.strip()
    wait_for(lambda: drv.job(job).state == "RUNNING", 30, f"job {job} to run")
    node = drv.job(job).nodes[0]
    report = leave(drv, [node], run_id="acct-rq", reason="accounting test", policy="requeue", deadline_s=0,
                   poll_s=0.2, settle_s=30)
    try:
        assert [(j.job_id, j.action) for j in report.jobs] == [(job, "requeued")]
        # -D: every run of the job, the requeued one included, as slurmdbd recorded it.
        wait_for(lambda: any(r[1] == "REQUEUED" for r in sacct(lab, "-D", "-X", "-j", job, "-o",
                                                               "JobID,State,AllocTRES,NodeList")),
                 30, f"slurmdbd to record job {job} requeued")
        rows = sacct(lab, "-D", "-X", "-j", job, "-o", "JobID,State,AllocTRES,NodeList")
        requeued = [r for r in rows if r[1] == "REQUEUED"]
        assert requeued[0][0] == job and requeued[0][3] == node, rows
        assert "gres/gpu=2" in requeued[0][2].split(","), rows
    finally:
        subprocess.run(["scancel", job], env=lab.env(), check=False, timeout=15)
        drv.resume_if_ours([node])


def test_accounting_daemons_stay_on_loopback(lab: LabSlurm) -> None:
    paths = lab.accounting_paths
    assert slurm_accounting.dbd_version(lab.env()) == subprocess.run(
        ["slurmctld", "-V"], capture_output=True, text=True, check=True).stdout.split()[-1]  # one package version
    # MariaDB has no TCP listener at all: slurmdbd reaches it through its socket in the lab directory.
    res = subprocess.run(["mariadb", "--no-defaults", f"--socket={paths.socket}", "-u", "root", "-N", "-e",
                          "SELECT @@skip_networking"], capture_output=True, text=True, timeout=15, check=True)
    assert res.stdout.strip() == "1"
    port = lab.ports["slurmdbd"]
    listening = [line.split() for line in Path("/proc/net/tcp").read_text().splitlines()[1:]]
    found = {w[1] for w in listening if w[3] == "0A" and int(w[1].split(":")[1], 16) == port}
    assert found == {f"0100007F:{port:04X}"}, found
    clusters = subprocess.run(["sacctmgr", "-n", "-P", "list", "cluster", "format=cluster,controlhost"],
                              env=lab.env(), capture_output=True, text=True, timeout=15, check=True).stdout
    assert f"{lab.cluster_name}|127.0.0.1" in clusters.splitlines()


def test_configless_slurmd_get_their_config_from_slurmctld(lab: LabSlurm) -> None:
    port = lab.ports["slurmctld"]
    res = lab.run_inside(["sh", "-c", "for p in $(pgrep -x slurmd); do tr '\\0' ' ' < /proc/$p/cmdline; echo; done"])
    lines = [line.split() for line in res.stdout.splitlines() if line.strip()]
    assert len(lines) == 12, res.stdout  # the two lendable nodes start lent (powered off)
    for argv in lines:
        assert "-f" not in argv and argv[argv.index("--conf-server") + 1] == f"127.0.0.1:{port},127.0.0.2:{port}"
    # What slurmd runs on is what slurmctld sent it, cached in its spool directory.
    for node in ("gpu-001", "gpu-012"):
        cache = lab.root / "spool" / node / "conf-cache"
        for name in ("slurm.conf", "gres.conf", "topology.conf"):
            assert (cache / name).read_text() == (lab.root / "etc" / name).read_text(), f"{node}: {name}"


def test_backup_slurmctld_takes_over_when_the_primary_is_killed(lab: LabSlurm) -> None:
    env = lab.env()
    assert slurm_daemons.ping(env) == {"primary": "UP", "backup": "UP"}
    primary = slurm_daemons.controller(lab.conf, "primary")
    slurm_daemons.stop_controller(lab.run_inside, lab.conf, primary, "KILL")
    try:
        wait_for(lambda: slurm_daemons.ping(env) == {"primary": "DOWN", "backup": "UP"}, 60,
                 "the backup to answer alone")
        # The backup is in charge: it schedules a GPU job, and slurmdbd records it.
        job = subprocess.run(["sbatch", "--parsable", "--chdir=/tmp", "--output=/dev/null", "-p", "train",
                              "--gres=gpu:1", "--wrap", "true"], env=env, capture_output=True, text=True,
                             timeout=60, check=True).stdout.strip()
        wait_for(lambda: [r[1] for r in sacct(lab, "-X", "-j", job, "-o", "JobID,State")] == ["COMPLETED"], 60,
                 f"job {job} to complete under the backup")
        assert f"ControlMachine {slurm_daemons.PRIMARY_HOST} not responding, BackupController1 " \
               f"{slurm_daemons.BACKUP_HOST} taking over" in lab.log("slurmctld").read_text()
    finally:
        slurm_daemons.start_controller(lab.run_inside, lab.conf, primary)
    wait_for(lambda: slurm_daemons.ping(env) == {"primary": "UP", "backup": "UP"}, 60, "the primary to be back")

"""Multi-node runs without Slurm: mpirun started over SSH on the group's first node, in the lab's model.

Nodes of a Kubernetes pool, or of no scheduler yet, were never tested across nodes
(left out: "not a Slurm pool"). :class:`SshMpirun` launches ``mpirun --host a,b`` on the
group's first node through the fan-out's transport; here the transport runs the command
as SSH would on that node (the node's ``bin/`` first on PATH, as the lab's sshd sets it),
and the lab's fake ``mpirun`` starts the lab's ``all_reduce_perf`` across the hosts. The
output is parsed and judged with burnin's own code against the H100 multi-node floor.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest

from acceptance.fanout import RemoteRun, Target
from acceptance.judge import judge_group
from acceptance.multinode import LaunchRecord, MultiNodeError, SshMpirun
from burnin import profiles
from lifecycle.lab.gputools.cli import install

H100 = profiles.load("h100-sxm-8")


class NodeShell:
    """Runs argv on a lab node as ``ssh node argv`` would: its tools first on PATH, in its directory."""

    def __init__(self, rack: Path) -> None:
        self.rack = rack
        self.ran: list[tuple[str, list[str]]] = []

    def run(self, target: Target, argv: Sequence[str], timeout_s: float) -> RemoteRun:
        self.ran.append((target.node, list(argv)))
        env = {**os.environ, "PATH": f"{self.rack / target.node / 'bin'}:/usr/bin:/bin"}
        for key in [k for k in env if k.startswith("SLURM")]:
            del env[key]
        command = " ".join(shlex.quote(a) for a in argv)  # sshd hands the user's shell one command string
        proc = subprocess.run(["sh", "-c", command], env=env, capture_output=True, timeout=timeout_s, check=False)
        return RemoteRun(proc.returncode, proc.stdout, proc.stderr.decode())

    def fetch(self, target: Target, remote_dir: str, local_dir: Path, timeout_s: float) -> str | None:
        return "not used"

    def release(self, target: Target) -> None:
        """Nothing is kept open."""


@pytest.fixture
def rack(tmp_path: Path) -> Path:
    root = tmp_path / "nodes"
    for i in range(1, 5):
        d = root / f"node-{i:02d}"
        (d / "bin").mkdir(parents=True)
        (d / "node.json").write_text(json.dumps({"name": d.name, "gpu_model": "NVIDIA H100 80GB HBM3",
                                                 "gpu_count": 8, "ib_ports": 8, "ib_rate_gbps": 400,
                                                 "booted_at": 1.0}))
        install(d / "bin")
    return root


def test_mpirun_over_ssh_runs_a_round_and_each_run_is_judged(rack: Path) -> None:
    (rack / "node-04" / "fault.json").write_text(json.dumps({"profile": "ib-slow", "gpu": 2}))
    shell = NodeShell(rack)
    records = SshMpirun(shell).run_round([("node-01", "node-02"), ("node-03", "node-04")], "same_leaf_pairs", 60)
    assert [r.nodes for r in records] == [("node-01", "node-02"), ("node-03", "node-04")]
    assert [node for node, _ in shell.ran] == ["node-01", "node-03"]  # launched on each group's first node
    assert records[0].argv[:5] == ("mpirun", "--allow-run-as-root", "--host", "node-01,node-02", "-np")
    assert all(r.launcher == "mpirun" and r.job_id is None for r in records)
    runs = [r.group_run("h100-sxm-8") for r in records]
    assert runs[0].report is not None and runs[0].report.hosts == ["node-01", "node-02"]
    assert [judge_group(r, H100).verdict for r in runs] == ["pass", "fail"]
    again = LaunchRecord.from_dict(json.loads(json.dumps(records[1].to_dict())))
    assert again == records[1]


def test_mpirun_to_a_node_that_is_not_up_is_an_error_with_its_words(rack: Path) -> None:
    facts = json.loads((rack / "node-02" / "node.json").read_text())
    (rack / "node-02" / "node.json").write_text(json.dumps(facts | {"booted_at": None}))
    [record] = SshMpirun(NodeShell(rack)).run_round([("node-01", "node-02")], "pair", 60)
    run_ = record.group_run("h100-sxm-8")
    assert run_.report is None and run_.error is not None
    assert "mpirun exited 1" in run_.error and "unable to reliably start" in run_.error
    assert judge_group(run_, H100).verdict == "error"


def test_mpirun_missing_on_the_node_is_an_error(rack: Path) -> None:
    (rack / "node-01" / "bin" / "mpirun").unlink()
    [record] = SshMpirun(NodeShell(rack), mpirun="/nonexistent/mpirun").run_round([("node-01", "node-02")], "pair",
                                                                                 60)
    run_ = record.group_run("h100-sxm-8")
    assert judge_group(run_, H100).verdict == "error" and "mpirun exited 127" in (run_.error or "")


def test_mpirun_refuses_unsafe_names(rack: Path) -> None:
    with pytest.raises(MultiNodeError):
        SshMpirun(NodeShell(rack)).argv(["node-01", "node-01"])
    with pytest.raises(MultiNodeError):
        SshMpirun(NodeShell(rack)).argv(["node-01", "x;reboot"])

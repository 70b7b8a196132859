"""Parsers against Slurm output captured elsewhere (../shared/fixtures/slurm) — no daemons needed."""

from __future__ import annotations

from pathlib import Path

from lifecycle.drivers.errors import (
    AuthFailed,
    Busy,
    OperationFailed,
    PermanentError,
    TemporaryError,
    Unreachable,
)
from lifecycle.drivers.slurm.driver import NotOurs, SlurmDriver, reason_for
from lifecycle.drivers.slurm.parse import (
    node_from_rest,
    nodes_from_sinfo,
    parse_jobs,
    parse_nodes,
    parse_table,
    split_reason,
)
from lifecycle.drivers.slurm.runner import classify
from lifecycle.drivers.slurm.types import DrainOwner, NodeState


def test_scontrol_show_job_multi_node(fixtures_dir: Path) -> None:
    text = (fixtures_dir / "slurm" / "gcm_shelper_testdata_scontrol_out_multi_node.txt").read_text()
    [job] = parse_jobs(text)
    assert job.job_id == "8401413"
    assert job.state == "RUNNING"
    assert job.active
    assert job.partition == "learn"
    assert job.user == "test_username"
    assert job.nodes == ("node1433", "node1787", "node1795", "node1854", "node1889", "node1890",
                         "node1968", "node1969")
    assert job.requeue and job.restarts == 0


def test_scontrol_show_job_array_task(fixtures_dir: Path) -> None:
    text = (fixtures_dir / "slurm" / "gcm_shelper_testdata_scontrol_out_some_gpus.txt").read_text()
    [job] = parse_jobs(text)
    assert job.job_id == "30214"
    assert job.nodes == ("node1751",)
    assert job.name == "demo_ods"


def test_sinfo_all_columns(fixtures_dir: Path) -> None:
    text = (fixtures_dir / "slurm" / "gcm_gcm_tests_data_sample-sinfo-output.txt").read_text()
    rows = parse_table(text)
    assert len(rows) == 4
    assert rows[0]["GRES"] == "gpu:gen:8"
    nodes = {n.name: n for n in nodes_from_sinfo(rows)}
    assert set(nodes) == {"node0201", "node1537", "node4180"}
    drained = nodes["node0201"]
    assert drained.state.drain and drained.state.drained and not drained.state.responding
    assert drained.reason == "replace"
    assert drained.owner == DrainOwner("other", user="root", reason="replace")
    assert nodes["node1537"].state.base == "allocated"
    assert nodes["node1537"].owner.kind == "none"
    assert nodes["node4180"].features == ("gen", "bldg1", "ib1", "gpu2")


def test_serving_is_what_slurm_would_start_a_job_on() -> None:
    serving = ["IDLE", "MIXED", "ALLOCATED", "IDLE+CLOUD", "COMPLETING"]
    not_serving = ["IDLE*", "DOWN", "DOWN*+DRAIN", "IDLE+DRAIN", "MIXED+DRAIN", "IDLE+CLOUD+POWERED_DOWN",
                   "IDLE+POWER_DOWN", "IDLE+POWERING_UP", "ALLOCATED+FAIL", "IDLE+REBOOT_ISSUED", "UNKNOWN", "FUTURE",
                   ""]
    assert [s for s in serving if not NodeState.from_scontrol(s).serving] == []
    assert [s for s in not_serving if NodeState.from_scontrol(s).serving] == []
    assert not NodeState.from_sinfo("idle*").serving and NodeState.from_sinfo("mix").serving
    assert not NodeState.from_sinfo("inval").serving and not NodeState.from_sinfo("drained").serving


def test_node_states_table() -> None:
    assert NodeState.from_scontrol("MIXED+DRAIN").draining
    assert NodeState.from_scontrol("IDLE+DRAIN").drained
    assert NodeState.from_scontrol("IDLE+CLOUD+POWERED_DOWN").powered_down
    assert not NodeState.from_scontrol("DOWN*+DRAIN").responding
    assert NodeState.from_sinfo("idle~").powered_down
    assert NodeState.from_sinfo("draining").draining
    assert NodeState.from_sinfo("drng@").flags == {"DRAIN", "REBOOT_REQUESTED"}
    odd = NodeState.from_sinfo("weird")
    assert odd.base == "unknown" and "UNRECOGNISED:weird" in odd.flags


def test_scontrol_node_line_with_spaces_and_reason() -> None:
    # The OS value holds spaces and '#'; Reason runs to the end of the line.
    line = (
        "NodeName=gpu-001 Arch=x86_64 CPUAlloc=0 CPUTot=224 AvailableFeatures=h100,rack-r01 "
        "Gres=gpu:h100:8 OS=Linux 6.1.0-18-amd64 #1 SMP PREEMPT_DYNAMIC Debian  RealMemory=1992294 "
        "State=IDLE+DRAIN Partitions=train  Reason=racklife:r1: a=b c [root@2026-11-30T01:50:59]"
    )
    [node] = parse_nodes(line)
    assert node.state.drained
    assert node.real_memory_mb == 1992294
    assert node.partitions == ("train",)
    assert node.reason == "racklife:r1: a=b c"
    assert node.reason_user == "root"
    assert node.owner == DrainOwner("racklife", run_id="r1", user="root", reason="racklife:r1: a=b c")


def test_slurmd_start_time_marks_a_reboot() -> None:
    """The power workflow waits for SlurmdStartTime to move: a slurmd that started after the power action."""
    up = "NodeName=node-03 CPUTot=2 State=IDLE SlurmdStartTime=2026-12-01T15:00:58 LastBusyTime=2026-12-01T15:00:28"
    assert parse_nodes(up)[0].slurmd_start == "2026-12-01T15:00:58"
    assert parse_nodes("NodeName=node-03 State=DOWN* SlurmdStartTime=None")[0].slurmd_start is None
    assert parse_nodes("NodeName=node-03 State=DOWN*")[0].slurmd_start is None
    assert node_from_rest({"name": "n", "slurmd_start_time": {"set": True, "number": 1796137258}}).slurmd_start \
        == "1796137258"
    assert node_from_rest({"name": "n", "slurmd_start_time": {"set": False, "number": 0}}).slurmd_start is None
    assert node_from_rest({"name": "n", "slurmd_start_time": 1796137258}).slurmd_start == "1796137258"


def test_ownership_rules() -> None:
    assert DrainOwner.of("racklife:run-7: leave for upgrade").run_id == "run-7"
    assert DrainOwner.of("admin: bad DIMM").kind == "other"
    assert DrainOwner.of("").kind == "none"
    assert DrainOwner.of("Not responding").kind == "other"
    assert DrainOwner.of("racklife-ish: no").kind == "other"
    assert split_reason("replace [root@2022-06-02T05:54:34]") == ("replace", "root", "2022-06-02T05:54:34")
    assert reason_for("r1", "leave  for\nupgrade") == "racklife:r1: leave for upgrade"


class _Replay:
    """Answers scontrol reads with fixed text and records every call (to prove no write happened)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.calls: list[list[str]] = []

    def __call__(self, argv: list[str]) -> str:
        self.calls.append(list(argv))
        return self.text


def test_resume_refuses_a_drain_without_reason() -> None:
    # A drained node without any reason (older Slurm, or a tool that cleared it) is not ours.
    replay = _Replay("NodeName=gpu-009 CPUTot=224 State=IDLE+DRAIN Partitions=train")
    driver = SlurmDriver(replay)
    try:
        driver.resume_if_ours(["gpu-009"])
    except NotOurs as exc:
        assert "nobody (no reason set)" in str(exc)
        assert exc.owner.kind == "none"
    else:
        raise AssertionError("resume_if_ours lifted a drain that has no owner")
    assert all(call[:2] != ["scontrol", "update"] for call in replay.calls)


def test_error_table() -> None:
    assert isinstance(classify("scontrol", "slurm_load_jobs error: Unable to contact slurm controller (connect failure)"), Unreachable)
    assert isinstance(classify("scontrol", "Munge decode failed: Invalid credential"), AuthFailed)
    err = classify("scontrol", "slurm_update error: Invalid node name specified")
    assert isinstance(err, OperationFailed) and not err.retryable
    assert "Invalid node name" in err.message
    busy = classify("sbatch", "sbatch: error: Batch job submission failed: Resource temporarily unavailable")
    assert isinstance(busy, Busy) and isinstance(busy, TemporaryError)
    assert isinstance(err, PermanentError) and isinstance(classify("scontrol", "Munge decode failed"),
                                                          PermanentError)

"""The multi-node stage: the lab's all_reduce_perf across nodes, srun launching, rounds and isolation.

The lab tool is run the way slurmd starts it (the step's environment), and its output is
read back with burnin's own parser and judged with the H100 profile's multi-node floor,
so "a slow pair is really slow" is checked with the same code that judges real racks.
The stage is then driven end to end with a launcher that runs the lab tool for each
group, and ``Srun`` itself is run against a stand-in ``srun`` executable to check the
argv, the parallel launch and the job ids read from its ``-v`` output.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from acceptance.isolation import Isolation, isolate
from acceptance.judge import GroupRun, judge_group
from acceptance.multinode import Launcher, LaunchRecord, MultiNodeError, Srun, run_stage
from acceptance.topology import Placement
from burnin import profiles
from burnin.parsers.nccl import parse
from lifecycle.lab.gputools.cli import install, run
from lifecycle.lab.gputools.multinode import node_dir, slurm_step

ARGS = ["-b", "1G", "-e", "8G", "-f", "2", "-g", "8"]
H100 = profiles.load("h100-sxm-8")


@pytest.fixture
def rack(tmp_path: Path) -> Path:
    """Eight lab node directories (H100, 8x NDR) under one ``nodes/``; faults set per test."""
    root = tmp_path / "nodes"
    for i in range(1, 9):
        d = root / f"node-{i:02d}"
        (d / "bin").mkdir(parents=True)
        (d / "node.json").write_text(json.dumps({"name": d.name, "gpu_model": "NVIDIA H100 80GB HBM3",
                                                 "gpu_count": 8, "ib_ports": 8, "ib_rate_gbps": 400}))
        install(d / "bin")
    return root


def fault(rack: Path, node: str, profile: str, index: int = 2) -> None:
    (rack / node / "fault.json").write_text(json.dumps({"profile": profile, "gpu": index}))


def step_env(nodes: Sequence[str], procid: int = 0, job: str = "7") -> dict[str, str]:
    from lifecycle.drivers.slurm.hostlist import compress

    return {"SLURMD_NODENAME": nodes[procid], "SLURM_PROCID": str(procid), "SLURM_JOB_ID": job,
            "SLURM_STEP_NODELIST": compress(nodes), "SLURM_STEP_NUM_TASKS": str(len(nodes))}


def allreduce(rack: Path, nodes: Sequence[str], procid: int = 0) -> tuple[str, int]:
    env = step_env(nodes, procid)
    # started from node-01's bin/ whatever node Slurm placed it on, as srun does with one path
    return run("all_reduce_perf", ARGS, node_dir(rack / "node-01", env), env)


def test_pair_of_healthy_nodes_clears_the_multi_node_floor(rack: Path) -> None:
    text, code = allreduce(rack, ["node-02", "node-05"])
    assert code == 0
    report = parse("".join(f"0: {ln}\n" for ln in text.splitlines()))  # as srun -l prints it
    assert report.ranks == 16 and report.hosts == ["node-02", "node-05"] and report.complete
    assert 380 < report.peak_busbw < 396  # ~48 GB/s per NDR NIC x 8 (nccl-tests #290, #319)
    assert judge_group_verdict(text, ("node-02", "node-05")) == "pass"


def judge_group_verdict(text: str, nodes: tuple[str, ...]) -> str:
    record = LaunchRecord(nodes, "pair", ("srun",), 0, text, "", "1", 0.0, 1.0)
    return judge_group(record.group_run("h100-sxm-8"), H100).verdict


@pytest.mark.parametrize(("profile", "low", "high"), [
    ("slow-nvlink", 140, 160),  # NVLink inside the slow node caps the collective (0.32 x 478)
    ("ib-down", 185, 200),  # a rail down: its channels double up on another rail
    ("ib-slow", 90, 100),  # a lossy rail at a quarter speed sets the pace of all channels
])
def test_the_slowest_participant_sets_the_pace(rack: Path, profile: str, low: float, high: float) -> None:
    fault(rack, "node-04", profile)
    text, code = allreduce(rack, ["node-03", "node-04", "node-07"])
    assert code == 0
    report = parse(text)
    assert report.ranks == 24 and low < report.peak_busbw < high
    assert judge_group_verdict(text, ("node-03", "node-04", "node-07")) == "fail"
    healthy, _ = allreduce(rack, ["node-03", "node-07"])
    assert parse(healthy).peak_busbw > 380


def test_only_rank_zero_prints_and_the_node_comes_from_slurmd(rack: Path) -> None:
    assert allreduce(rack, ["node-01", "node-02"], procid=1) == ("", 0)
    env = step_env(["node-06"])
    assert node_dir(rack / "node-01", env) == rack / "node-06"
    assert node_dir(rack / "node-01", {}) == rack / "node-01"
    step = slurm_step(step_env(["node-01", "node-02", "node-03"], procid=2))
    assert step is not None and step.nodes == ("node-01", "node-02", "node-03") and step.node == "node-03"
    assert slurm_step({}) is None


def test_a_broken_gpu_anywhere_fails_the_run(rack: Path) -> None:
    fault(rack, "node-02", "xid79", 5)
    text, code = allreduce(rack, ["node-01", "node-02"])
    assert code == 1 and "node-02: Test CUDA failure" in text
    record = LaunchRecord(("node-01", "node-02"), "pair", ("srun",), 1, text, "srun: error: node-01: task 0: "
                          "Exited with exit code 1", "3", 0.0, 1.0)
    run_ = record.group_run("h100-sxm-8")
    assert run_.report is None and run_.error is not None and "srun exited 1" in run_.error
    assert judge_group(run_, H100).verdict == "error"


def lab_launcher(rack: Path, calls: list[tuple[str, list[tuple[str, ...]]]]) -> Launcher:
    """Runs each group like srun would, with the lab tool; records what each round asked for."""
    def launch(groups: Sequence[tuple[str, ...]], kind: str) -> list[LaunchRecord]:
        calls.append((kind, [tuple(g) for g in groups]))
        out = []
        for i, g in enumerate(groups):
            text, code = allreduce(rack, g)
            out.append(LaunchRecord(tuple(g), kind, ("srun", "-w", ",".join(g)), code, text, "",
                                    str(100 + len(calls) * 10 + i), 0.0, 0.1))
        return out
    return launch


def slow(run_: GroupRun) -> bool:
    return judge_group(run_, H100).verdict != "pass"


def test_stage_plans_rounds_from_topology_and_isolates_a_lossy_rail(rack: Path) -> None:
    fault(rack, "node-06", "ib-slow")
    places = [Placement(f"node-{i:02d}", f"leaf-{1 + (i - 1) // 4}", "spine-1" if i <= 4 else "spine-2")
              for i in (1, 2, 4, 5, 6, 7, 8)]
    calls: list[tuple[str, list[tuple[str, ...]]]] = []
    stage = run_stage(places, lab_launcher(rack, calls), slow, profile="h100-sxm-8",
                      left_out={"node-03": "failed single-node burn-in: not paired"})
    kinds = [k for k, _ in calls]
    assert kinds[:3] == ["same_leaf_pairs", "cross_spine_pairs", "ring"]
    assert stage.isolation is not None and stage.isolation.bad_nodes == {"node-06"}
    assert stage.isolation.bad_links == frozenset() and not stage.isolation.unresolved
    assert stage.rounds == 3 + stage.isolation.n_rounds and stage.isolation.n_rounds <= 2
    for _kind, groups in calls:  # disjoint groups in every round
        flat = [n for g in groups for n in g]
        assert len(flat) == len(set(flat))
    assert "node-03" not in {n for _, gs in calls for g in gs for n in g}
    doc = stage.to_dict()
    assert doc["left_out"] == {"node-03": "failed single-node burn-in: not paired"}
    assert len(doc["slurm_jobs"]) == len(doc["launches"]) == sum(len(g) for _, g in calls)
    assert stage.culprits()["node-06"].startswith("isolation: slow with proven-good node")
    again = Isolation.from_dict(json.loads(json.dumps(stage.isolation.to_dict())))
    assert again == stage.isolation


def test_stage_on_a_healthy_rack_runs_only_the_planned_rounds(rack: Path) -> None:
    places = [Placement(f"node-{i:02d}", "leaf-1", "spine-1") for i in range(1, 6)]
    calls: list[tuple[str, list[tuple[str, ...]]]] = []
    stage = run_stage(places, lab_launcher(rack, calls), slow, profile="h100-sxm-8", max_parallel=1)
    assert stage.isolation is None and stage.culprits() == {}
    assert [k for k, _ in calls] == ["same_leaf_pairs", "same_leaf_pairs", "ring"]  # cap 1: a round in slices
    assert stage.rounds == 2
    alone = run_stage(places[:1], lab_launcher(rack, calls), slow)
    assert alone.left_out == {"node-01": "no second node to run with"} and alone.rounds == 0


def test_one_suspect_is_tested_against_a_known_good_partner() -> None:
    seen: list[list[tuple[str, ...]]] = []

    def oracle(groups: Sequence[tuple[str, ...]]) -> list[bool]:
        seen.append(list(groups))
        return ["x" in g for g in groups]

    iso = isolate(["x"], oracle, known_good=["a", "b"])
    assert iso.bad_nodes == {"x"} and iso.n_rounds == 1 and seen == [[("x", "a")]]
    fine = isolate(["y"], oracle, known_good=["a"])
    assert fine.bad_nodes == frozenset() and fine.good_nodes == {"y"}


FAKE_SRUN = """#!{python}
import os, sys, time
args = sys.argv[1:]
nodes = next(a.split("=", 1)[1] for a in args if a.startswith("--nodelist="))
job = str(40 + int(nodes.split(",")[0].rsplit("-", 1)[1]))
def note(what):
    with open(os.environ["FAKE_SRUN_LOG"], "a") as log:
        log.write(f"{{what}} {{job}}\\n")
note("start")
print("srun: defined options", file=sys.stderr)
print("srun: nodes               : 2", file=sys.stderr)
print(f"srun: jobid {{job}}: nodes(2):`{{nodes}}', cpu counts: 224(x2)", file=sys.stderr)
time.sleep(float(os.environ.get("FAKE_SRUN_SLEEP", "0.5")))
note("end")
if "node-09" in nodes:
    print("srun: error: Unable to allocate resources: Requested node configuration is not available", file=sys.stderr)
    sys.exit(1)
print("0: # Avg bus bandwidth    : 1.0")
"""


def test_srun_launches_a_round_at_once_and_reads_job_ids(tmp_path: Path) -> None:
    fake = tmp_path / "srun"
    fake.write_text(FAKE_SRUN.format(python=sys.executable))
    fake.chmod(0o755)
    log = tmp_path / "log"
    env = {**os.environ, "FAKE_SRUN_LOG": str(log)}
    srun = Srun(job_name="racklife-accept-1", partition="training", binary="/opt/nccl-tests/all_reduce_perf",
                srun=str(fake), env=env)
    argv = srun.argv(("node-01", "node-02"))
    assert argv[:2] == [str(fake), "-v"] and "--exclusive" in argv and "--nodelist=node-01,node-02" in argv
    assert argv[argv.index("--") + 1:] == ["/opt/nccl-tests/all_reduce_perf", "-b", "1G", "-e", "8G", "-f", "2",
                                           "-g", "8"]
    groups = [("node-01", "node-02"), ("node-03", "node-04"), ("node-09", "node-05")]
    records = srun.run_round(groups, "same_leaf_pairs", timeout_s=60)
    assert [r.job_id for r in records] == ["41", "43", "49"]
    events = [line.split()[0] for line in log.read_text().splitlines()]
    assert events == ["start"] * 3 + ["end"] * 3  # every job started before any ended: launched together
    assert records[0].returncode == 0 and "defined options" not in records[0].stderr
    assert "jobid 41" in records[0].stderr
    failed = records[2].group_run("h100-sxm-8")
    assert failed.report is None and "Requested node configuration is not available" in (failed.error or "")
    assert failed.job_id == "49" and (failed.raw_output or "").startswith(f"$ {fake} -v")
    [late] = Srun(job_name="j", srun=str(fake), env={**env, "FAKE_SRUN_SLEEP": "30"}).run_round(
        [("node-01", "node-02")], "ring", timeout_s=1)
    assert late.timed_out and late.returncode is None
    assert "did not finish" in (late.group_run().error or "")


def test_no_srun_on_the_controller_is_an_error_per_run(tmp_path: Path) -> None:
    [rec] = Srun(job_name="j", srun=str(tmp_path / "no-srun")).run_round([("node-01", "node-02")], "ring", 10)
    assert rec.returncode == 127 and rec.job_id is None
    run_ = rec.group_run("h100-sxm-8")
    assert run_.report is None and "srun exited 127" in (run_.error or "") and "no-srun" in (run_.error or "")
    assert judge_group(run_, H100).verdict == "error"


def test_srun_refuses_unsafe_names() -> None:
    srun = Srun(job_name="racklife-1")
    for bad in (("node-01",), ("node-01", "node-01"), ("node-01", "-w x")):
        with pytest.raises(MultiNodeError):
            srun.argv(bad)
    with pytest.raises(MultiNodeError):
        Srun(job_name="a b").argv(("n1", "n2"))


def test_pairing_waits_for_booting_nodes_but_never_for_drained_ones() -> None:
    from lifecycle.drivers.slurm.driver import SlurmDriver
    from lifecycle.workflows.accept_multinode import schedulable

    states = [{"node-01": "IDLE", "node-02": "DOWN*", "node-03": "IDLE+DRAIN Reason=fan_check"},
              {"node-01": "IDLE", "node-02": "IDLE", "node-03": "IDLE+DRAIN Reason=fan_check"}]
    asked: list[list[str]] = []

    def scontrol(argv: Sequence[str]) -> str:
        asked.append(list(argv))
        now = states[min(len(asked), len(states)) - 1]
        return "".join(f"NodeName={n} CPUTot=224 State={st} Partitions=training\n" for n, st in now.items())

    t = [0.0]

    def sleep(s: float) -> None:
        t[0] += s

    ready, why = schedulable(["node-01", "node-02", "node-03"], 120, SlurmDriver(scontrol), sleep, lambda: t[0])
    assert ready == ["node-01", "node-02"] and list(why) == ["node-03"] and t[0] == 1.0
    assert why["node-03"].startswith("drained in Slurm") and asked[0][:3] == ["scontrol", "show", "node"]
    states[1:] = [states[0]]  # node-02 never comes up: given up on at the deadline, with its state
    asked.clear()
    t[0] = 0.0
    ready, why = schedulable(["node-01", "node-02", "node-03"], 5, SlurmDriver(scontrol), sleep, lambda: t[0])
    assert ready == ["node-01"] and why["node-02"].startswith("not idle in Slurm (state down+NOT_RESPONDING)")
    assert t[0] == 5.0

"""The lab's fake tools take a real tool's time only when asked, and the time they take.

The bench (``bench/accept.py --tool-time``) measures racklife's overhead against these
durations, so they are checked here: off by default, scaled, overridable per tool, and
nccl-tests' time derived from its own table (as the real binary spends it). Sleeping is
injected: nothing here waits.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from burnin.parsers import nccl as nccl_parser
from lifecycle.lab.faults import HEALTHY
from lifecycle.lab.gputools import timing
from lifecycle.lab.gputools.cli import run
from lifecycle.lab.netns import NodeNet
from lifecycle.lab.node import LabSsh, NodeSpec, SimNode


@pytest.fixture
def node_dir(tmp_path: Path) -> Path:
    ssh = LabSsh(tmp_path, "unused-hub")
    ssh.prepare()
    net = NodeNet("gpu-01", "unused-gpu-01", "10.77.1.1", 16, "02:72:6c:00:00:01", "v0")
    node = SimNode(NodeSpec("gpu-01", "h100-sxm-8", boot_time_s=0), net, tmp_path, ssh, fault=HEALTHY)
    node.prepare()
    return node.dir


def call(node_dir: Path, tool: str, *argv: str, env: dict[str, str] | None = None) -> tuple[str, int, list[float]]:
    slept: list[float] = []
    text, code = run(tool, list(argv), node_dir, env or {}, sleep=slept.append)
    return text, code, slept


def test_tools_answer_at_once_by_default(node_dir: Path) -> None:
    for tool, argv in (("dcgmi", ["diag", "-r", "3", "-j"]), ("nvidia-smi", ["-q"]),
                       ("all_reduce_perf", ["-b", "1G", "-e", "8G", "-f", "2", "-g", "8"])):
        _text, code, slept = call(node_dir, tool, *argv)
        assert code == 0 and slept == []


def test_scale_one_takes_the_real_tools_time(node_dir: Path) -> None:
    timing.write(node_dir.parent, 1.0)
    assert call(node_dir, "dcgmi", "diag", "-r", "1", "-j")[2] == [timing.SECONDS["dcgmi.r1"]]
    assert call(node_dir, "dcgmi", "diag", "-r", "3")[2] == [900.0]
    assert call(node_dir, "nvidia-smi", "-q")[2] == [timing.SECONDS["nvidia-smi"]]
    assert call(node_dir, "dmesg")[2] == [timing.SECONDS["dmesg"]]
    assert call(node_dir, "nvidia-smi", "--version")[2] == [timing.SECONDS["version"]]
    assert call(node_dir, "ibstat", "-V")[2] == [timing.SECONDS["version"]]


def test_nccl_time_comes_from_its_own_table(node_dir: Path, shared_dir: Path) -> None:
    timing.write(node_dir.parent, 1.0)
    text, code, slept = call(node_dir, "all_reduce_perf", "-b", "1G", "-e", "8G", "-f", "2", "-g", "8")
    assert code == 0
    rows = nccl_parser.parse(text, "all_reduce").rows
    assert [r.size_bytes for r in rows] == [1 << 30, 1 << 31, 1 << 32, 1 << 33]
    per_iteration_s = sum(r.time_oop_us + r.time_ip_us for r in rows) / 1e6
    # defaults of nccl-tests: 5 warmup iterations, 20 timed ones, aggregated once
    transfer_s = 25 * per_iteration_s
    assert slept == [pytest.approx(timing.SECONDS["nccl.init"] + transfer_s, rel=1e-3)]
    # the table's times, and so the time slept, follow the real H100 capture at the sizes it has
    capture = (shared_dir / "fixtures" / "nccl" / "h100x8_all_reduce_perf_single-node_nvls_issue290.txt").read_text()
    real = {r.size_bytes: r for r in nccl_parser.parse(capture, "all_reduce").rows}
    common = [r for r in rows if r.size_bytes in real]
    assert [r.size_bytes for r in common] == [1 << 30, 1 << 31, 1 << 32]
    for r in common:
        assert r.time_oop_us == pytest.approx(real[r.size_bytes].time_oop_us, rel=0.15)
        assert r.time_ip_us == pytest.approx(real[r.size_bytes].time_ip_us, rel=0.15)
    _text, _code, more = call(node_dir, "all_reduce_perf", "-b", "1G", "-e", "8G", "-f", "2", "-g", "8",
                              "-n", "40")
    assert more[0] > slept[0]


def test_scale_overrides_and_environment(node_dir: Path) -> None:
    timing.write(node_dir.parent, 0.1, {"dcgmi.r1": 50.0})
    assert call(node_dir, "dcgmi", "diag", "-r", "1")[2] == [pytest.approx(5.0)]
    env = {timing.ENV: "0"}
    assert call(node_dir, "dcgmi", "diag", "-r", "1", env=env)[2] == []
    env = {timing.ENV: "2"}
    assert call(node_dir, "dcgmi", "diag", "-r", "1", env=env)[2] == [pytest.approx(100.0)]


def test_bad_settings_are_refused(node_dir: Path) -> None:
    with pytest.raises(ValueError, match="unknown tool duration"):
        timing.write(node_dir.parent, 1.0, {"dcgmi.r9": 1.0})
    with pytest.raises(ValueError, match=">= 0"):
        timing.write(node_dir.parent, -1.0)


def test_a_failing_nccl_run_takes_only_setup_time(node_dir: Path) -> None:
    timing.write(node_dir.parent, 1.0)
    _text, code, slept = call(node_dir, "all_reduce_perf", "-g", "64")
    assert code == 1 and slept == [timing.SECONDS["nccl.init"]]

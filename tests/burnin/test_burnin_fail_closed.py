"""Judging fails closed: each required check on its own, the level that ran, no lenient rules.

Each test here passed on the old judge: one nccl check stood for every collective of a
level, the DCGM level judged was the one asked for, an unknown IB physical state
counted as up, and a GPU's own slowdown temperature could loosen the profile's limit.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from burnin import profiles, runner
from burnin.judge import judge_dcgm, judge_gpus, judge_ib
from burnin.nvml import FakeNvml, GpuInventory, healthy_gpu
from burnin.parsers import dcgm
from burnin.parsers.infiniband import IbCa, IbPort, IbReport
from burnin.result import load_result
from burnin.tools import ToolRunner
from tests.burnin.test_burnin_run import _good_stress, _inventory

Fx = Callable[[str], Path]
FakeBin = Callable[..., Path]
H100 = profiles.load("h100-sxm-8")


def _standard_result(tmp_path: Path, env: dict[str, str]) -> Path:
    out = tmp_path / "out"
    runner.run(H100, "standard", out, nvml=FakeNvml(_inventory()), stress=_good_stress,
               tools=ToolRunner(out, env=env), host="node005")
    return out / "result.json"


def test_each_required_collective_is_required_on_its_own(healthy_tools: Path, fake_bin: FakeBin,
                                                         fake_path: dict[str, str], fx: Fx, tmp_path: Path) -> None:
    capture = fx("nccl/h100x8_all_reduce_perf_single-node_nvls_issue290.txt")
    for name in ("all_gather", "reduce_scatter", "alltoall"):
        fake_bin(f"{name}_perf", capture)
    path = _standard_result(tmp_path, fake_path)
    doc = json.loads(path.read_text())
    doc["checks"] = [c for c in doc["checks"] if c["name"] not in ("nccl.all_gather", "nccl.alltoall")]
    verdict = runner.rejudge(load_result(json.dumps(doc)), H100)
    missing = {f.name: f for f in verdict.findings if f.name in ("nccl.all_gather", "nccl.alltoall")}
    assert not verdict.passed
    assert set(missing) == {"nccl.all_gather", "nccl.alltoall"}
    assert all(f.verdict == "error" and "result lacks it" in f.reason for f in missing.values())


def test_an_nccl_check_whose_data_measured_another_collective_is_an_error(
        healthy_tools: Path, fake_path: dict[str, str], tmp_path: Path) -> None:
    out = tmp_path / "out"
    runner.run(H100, "quick", out, nvml=FakeNvml(_inventory()), stress=_good_stress,
               tools=ToolRunner(out, env=fake_path), host="node005")
    doc = json.loads((out / "result.json").read_text())
    nccl = next(c for c in doc["checks"] if c["name"] == "nccl.all_reduce")
    nccl["data"]["collective"] = "all_gather"  # an all_gather log filed as the all_reduce check
    found = {f.name: f for f in runner.rejudge(load_result(json.dumps(doc)), H100).findings}
    assert found["nccl.all_reduce"].verdict == "error" and "all_gather" in found["nccl.all_reduce"].reason


def test_an_unknown_level_is_an_error_not_standard(healthy_tools: Path, fake_path: dict[str, str],
                                                   tmp_path: Path) -> None:
    out = tmp_path / "out"
    runner.run(H100, "quick", out, nvml=FakeNvml(_inventory()), stress=_good_stress,
               tools=ToolRunner(out, env=fake_path), host="node005")
    doc = json.loads((out / "result.json").read_text())
    doc["level"] = "thorough"
    verdict = runner.rejudge(load_result(json.dumps(doc)), H100)
    assert not verdict.passed and verdict.findings[0].name == "result.level"


def test_dcgm_level_judged_is_the_level_that_ran(fx: Fx, healthy_tools: Path, fake_path: dict[str, str],
                                                 tmp_path: Path) -> None:
    # dcgmi was asked for -r 2 but printed an r1 document (Deployment tests only)
    path = _standard_result(tmp_path, fake_path)
    check = next(c for c in load_result(path.read_text()).checks if c.name == "dcgm")
    level = next(f for f in check.findings if f.name == "dcgm.level")
    assert check.options["level"] == 2
    assert (level.verdict, level.measured, level.threshold) == ("fail", 1, 2)
    assert "inferred from the test categories" in level.reason
    again = {f.name: f for f in runner.rejudge(load_result(path.read_text()), H100).findings}
    assert again["dcgm.level"].verdict == "fail"


def test_dcgm_inferred_level_is_judged_and_an_unknown_level_is_an_error(fx: Fx) -> None:
    r1 = dcgm.parse(fx("dcgm/virtualclient/DCGMIDiag_r1_results.json").read_text())
    assert r1.level_inferred
    found = {f.name: f for f in judge_dcgm(r1, H100, "standard")}
    assert found["dcgm.level"].verdict == "fail"
    unknown = replace(r1, level=None, level_inferred=False)
    found = {f.name: f for f in judge_dcgm(unknown, H100, "quick")}
    assert found["dcgm.level"].verdict == "error" and "does not say which level" in found["dcgm.level"].reason


def test_ib_port_with_unknown_physical_state_is_not_up() -> None:
    ports = [IbPort(1, "Active", "LinkUp", 400.0, "InfiniBand") for _ in range(7)]
    ports.append(IbPort(1, "Active", "Unknown", 400.0, "InfiniBand"))
    report = IbReport([IbCa(f"mlx5_{i}", ports=[p]) for i, p in enumerate(ports)], "ibv_devinfo")
    (f,) = judge_ib(report, H100)
    assert f.verdict == "error" and "mlx5_7:1 Active/Unknown" in f.reason and "physical state" in f.reason


def test_gpu_slowdown_temperature_never_loosens_the_profile_limit() -> None:
    gpus = [replace(healthy_gpu(i, "NVIDIA H100 80GB HBM3"), temperature_slowdown_c=95.0) for i in range(8)]
    gpus[2] = replace(gpus[2], temperature_c=88.0)  # below its own 95 C slowdown, above the profile's 85 C
    found = {f.name: f for f in judge_gpus(GpuInventory("nvml", "565.57.01", "12.7", "12.565", gpus), H100)}
    assert found["gpu.temperature"].verdict == "fail" and "GPU 2: 88 C >= 85 C" in found["gpu.temperature"].reason
    tighter = [replace(g, temperature_c=82.0, temperature_slowdown_c=80.0) for g in gpus]
    found = {f.name: f for f in judge_gpus(GpuInventory("nvml", "565.57.01", "12.7", "12.565", tighter), H100)}
    assert found["gpu.temperature"].verdict == "fail"  # its own lower slowdown still tightens


def test_result_records_run_id_node_and_serial(healthy_tools: Path, fake_bin: FakeBin, fake_path: dict[str, str],
                                               tmp_path: Path) -> None:
    serial = tmp_path / "serial.txt"
    serial.write_text("SN-0042\n")
    fake_bin("dmidecode", serial)
    out = tmp_path / "out"
    runner.run(H100, "quick", out, nvml=FakeNvml(_inventory()), stress=_good_stress,
               tools=ToolRunner(out, env=fake_path), host="node005", run_id="accept-1", node="node-05")
    result = load_result((out / "result.json").read_text())
    assert (result.run_id, result.node, result.serial, result.level) == ("accept-1", "node-05", "SN-0042", "quick")
    assert (healthy_tools / "dmidecode.argv").read_text().splitlines() == ["-s system-serial-number"]

"""``burnin run`` end to end: fake node tools on PATH print real captures; verdicts follow.

The tools are tiny shell scripts that ``cat`` a saved capture, so the whole path is
real: PATH lookup, subprocess, raw output on disk, parsing, judging, result.json,
``burnin judge`` re-reading it, and ``python -m burnin`` as a node would run it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from burnin import profiles, runner
from burnin.cli import judge_file
from burnin.gpu_stress import GpuStressResult, StressReport, StressUnavailable
from burnin.nvml import FakeNvml, GpuInventory, NvmlXid, healthy_gpu
from burnin.result import ResultFormatError, RunResult, load_result
from burnin.tools import ToolRunner
from lifecycle.cli.burnin import app

Fx = Callable[[str], Path]
FakeBin = Callable[..., Path]
H100 = profiles.load("h100-sxm-8")


def _inventory(n: int = 8) -> GpuInventory:
    return GpuInventory("nvml", "565.57.01", "12.7", "12.565.57.01",
                        [healthy_gpu(i, "NVIDIA H100 80GB HBM3") for i in range(n)])


def _good_stress(seconds: float, size: int) -> StressReport:
    g = [GpuStressResult(i, "NVIDIA H100 80GB HBM3", 53.0, 53.0, 3000.0, True, 720.0, 5000, 0, True, 0.004,
                         seconds) for i in range(8)]
    return StressReport("2.11.0", "13.0", "cuda", "bfloat16", size, 1 << 30, g)


def _no_torch(seconds: float, size: int) -> StressReport:
    raise StressUnavailable("torch is not installed")


def _run(tmp_path: Path, env: dict[str, str], nvml: FakeNvml | None = None,
         stress: Callable[[float, int], StressReport] = _good_stress, level: str = "quick") -> RunResult:
    out = tmp_path / "out"
    return runner.run(H100, level, out, nvml=nvml or FakeNvml(_inventory()), stress=stress,
                      tools=ToolRunner(out, env=env), host="node005")


def test_healthy_node_passes(healthy_tools: Path, fake_path: dict[str, str], tmp_path: Path) -> None:
    result = _run(tmp_path, fake_path)
    assert [(c.name, c.verdict) for c in result.checks] == [
        ("gpu", "pass"), ("kernel_xid", "pass"), ("ib", "pass"), ("dcgm", "pass"),
        ("nccl.all_reduce", "pass"), ("stress", "pass"), ("xid_events", "pass")]
    assert result.verdict == "pass"
    doc = json.loads((tmp_path / "out" / "result.json").read_text())
    assert list(doc)[:2] == ["schema", "schema_version"] and doc["schema_version"] == 1
    dcgm = next(c for c in doc["checks"] if c["name"] == "dcgm")
    assert dcgm["argv"] == ["dcgmi", "diag", "-r", "1", "-j"] and dcgm["exit_code"] == 0
    assert (tmp_path / "out" / dcgm["raw_output"]).read_text().startswith("{")
    assert (healthy_tools / "dcgmi.argv").read_text().splitlines() == ["diag -r 1 -j", "--version"]
    assert (healthy_tools / "all_reduce_perf.argv").read_text().splitlines() == ["-b 1G -e 8G -f 2 -g 8"]
    assert dcgm["tool_version"] == "dcgmi (fake) 1.0"
    nccl = next(c for c in doc["checks"] if c["name"] == "nccl.all_reduce")
    assert nccl["measured"]["peak_busbw"] == 476.53 and nccl["started_at"] <= nccl["ended_at"]
    # The controller re-judges the stored evidence and agrees.
    code, judged = judge_file(tmp_path / "out" / "result.json", "h100-sxm-8")
    assert code == 0 and judged["passed"] is True
    assert {c["verdict"] for c in judged["checks"]} == {"pass"}


def test_failing_node(fx: Fx, healthy_tools: Path, fake_bin: FakeBin, fake_path: dict[str, str],
                      tmp_path: Path) -> None:
    fake_bin("ibstat", fx("infiniband/gpud_ibstat.47.0.h100.some.down.0_FAIL.txt"))
    fake_bin("dmesg", fx("xid/gpud_tail_dmesg.0.log"))
    fake_bin("dcgmi", fx("dcgm/h200x8_dcgmi-diag-r1_dcgm-3.1.8_persistence-mode-FAIL.txt"), 226)
    nvml = FakeNvml(_inventory(), xids=[NvmlXid(79, "00000000:18:00.0", 0)])
    result = _run(tmp_path, fake_path, nvml)
    verdicts = {c.name: c.verdict for c in result.checks}
    assert verdicts == {"gpu": "pass", "kernel_xid": "fail", "ib": "fail", "dcgm": "fail",
                        "nccl.all_reduce": "pass", "stress": "pass", "xid_events": "fail"}
    assert result.verdict == "fail"
    dcgm = next(c for c in result.checks if c.name == "dcgm")
    assert dcgm.exit_code == 226 and dcgm.measured["failed_tests"] == ["Persistence Mode"]
    code, judged = judge_file(tmp_path / "out" / "result.json", "h100-sxm-8")
    assert code == 1 and not judged["passed"]
    assert {c["name"] for c in judged["checks"] if c["verdict"] == "fail"} == {
        "kernel_xid", "ib.ports", "dcgm.tests", "xid_events"}


def test_missing_tools_and_no_gpu_are_errors(healthy_tools: Path, fake_path: dict[str, str],
                                             tmp_path: Path) -> None:
    (healthy_tools / "dcgmi").unlink()
    (healthy_tools / "ibstat").unlink()
    result = _run(tmp_path, fake_path, FakeNvml(unavailable="nvmlInit failed: Driver Not Loaded"), _no_torch)
    by = {c.name: c for c in result.checks}
    assert by["dcgm"].verdict == "error" and by["dcgm"].reason == "dcgmi not found on PATH"
    assert by["ib"].reason == "neither ibstat nor ibv_devinfo found on PATH"
    assert by["gpu"].verdict == "error" and "Driver Not Loaded" in by["gpu"].reason
    assert "nvidia-smi not found" in by["gpu"].reason
    assert by["stress"].verdict == "error" and by["stress"].reason == "torch is not installed"
    assert by["xid_events"].verdict == "error"
    assert by["nccl.all_reduce"].verdict == "pass"
    assert result.verdict == "error"
    code, judged = judge_file(tmp_path / "out" / "result.json", "h100-sxm-8")
    assert code == 1 and not judged["passed"]


def test_garbled_and_timed_out_tools(fx: Fx, healthy_tools: Path, fake_bin: FakeBin,
                                     fake_path: dict[str, str], tmp_path: Path) -> None:
    text = fx("nccl/h100x8_all_reduce_perf_single-node_nvls_issue290.txt").read_text()
    cut = tmp_path / "cut.txt"
    cut.write_text(text[: text.index("468.57") + 3])
    fake_bin("all_reduce_perf", cut, 1)
    fake_bin("ibstat", fx("dcgm/virtualclient/DCGMIDiag_r1_results.json"))  # wrong tool's output
    healthy = _run(tmp_path, fake_path)
    by = {c.name: c for c in healthy.checks}
    assert by["nccl.all_reduce"].verdict == "error"
    assert "truncated or garbled" in by["nccl.all_reduce"].reason and "exit 1" in by["nccl.all_reduce"].reason
    assert by["ib"].verdict == "error" and "not ibstat output" in by["ib"].reason


def test_healthy_output_with_nonzero_exit_is_not_trusted(fx: Fx, healthy_tools: Path, fake_bin: FakeBin,
                                                         fake_path: dict[str, str], tmp_path: Path) -> None:
    fake_bin("all_reduce_perf", fx("nccl/h100x8_all_reduce_perf_single-node_nvls_issue290.txt"), 3)
    by = {c.name: c for c in _run(tmp_path, fake_path).checks}
    assert by["nccl.all_reduce"].verdict == "error" and "exited 3" in by["nccl.all_reduce"].reason


def test_standard_level_runs_every_collective(healthy_tools: Path, fake_bin: FakeBin,
                                              fake_path: dict[str, str], fx: Fx, tmp_path: Path) -> None:
    for name in ("all_gather", "reduce_scatter"):
        fake_bin(f"{name}_perf", fx("nccl/h100x8_all_reduce_perf_single-node_nvls_issue290.txt"))
    result = _run(tmp_path, fake_path, level="standard")
    by = {c.name: c.verdict for c in result.checks}
    assert by["nccl.all_gather"] == "pass" and by["nccl.reduce_scatter"] == "pass"
    assert by["nccl.alltoall"] == "error"  # alltoall_perf is not installed
    assert "diag -r 2 -j" in (healthy_tools / "dcgmi.argv").read_text().splitlines()


def test_skip_is_recorded_as_error(healthy_tools: Path, fake_path: dict[str, str], tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = runner.run(H100, "quick", out, nvml=FakeNvml(_inventory()), stress=_good_stress,
                        tools=ToolRunner(out, env=fake_path), skip=("stress",))
    stress = next(c for c in result.checks if c.name == "stress")
    assert stress.verdict == "error" and "not a pass" in stress.reason
    assert result.verdict == "error"


def test_a_crashing_check_is_an_error(healthy_tools: Path, fake_path: dict[str, str], tmp_path: Path) -> None:
    def broken(seconds: float, size: int) -> StressReport:
        raise KeyError("surprise")

    by = {c.name: c for c in _run(tmp_path, fake_path, stress=broken).checks}
    assert by["stress"].verdict == "error" and "internal error in check: KeyError" in by["stress"].reason


def test_judge_against_another_profile_and_missing_checks(healthy_tools: Path, fake_path: dict[str, str],
                                                          tmp_path: Path) -> None:
    _run(tmp_path, fake_path)
    path = tmp_path / "out" / "result.json"
    code, judged = judge_file(path, "b200-8")
    assert code == 1
    failing = {c["name"] for c in judged["checks"] if c["verdict"] == "fail"}
    assert {"gpu.model", "nccl.all_reduce.single_node", "gpu.power_limit"} <= failing
    doc = json.loads(path.read_text())
    doc["checks"] = [c for c in doc["checks"] if c["kind"] != "dcgm"]
    path.write_text(json.dumps(doc))
    code, judged = judge_file(path, "h100-sxm-8")
    missing = next(c for c in judged["checks"] if c["name"] == "dcgm")
    assert code == 1 and missing["verdict"] == "error" and "result lacks it" in missing["reason"]


def test_judge_refuses_tampered_or_foreign_documents(healthy_tools: Path, fake_path: dict[str, str],
                                                     tmp_path: Path) -> None:
    _run(tmp_path, fake_path)
    path = tmp_path / "out" / "result.json"
    doc = json.loads(path.read_text())
    nccl = next(c for c in doc["checks"] if c["kind"] == "nccl")
    nccl["data"]["rows"][0]["busbw_oop"] = "fast"
    path.write_text(json.dumps(doc))
    code, judged = judge_file(path, "h100-sxm-8")
    bad = next(c for c in judged["checks"] if c["name"] == "nccl.all_reduce")
    assert code == 1 and bad["verdict"] == "error" and "stored data unreadable" in bad["reason"]
    path.write_text('{"schema": "something-else"}')
    assert judge_file(path, "h100-sxm-8")[0] == 2
    with pytest.raises(ResultFormatError, match="schema"):
        load_result("{}")
    with pytest.raises(ResultFormatError, match="not JSON"):
        load_result("{truncated")


def test_python_m_burnin_on_a_bare_node(fx: Fx, healthy_tools: Path, fake_bin: FakeBin,
                                        fake_path: dict[str, str], tmp_path: Path, repo_dir: Path) -> None:
    """As a node runs it: no racklife install, real (absent) NVML, nvidia-smi as fallback."""
    fake_bin("nvidia-smi", fx("nvidia-smi/thamada_H100SXMx8_nvidia-smi-q.txt"))
    env = fake_path | {"PYTHONPATH": str(repo_dir), "PATH": fake_path["PATH"]}
    proc = subprocess.run(
        [sys.executable, "-m", "burnin", "run", "--profile", "h100-sxm-8", "--level", "quick",
         "--out", str(tmp_path / "node")],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 1, proc.stderr
    doc = json.loads((tmp_path / "node" / "result.json").read_text())
    gpu = next(c for c in doc["checks"] if c["name"] == "gpu")
    assert gpu["tool"] == "nvidia-smi" and gpu["measured"]["source"] == "nvidia-smi"
    assert gpu["measured"]["serials"][0] == "1654423001593"
    # nvidia-smi cannot show NVLink state: that finding is an error, never a silent pass.
    nvlink = next(f for f in gpu["findings"] if f["name"] == "gpu.nvlink")
    assert nvlink["verdict"] == "error"
    assert "ERROR stress" in proc.stderr and "PASS  nccl.all_reduce" in proc.stderr


def test_nvidia_smi_fallback_reads_nvlink(fx: Fx, healthy_tools: Path, fake_path: dict[str, str],
                                          tmp_path: Path) -> None:
    smi = healthy_tools / "nvidia-smi"
    smi.write_text(
        "#!/bin/sh\n"
        f'if [ "$1" = nvlink ]; then /bin/cat "{fx("nvidia-smi/gpud_nvidia-smi-nvlink-status.a100x8.txt")}"; '
        f'else /bin/cat "{fx("nvidia-smi/thamada_H100SXMx8_nvidia-smi-q.txt")}"; fi\n')
    smi.chmod(0o755)
    result = _run(tmp_path, fake_path, FakeNvml(unavailable="nvmlInit failed: Driver Not Loaded"))
    gpu = next(c for c in result.checks if c.name == "gpu")
    found = {f.name: f for f in gpu.findings}
    assert gpu.measured["source"] == "nvidia-smi" and found["gpu.count"].verdict == "pass"
    # The capture is of an A100 board (12 links); an H100 profile wants 18.
    assert found["gpu.nvlink"].verdict == "fail" and found["gpu.nvlink"].measured["0"] == 12
    assert gpu.verdict == "fail"


def test_profile_file(tmp_path: Path, healthy_tools: Path, fake_path: dict[str, str], repo_dir: Path) -> None:
    text = (repo_dir / "burnin" / "profiles" / "h100-sxm-8.toml").read_text()
    lab = tmp_path / "lab-h100.toml"
    lab.write_text(text.replace('name = "h100-sxm-8"', 'name = "lab-h100"').replace(
        'quick = ["gpu", "kernel_xid", "ib", "dcgm", "nccl", "stress", "xid_events"]',
        'quick = ["kernel_xid", "ib", "dcgm", "nccl"]'))
    profile = profiles.load(str(lab))
    assert profile.name == "lab-h100" and profile.checks["quick"] == ("kernel_xid", "ib", "dcgm", "nccl")
    out = tmp_path / "out"
    result = runner.run(profile, "quick", out, nvml=FakeNvml(unavailable="no GPU"), stress=_no_torch,
                        tools=ToolRunner(out, env=fake_path))
    assert result.verdict == "pass" and [c.name for c in result.checks] == [
        "kernel_xid", "ib", "dcgm", "nccl.all_reduce"]
    assert judge_file(out / "result.json", str(lab))[0] == 0
    assert judge_file(out / "result.json", "h100-sxm-8")[0] == 1  # gpu, stress, xid_events missing
    with pytest.raises(profiles.ProfileError, match="cannot read"):
        profiles.load(str(tmp_path / "nope.toml"))


def test_racklife_burnin_cli(fx: Fx, healthy_tools: Path, fake_path: dict[str, str], tmp_path: Path) -> None:
    cli = CliRunner()
    res = cli.invoke(app, ["parse", "nccl", str(fx("nccl/h100x8_all_reduce_perf_single-node_nvls_issue290.txt")),
                           "--json"])
    assert res.exit_code == 0
    doc = json.loads(res.stdout)
    assert set(doc) >= {"collective", "ranks", "rows", "avg_busbw", "peak_busbw", "wrong_results"}
    assert set(doc["rows"][0]) >= {"size_bytes", "algbw_oop", "busbw_oop", "wrong_oop", "algbw_ip",
                                   "busbw_ip", "wrong_ip"}
    assert round(doc["avg_busbw"], 2) == 439.37
    res = cli.invoke(app, ["parse", "dcgm", str(fx("dcgm/virtualclient/DCGMIIncorrectresults.json")), "--json"])
    assert res.exit_code == 2 and json.loads(res.stdout)["verdict"] == "error"
    for kind, rel, keys in [
        ("dcgm", "dcgm/virtualclient/DCGMIDiag_r2_results.json", {"format", "level", "passed", "tests", "failed_gpus"}),
        ("ibstat", "infiniband/gpud_ibstat.47.0.h100.all.active.0.txt", {"cas"}),
        ("xid", "xid/gpud_tail_dmesg.0.log", {"events"}),
        ("nvidia-smi", "nvidia-smi/thamada_H100SXMx8_nvidia-smi-q.txt", {"driver_version", "cuda_version", "gpus"}),
    ]:
        res = cli.invoke(app, ["parse", kind, str(fx(rel)), "--json"])
        assert res.exit_code == 0 and keys <= set(json.loads(res.stdout)), kind
    _run(tmp_path, fake_path)
    res = cli.invoke(app, ["judge", str(tmp_path / "out" / "result.json"), "--profile", "h100-sxm-8", "--json"])
    assert res.exit_code == 0
    judged = json.loads(res.stdout)
    assert judged["passed"] is True
    assert set(judged["checks"][0]) == {"name", "verdict", "measured", "threshold", "reason"}
    # run through the Typer group: real (absent) NVML and CPU-only torch here → errors, exit 1.
    res = cli.invoke(app, ["run", "--profile", "h100-sxm-8", "--level", "quick", "--out",
                           str(tmp_path / "cli"), "--json"], env={"PATH": fake_path["PATH"]})
    assert res.exit_code == 1
    ran = json.loads(res.stdout)
    assert ran["verdict"] == "error" and ran["result"].endswith("result.json")
    assert {c["name"]: c["verdict"] for c in ran["checks"]}["nccl.all_reduce"] == "pass"
    res = cli.invoke(app, ["run", "--profile", "h999", "--out", str(tmp_path / "x")])
    assert res.exit_code == 2

"""Profiles and the judge: thresholds cite sources, and real captures get the right verdicts."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from burnin import profiles
from burnin.gpu_stress import GpuStressResult, StressReport
from burnin.judge import (
    judge_dcgm,
    judge_gpus,
    judge_ib,
    judge_nccl,
    judge_stress,
    judge_xid_events,
    judge_xid_log,
    nccl_scope,
)
from burnin.nvml import GpuHealth, GpuInventory, NvmlXid, healthy_gpu
from burnin.parsers import dcgm, infiniband, nccl, xid

Fx = Callable[[str], Path]
H100 = profiles.load("h100-sxm-8")
H200 = profiles.load("h200-sxm-8")


# --------------------------------------------------------------------------- profiles


def test_required_profiles_ship_and_load() -> None:
    assert {"h100-sxm-8", "h200-sxm-8", "a100-sxm-8", "b200-8"} <= set(profiles.available())
    for name in profiles.available():
        p = profiles.load(name)
        assert p.name == name and p.gpu.count == 8
        assert set(p.checks) == set(profiles.LEVELS)


@pytest.mark.parametrize("name", ["h100-sxm-8", "h200-sxm-8", "a100-sxm-8", "b200-8"])
def test_every_threshold_cites_a_source(repo_dir: Path, name: str) -> None:
    text = (repo_dir / "burnin" / "profiles" / f"{name}.toml").read_text()
    section = ""
    for line in text.splitlines():
        if m := re.match(r"^\[(\w+)\]", line):
            section = m.group(1)
        elif re.match(r"^\w+\s*=", line) and section not in ("", "checks"):
            assert "#" in line and len(line.split("#", 1)[1].strip()) > 10, f"{name}: uncited {line!r}"


def test_bad_profile_is_refused() -> None:
    with pytest.raises(profiles.ProfileError, match="unknown profile"):
        profiles.load("h100-pcie-1")
    text = (Path(profiles.__file__).parent / "h100-sxm-8.toml").read_text()
    with pytest.raises(profiles.ProfileError, match=r"gpu\.count"):
        profiles.from_toml(text.replace("count = 8", 'count = "eight"', 1))
    with pytest.raises(profiles.ProfileError, match="missing level"):
        profiles.from_toml(text.replace(", full = 3 }", " }", 1))


# --------------------------------------------------------------------------- NCCL


def test_degraded_two_node_h100_fails_multi_node_threshold(fx: Fx) -> None:
    r = nccl.parse(fx("nccl/h100x8_2node-16gpu_all_reduce_perf_ndr-ib_DEGRADED_issue290.txt").read_text(),
                   "all_reduce")
    assert nccl_scope(r, H100) == "multi_node"
    unchecked, f = judge_nccl(r, H100)
    # the capture ran with validation off (-c 0): that is an error beside the bandwidth failure
    assert unchecked.verdict == "error" and "were not checked" in unchecked.reason
    assert f.name == "nccl.all_reduce.multi_node"
    # best busbw at >= 1 GiB (the 167.87 peak is at 256 MiB); floor = 46 GB/s x 8 NICs
    assert (f.verdict, f.measured, f.threshold) == ("fail", 155.57, 368.0)
    assert "below 368.00 GB/s" in f.reason


def test_healthy_single_node_h100_passes(fx: Fx) -> None:
    r = nccl.parse(fx("nccl/h100x8_all_reduce_perf_single-node_nvls_issue290.txt").read_text(), "all_reduce")
    assert nccl_scope(r, H100) == "single_node"
    (f,) = judge_nccl(r, H100)
    assert (f.name, f.verdict, f.measured, f.threshold) == ("nccl.all_reduce.single_node", "pass", 476.53, 460.0)


def test_single_node_below_floor_fails(fx: Fx) -> None:
    r = nccl.parse(fx("nccl/h100x8_all_reduce_perf_single-node_nvls_issue290.txt").read_text(), "all_reduce")
    (f,) = judge_nccl(r, profiles.load("b200-8"))
    assert f.verdict == "fail" and f.threshold == 600.0


def test_nccl_incomplete_run_is_an_error_not_a_pass(fx: Fx) -> None:
    r = nccl.parse(fx("nccl/aws-p5_2node-16xH100_all_reduce_perf_efa-32x100G.txt").read_text(), "all_reduce")
    (f,) = judge_nccl(r, H100, "multi_node")
    assert f.verdict == "error" and "did not finish" in f.reason


def test_nccl_wrong_results_fail(fx: Fx) -> None:
    text = fx("nccl/h100x8_all_reduce_perf_single-node_nvls_issue290.txt").read_text()
    r = nccl.parse(text.replace("476.53      0", "476.53      2"), "all_reduce")
    f = next(f for f in judge_nccl(r, H100) if f.name == "nccl.all_reduce")
    assert f.verdict == "fail" and "wrong results" in f.reason


def test_nccl_small_sizes_only_is_an_error() -> None:
    r = nccl.NcclReport("all_reduce", 8, [nccl.NcclRow(8, 2, "float", "sum", -1, 1, 0, 0, 0, 1, 0, 0, 0)],
                        0.0, 0.0, 0, ["n"], 0, True, [])
    assert judge_nccl(r, H100)[0].verdict == "error"


# --------------------------------------------------------------------------- DCGM / IB / XID


def test_dcgm_persistence_failure_fails(fx: Fx) -> None:
    r = dcgm.parse(fx("dcgm/h200x8_dcgmi-diag-r1_dcgm-3.1.8_persistence-mode-FAIL.txt").read_text())
    found = {f.name: f for f in judge_dcgm(r, H200, "quick")}
    assert found["dcgm.level"].verdict == "pass"
    assert found["dcgm.tests"].verdict == "fail"
    assert "Persistence Mode: fail" in found["dcgm.tests"].reason and "[0, 1, 2, 3, 4, 5]" in found["dcgm.tests"].reason


def test_dcgm_level_too_low_fails(fx: Fx) -> None:
    r = dcgm.parse(fx("dcgm/h200x8_dcgmi-diag-r1_dcgm-3.1.8_persistence-mode-FAIL.txt").read_text())
    level = next(f for f in judge_dcgm(r, H200, "full") if f.name == "dcgm.level")
    assert (level.verdict, level.measured, level.threshold) == ("fail", 1, 3)


def test_dcgm_r3_passes_and_required_tests(fx: Fx) -> None:
    r = dcgm.parse(fx("dcgm/virtualclient/DCGMIDiag_r3_results.json").read_text())
    # a capture of a one-GPU machine: it passes a one-GPU profile, never the 8-GPU SKU's
    assert {f.verdict for f in judge_dcgm(r, H100, "full") if f.name == "dcgm.gpus"} == {"error"}
    one = replace(H100, gpu=replace(H100.gpu, count=1))
    assert {f.verdict for f in judge_dcgm(r, one, "full")} == {"pass"}
    strict = replace(one, dcgm=replace(H100.dcgm, required_tests=("pcie", "targeted power|targeted_power",
                                                                   "eud test")))
    found = {f.name: f.verdict for f in judge_dcgm(r, strict, "full")}
    assert found["dcgm.required.pcie"] == "pass" and found["dcgm.required.targeted_power"] == "pass"
    assert found["dcgm.required.eud_test"] == "fail"  # it was skipped


def test_ib_all_active_passes_and_some_down_fails(fx: Fx) -> None:
    ok = judge_ib(infiniband.parse(fx("infiniband/gpud_ibstat.47.0.h100.all.active.0.txt").read_text()), H100)
    assert [f.verdict for f in ok] == ["pass"]
    bad = judge_ib(infiniband.parse(fx("infiniband/gpud_ibstat.47.0.h100.some.down.0_FAIL.txt").read_text()), H100)
    assert bad[0].verdict == "fail"
    assert bad[0].reason == "ports not up: mlx5_2:1 Down/Disabled, mlx5_7:1 Down/Disabled, mlx5_8:1 Down/Disabled"


def test_ib_below_rate_fails(fx: Fx) -> None:
    r = infiniband.parse(fx("infiniband/gpud_ibstat.47.0.h100.all.active.0.txt").read_text())
    slow = replace(H100, ib=replace(H100.ib, rate_gbps=800.0))
    f = judge_ib(r, slow)[0]
    assert f.verdict == "fail" and f.reason.startswith("0 of 8 ports Active at >= 800")


def test_xid_logs(fx: Fx) -> None:
    (dbe,) = judge_xid_log(xid.parse(fx("xid/gpud_tail_dmesg.0.log").read_text()), H100)
    assert dbe.verdict == "fail" and dbe.measured == [48, 63, 94]
    assert "Xid 48 on 0000:19:00" in dbe.reason and "Xid 94" not in dbe.reason
    (gsp,) = judge_xid_log(xid.parse(fx("xid/gpud_dmesg-with-xid-119.log").read_text()), H100)
    assert gsp.verdict == "fail" and "GSP_RPC_TIMEOUT" in gsp.reason
    (clean,) = judge_xid_log(xid.parse("NVRM: Xid (PCI:0000:19:00): 13, pid=1, name=a, Graphics Exception\n"), H100)
    assert clean.verdict == "pass"


def test_xid_events_from_nvml() -> None:
    assert judge_xid_events([], H100)[0].verdict == "pass"
    (f,) = judge_xid_events([NvmlXid(79, "00000000:18:00.0", 0)], H100)
    assert (f.name, f.verdict) == ("xid_events", "fail") and "reboot" in f.reason


# --------------------------------------------------------------------------- GPUs


def _inv(gpus: list[GpuHealth], driver: str = "565.57.01") -> GpuInventory:
    return GpuInventory("nvml", driver, "12.7", "12.565.57.01", gpus)


def _healthy(n: int = 8) -> list[GpuHealth]:
    return [healthy_gpu(i, "NVIDIA H100 80GB HBM3") for i in range(n)]


def test_healthy_gpus_pass() -> None:
    found = judge_gpus(_inv(_healthy()), H100, expect_driver="565.57.01", expect_cuda="12.7")
    assert {f.name: f.verdict for f in found} == {
        "gpu.count": "pass", "gpu.model": "pass", "gpu.driver": "pass", "gpu.cuda": "pass",
        "gpu.ecc_mode": "pass", "gpu.ecc_uncorrectable": "pass", "gpu.memory_repair": "pass",
        "gpu.pcie_gen": "pass", "gpu.pcie_width": "pass", "gpu.throttle": "pass",
        "gpu.temperature": "pass", "gpu.power_limit": "pass", "gpu.nvlink": "pass"}


@pytest.mark.parametrize(
    ("change", "finding", "verdict", "text"),
    [
        ({"row_remap_pending": True}, "gpu.memory_repair", "fail", "row remap pending"),
        ({"row_remap_failure": True}, "gpu.memory_repair", "fail", "row remapping failed"),
        ({"ecc_uncorrected_volatile": 2}, "gpu.ecc_uncorrectable", "fail", "GPU 3"),
        ({"pcie_gen_max": 4}, "gpu.pcie_gen", "fail", "below"),
        ({"pcie_width_current": 8}, "gpu.pcie_width", "fail", "width"),
        ({"throttle_reasons": ["hw_power_brake_slowdown"]}, "gpu.throttle", "fail", "power_brake"),
        ({"temperature_c": 90.0}, "gpu.temperature", "fail", "90 C >= 85 C"),
        ({"power_limit_w": 500.0}, "gpu.power_limit", "fail", "500.0"),
        ({"nvlink_active": [True] * 16 + [False] * 2}, "gpu.nvlink", "fail", "16"),
        ({"nvlink_active": None}, "gpu.nvlink", "error", "not reported"),
        ({"ecc_enabled": False}, "gpu.ecc_mode", "fail", "ECC disabled"),
        ({"name": "NVIDIA H100 PCIe"}, "gpu.model", "fail", "NVIDIA H100 PCIe"),
        ({"temperature_c": None}, "gpu.temperature", "error", "not reported"),
        ({"row_remap_pending": None, "row_remap_failure": None}, "gpu.memory_repair", "error", "neither"),
    ],
)
def test_one_bad_gpu_fails_the_node(change: dict[str, object], finding: str, verdict: str, text: str) -> None:
    gpus = _healthy()
    gpus[3] = replace(gpus[3], **change)  # type: ignore[arg-type]
    found = {f.name: f for f in judge_gpus(_inv(gpus), H100)}
    assert found[finding].verdict == verdict
    assert text in found[finding].reason
    others = [f for f in found.values() if f.name != finding]
    assert all(f.verdict == "pass" for f in others)


def test_gpu_count_short_and_old_driver() -> None:
    found = {f.name: f for f in judge_gpus(_inv(_healthy(1), driver="470.82.01"), H100, expect_cuda="12.4")}
    assert (found["gpu.count"].verdict, found["gpu.count"].reason) == ("fail", "1 of 8 GPUs present")
    assert found["gpu.driver"].verdict == "fail" and "older than 520.61.05" in found["gpu.driver"].reason
    assert found["gpu.cuda"].verdict == "fail"


def test_pre_hopper_page_retirement() -> None:
    a100 = profiles.load("a100-sxm-8")
    gpus = [replace(healthy_gpu(i, "NVIDIA A100-SXM4-80GB", links=12, pcie_gen=4), row_remap_pending=None,
                    row_remap_failure=None, retired_pages_pending=(i == 5), power_limit_w=400.0)
            for i in range(8)]
    f = next(f for f in judge_gpus(_inv(gpus), a100) if f.name == "gpu.memory_repair")
    assert f.verdict == "fail" and "GPU 5: page retirement pending" in f.reason


# --------------------------------------------------------------------------- stress


def _stress(**change: object) -> StressReport:
    g = GpuStressResult(index=0, name="NVIDIA H200", h2d_gbps=55.0, d2h_gbps=55.0, hbm_gbps=4300.0,
                        copy_verified=True, gemm_tflops=780.0, gemm_iterations=1000, gemm_mismatches=0,
                        gemm_reference_ok=True, gemm_reference_max_rel_error=0.004, soak_seconds=20.0)
    gpus = [replace(g, index=i, **change) if i == 0 else replace(g, index=i) for i in range(8)]  # type: ignore[arg-type]
    return StressReport("2.11.0", "13.0", "cuda", "bfloat16", 8192, 1 << 30, gpus)


def test_stress_verdicts() -> None:
    assert {f.verdict for f in judge_stress(_stress(), H200)} == {"pass"}
    found = {f.name: f for f in judge_stress(_stress(gemm_mismatches=1), H200)}
    assert found["stress.verified"].verdict == "fail" and "1 GEMM results differ" in found["stress.verified"].reason
    found = {f.name: f for f in judge_stress(_stress(gemm_reference_ok=False), H200)}
    assert "CPU reference" in found["stress.verified"].reason
    found = {f.name: f for f in judge_stress(_stress(hbm_gbps=3000.0), H200)}
    assert found["stress.hbm_gbps"].verdict == "fail"
    found = {f.name: f for f in judge_stress(_stress(gemm_tflops=None, errors=["RuntimeError: CUDA OOM"]), H200)}
    assert found["stress.gemm_tflops"].verdict == "error" and "OOM" in found["stress.gemm_tflops"].reason


@pytest.mark.parametrize(("gpus", "device_type", "words"), [
    (1, "cuda", "1 distinct GPU(s) stressed"),  # CUDA_VISIBLE_DEVICES=0: it passed on the old judge
    (7, "cuda", "7 distinct GPU(s) stressed"),
    (8, "cpu", "ran on 'cpu'"),
])
def test_stress_of_fewer_gpus_than_the_sku_has_or_not_on_the_gpus_is_an_error(gpus: int, device_type: str,
                                                                             words: str) -> None:
    full = _stress()
    report = replace(full, device_type=device_type, gpus=full.gpus[:gpus])
    found = {f.name: f for f in judge_stress(report, H200)}
    assert found["stress.gpus"].verdict == "error" and words in found["stress.gpus"].reason
    assert {f.verdict for n, f in found.items() if n != "stress.gpus"} == {"pass"}

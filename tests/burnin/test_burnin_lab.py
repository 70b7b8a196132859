"""``burnin run`` on a lab node, once per fault profile: each fault gives the right verdicts.

The lab's simulated nodes (``lifecycle.lab.gputools``) answer as nvidia-smi, dcgmi,
nccl-tests, ibstat and dmesg in the real formats. They have no GPU, so NVML and torch are
absent; the profile used here is the H100 profile with the GPU-only checks (stress, NVML
Xid events) left out and no NVLink required, written as a profile file the way a site
would. Everything else is the shipped H100 thresholds.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from burnin import profiles, runner
from burnin.cli import judge_file
from burnin.gpu_stress import StressReport, StressUnavailable
from burnin.nvml import FakeNvml
from burnin.tools import ToolRunner
from lifecycle.lab.gputools.cli import install


def _no_torch(seconds: float, size: int) -> StressReport:
    raise StressUnavailable("the lab has no GPU")


@pytest.fixture(scope="module")
def lab_profile(tmp_path_factory: pytest.TempPathFactory, repo_dir: Path) -> Path:
    text = (repo_dir / "burnin" / "profiles" / "h100-sxm-8.toml").read_text()
    gpu_only = '["gpu", "kernel_xid", "ib", "dcgm", "nccl", "stress", "xid_events"]'
    assert text.count(gpu_only) == 3
    text = text.replace(gpu_only, '["gpu", "kernel_xid", "ib", "dcgm", "nccl"]')
    text = text.replace('name = "h100-sxm-8"', 'name = "lab-h100"')
    text = text.replace("nvlink_active_links = 18 ", "nvlink_active_links = 0 ", 1)
    path = tmp_path_factory.mktemp("profile") / "lab-h100.toml"
    path.write_text(text)
    return path


@pytest.mark.slow
@pytest.mark.parametrize(
    ("fault", "level", "verdicts"),
    [
        ("healthy", "quick", {}),
        ("xid79", "quick", {"kernel_xid": "fail", "gpu": "error", "nccl.all_reduce": "error"}),
        ("ecc", "quick", {"gpu": "fail", "kernel_xid": "fail", "dcgm": "fail", "nccl.all_reduce": "error"}),
        ("pcie-degraded", "quick", {"gpu": "fail"}),
        ("slow-nvlink", "quick", {"nccl.all_reduce": "fail"}),
        ("ib-down", "quick", {"ib": "fail"}),
        ("dcgm-power", "quick", {}),  # targeted power is a level-3 test: quick (r1) cannot see it
        ("dcgm-power", "full", {"dcgm": "fail"}),
    ],
)
def test_lab_node_fault_profiles(tmp_path: Path, lab_profile: Path, fault: str, level: str,
                                 verdicts: dict[str, str]) -> None:
    node = tmp_path / "gpu-a01"
    (node / "bin").mkdir(parents=True)
    (node / "node.json").write_text(json.dumps({
        "name": "gpu-a01", "gpu_model": "NVIDIA H100 80GB HBM3", "gpu_count": 8,
        "ib_ports": 8, "ib_rate_gbps": 400}))
    (node / "fault.json").write_text(json.dumps({"profile": fault, "gpu": 2}))
    install(node / "bin")
    out = tmp_path / "out"
    profile = profiles.load(str(lab_profile))
    result = runner.run(profile, level, out, nvml=FakeNvml(unavailable="no NVML in the lab"),
                        stress=_no_torch, tools=ToolRunner(out, env={"PATH": str(node / "bin")}))
    got = {c.name: c.verdict for c in result.checks if c.verdict != "pass"}
    assert got == verdicts, {c.name: c.reason for c in result.checks if c.verdict != "pass"}
    expected = "pass" if not verdicts else ("fail" if "fail" in verdicts.values() else "error")
    assert result.verdict == expected
    code, judged = judge_file(out / "result.json", str(lab_profile))
    assert judged["passed"] is (expected == "pass") and code == (0 if expected == "pass" else 1)

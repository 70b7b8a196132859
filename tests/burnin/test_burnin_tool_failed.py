"""A tool that printed valid output and then failed is an error for its check, in its own words.

ibstat ending in ``ibpanic:`` (exit 255), nvidia-smi losing one GPU's handle, dcgmi
printing ``Error:`` after a partial table, and a kernel log that is empty or unreadable.
Each is run through ``burnin run`` with the captured output behind a fake tool.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from burnin import profiles, runner
from burnin.gpu_stress import StressReport, StressUnavailable
from burnin.nvml import FakeNvml, GpuInventory, healthy_gpu
from burnin.parsers import ParseError, infiniband, nvidia_smi, xid
from burnin.result import CheckResult
from burnin.tools import ToolRunner

Fx = Callable[[str], Path]
FakeBin = Callable[[str, Path | None, int], Path]
H100 = profiles.load("h100-sxm-8")
IBPANIC = "infiniband/gpud_ibstat.39.0.a100.failed.ibpanic.exit-255.0_FAIL.txt"
SMI_LOST = "nvidia-smi/CONSTRUCTED_h100x8_nvidia-smi_device-handle-error-gpu3.txt"


def _no_stress(seconds: float, size: int) -> StressReport:
    raise StressUnavailable("not part of this test")


def _check(name: str, tmp_path: Path, env: dict[str, str]) -> CheckResult:
    """``burnin run`` at the quick level; only the check under test is looked at."""
    inv = GpuInventory("nvml", "565.57.01", "12.7", "12.565.57.01",
                       [healthy_gpu(i, "NVIDIA H100 80GB HBM3") for i in range(8)])
    out = tmp_path / "out"
    result = runner.run(H100, "quick", out, nvml=FakeNvml(inv), stress=_no_stress,
                        tools=ToolRunner(out, env=env), host="node005")
    return next(c for c in result.checks if c.name == name)


def test_ibstat_ending_in_ibpanic_is_an_error(nfx: Fx) -> None:
    with pytest.raises(ParseError, match=r"ibstat reported: ibpanic: \[1400444\] main: stat of IB device 'mlx5_8'"):
        infiniband.parse(nfx(IBPANIC).read_text())


def test_ibpanic_check_reason_quotes_the_tool(nfx: Fx, fake_bin: FakeBin, fake_path: dict[str, str],
                                             tmp_path: Path) -> None:
    fake_bin("ibstat", nfx(IBPANIC), 255)
    check = _check("ib", tmp_path, fake_path)
    assert check.verdict == "error" and check.exit_code == 255
    assert "ibpanic: [1400444] main: stat of IB device 'mlx5_8' failed: No such file or directory" in check.reason


def test_a_stray_line_in_ibstat_output_is_an_error(fx: Fx) -> None:
    text = fx("infiniband/gpud_ibstat.47.0.h100.all.active.0.txt").read_text()
    with pytest.raises(ParseError, match="not a line of ibstat output"):
        infiniband.parse(text.rstrip("\n") + "\nSegmentation fault (core dumped)\n")


def test_nvidia_smi_that_lost_one_gpu_handle_is_an_error(nfx: Fx) -> None:
    text = nfx(SMI_LOST).read_text()
    assert text.count("NVIDIA H100 80GB HBM3") == 7  # the table itself reads as a healthy 7-GPU node
    with pytest.raises(ParseError, match=re.escape("nvidia-smi reported: Unable to determine the device handle for "
                                                   "GPU0000:5D:00.0: Unknown Error")):
        nvidia_smi.parse(text)


def test_nvidia_smi_handle_error_in_q_output(fx: Fx) -> None:
    text = fx("nvidia-smi/thamada_H100SXMx8_nvidia-smi-q.txt").read_text()
    with pytest.raises(ParseError, match="device handle"):
        nvidia_smi.parse(text.replace("\nGPU 00000000:5D:00.0\n",
                                      "\nUnable to determine the device handle for gpu 0000:5D:00.0: GPU is lost.\n"))


@pytest.mark.parametrize("log", ["", "\n\n", "   \n"])
def test_empty_kernel_log_is_an_error_not_no_xids(log: str) -> None:
    with pytest.raises(ParseError, match="kernel log is empty"):
        xid.parse(log)


def test_unreadable_kernel_log_is_an_error(fake_bin: FakeBin, fake_path: dict[str, str], tmp_path: Path) -> None:
    with pytest.raises(ParseError, match="could not be read: dmesg: read kernel buffer failed"):
        xid.parse("dmesg: read kernel buffer failed: Operation not permitted\n")
    fake_bin("dmesg", None, 0)  # prints nothing, exits 0
    check = _check("kernel_xid", tmp_path, fake_path)
    assert check.verdict == "error" and "kernel log is empty" in check.reason


def test_dcgmi_error_after_partial_table_is_a_check_error(nfx: Fx, fake_bin: FakeBin, fake_path: dict[str, str],
                                                         tmp_path: Path) -> None:
    text = nfx("dcgm/a10g-x4_dcgmi-diag-r3_dcgm-3.3.9_targeted-power-FAIL_repo-unidentified.txt").read_text()
    partial = tmp_path / "dcgmi.out"
    partial.write_text(text[: text.index("| Targeted Power")]
                       + "Error: Unable to complete diagnostic for group 2147483647. Return: (-15) : Timeout\n")
    fake_bin("dcgmi", partial, 0)
    check = _check("dcgm", tmp_path, fake_path)
    assert check.verdict == "error"
    assert "Error: Unable to complete diagnostic for group 2147483647. Return: (-15) : Timeout" in check.reason


def test_ibstat_ca_listing_fewer_ports_than_it_announces_is_an_error(fx: Fx) -> None:
    text = fx("infiniband/gpud_ibstat.47.0.h100.all.active.0.txt").read_text()
    assert infiniband.parse(text).cas[0].ports_announced == 1
    with pytest.raises(ParseError, match="announces 2 port"):
        infiniband.parse(text.replace("Number of ports: 1", "Number of ports: 2", 1))


def test_nvidia_smi_q_cut_inside_the_last_gpu_is_an_error(fx: Fx) -> None:
    text = fx("nvidia-smi/gpud_nvidia-smi-query.535.161.08.h100x8.txt").read_text()
    last = text.rindex("\nGPU 00000000:")
    with pytest.raises(ParseError, match="GPU section 7 has no Processes entry"):
        nvidia_smi.parse(text[: text.index("    Temperature", last)])


@pytest.mark.parametrize("text", [
    "1,Xid 1,CONTACT_SUPPORT,FATAL\n2,Xid 2,CONTACT_SUPPORT,FATAL\n",  # a CSV, not a kernel log
    "NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.90.07\n",   # no timestamp: not dmesg's output
])
def test_text_that_is_not_a_kernel_log_is_an_error(text: str) -> None:
    with pytest.raises(ParseError, match="not a kernel log"):
        xid.parse(text)


@pytest.mark.parametrize("line", [
    "[    4.216530] nvidia-nvlink: Nvlink Core is being initialized",
    "[Sun Feb 23 16:24:18 2025] NVRM: GPU Board Serial Number: 1650124014249",
    "2024-11-15T05:39:15,491363+00:00 nvidia-peermem loaded",
    "Feb 23 16:24:18 node005 kernel: NVRM: loading NVIDIA UNIX x86_64 Kernel Module",
    "kern  :info  : [    4.216530] nvidia-nvlink: Nvlink Core is being initialized",
])
def test_kernel_log_line_forms_read_as_a_clean_log(line: str) -> None:
    assert xid.parse(line + "\n").events == []

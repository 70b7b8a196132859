"""Tool versions: what a tool printed counts only when it answered the question (exit 0, a version number).

The report read "nvidia-smi Invalid combination of input arguments" and "dcgmi Usage…": the first
line a tool printed was taken as its version. The tools here are real executables on PATH that
answer the way the lab's stand-ins (and old drivers) do.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from burnin import versions
from burnin.tools import ToolRunner


def _tool(bin_dir: Path, name: str, body: str) -> None:
    path = bin_dir / name
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def test_a_version_only_when_the_tool_answered(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _tool(bin_dir, "dcgmi", 'echo "Usage: dcgmi diag -r <1|2|3|4> [-j]"; exit 2')
    _tool(bin_dir, "nvidia-smi", 'case "$1" in --query-gpu=driver_version) echo 550.54.15; echo 550.54.15;; '
                                 '*) echo "Invalid combination of input arguments: $*"; exit 2;; esac')
    _tool(bin_dir, "ibstat", 'echo "ibstat BUILD VERSION: 47.0"')
    _tool(bin_dir, "dmesg", 'echo "dmesg: unrecognized option"; exit 0')
    tools = ToolRunner(tmp_path / "out", env=dict(os.environ) | {"PATH": str(bin_dir)})
    assert tools.version("nvidia-smi") == ("550.54.15", None)
    assert tools.version("ibstat") == ("ibstat BUILD VERSION: 47.0", None)
    assert tools.version("dcgmi") == (None, "`dcgmi --version` exited 2: Usage: dcgmi diag -r <1|2|3|4> [-j]")
    assert tools.version("dmesg") == (None, "`dmesg --version` printed no version number (dmesg: unrecognized "
                                            "option)")
    assert tools.version("all_reduce_perf")[0] is None and "no version option" in str(tools.version("all_reduce_perf")[1])
    assert tools.version("ibv_devinfo") == (None, "ibv_devinfo not found on PATH")


def test_nccl_tests_say_their_version_in_their_output() -> None:
    assert versions.nccl_from_output("# nccl-tests version 2.13.9 nccl-headers=21903\n# nThread 1") == \
        "nccl-tests 2.13.9"
    assert versions.nccl_from_output("node: NCCL INFO NCCL version 2.19.3+cuda12.3\n") == "NCCL 2.19.3+cuda12.3"
    assert versions.nccl_from_output("# nThread 1 nGpus 8 minBytes 1\n") is None

"""How long a fake tool takes to answer, when the lab is asked to take a real tool's time.

The fake tools answer at once, which keeps tests fast but makes a lab burn-in a poor
yardstick: racklife's own overhead (command start, SSH, judging, reports) would be
measured against seconds of interpreter start instead of minutes of diagnostics. With a
**time scale** the tools wait ``scale x`` the time the real tool takes before they answer
(1.0: real durations; 0.1: a tenth; 0, the default: at once).

The scale comes from ``RACKLIFE_LAB_TOOL_TIME_SCALE`` when set, else from
``tool-time.json`` in the directory that holds the node directories (``nodes/``), read on
every call like a node's fault, so a running lab can be switched. SSH does not carry the
controller's environment to a node, hence the file. The file may also override any
duration below: ``{"scale": 1.0, "seconds": {"dcgmi.r1": 45}}``.

Durations, for an 8-GPU node:

* ``dcgmi diag``: r2 about 2 min, r3 about 15 min (DCGM's dcgmi-diag reference, cited in
  ``fixtures/SOURCES.md`` "DCGM diagnostics behaviour"); r4: the AWS suite's 2.25 h bound
  for L4 on 8-GPU instances (same section). r1 is "seconds" in that reference and about
  a minute in practice on an 8-GPU node (project estimate, not measured here): 30 s.
* nccl-tests: derived from the run's own table, as the real binary spends it: every size
  runs ``warmup + iters x agg`` times out of place and again in place, at the printed
  per-iteration time (the table is calibrated on the capture
  ``fixtures/nccl/h100x8_all_reduce_perf_single-node_nvls_issue290.txt``), plus
  communicator setup, 10 s (project estimate: process start, CUDA contexts on 8 GPUs,
  NCCL bootstrap and topology search; not measured here).
* ``nvidia-smi``, ``ibstat``, ``ibv_devinfo``, ``dmesg``: 2, 0.2, 0.2 and 0.1 s
  (project estimates; ``nvidia-smi -q`` on 8 GPUs queries every device through NVML);
  a ``--version`` probe of any tool: 0.1 s. ``nvidia-smi -r`` of an 8-GPU node: 20 s (project
  estimate: a function-level reset of each GPU and the driver's re-initialisation; not measured here).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path

ENV = "RACKLIFE_LAB_TOOL_TIME_SCALE"
TIME_FILE = "tool-time.json"

SECONDS: dict[str, float] = {
    "dcgmi.r1": 30.0,
    "dcgmi.r2": 120.0,
    "dcgmi.r3": 900.0,
    "dcgmi.r4": 8100.0,
    "nccl.init": 10.0,
    "nvidia-smi": 2.0,
    "nvidia-smi.reset": 20.0,
    "ibstat": 0.2,
    "ibv_devinfo": 0.2,
    "dmesg": 0.1,
    "version": 0.1,
}

_ITERS_RE = re.compile(r"warmup iters: (\d+) iters: (\d+)(?: agg iters: (\d+))?")


def write(nodes_dir: Path, scale: float, seconds: Mapping[str, float] | None = None) -> Path:
    """Set the lab's time scale (0: answer at once) and optional per-tool durations."""
    if scale < 0:
        raise ValueError(f"time scale must be >= 0, not {scale}")
    unknown = sorted(set(seconds or {}) - set(SECONDS))
    if unknown:
        raise ValueError(f"unknown tool duration(s): {', '.join(unknown)} (known: {', '.join(SECONDS)})")
    path = nodes_dir / TIME_FILE
    path.write_text(json.dumps({"scale": scale, "seconds": dict(seconds or {})}, indent=2) + "\n", encoding="utf-8")
    return path


def settings(node_dir: Path, env: Mapping[str, str] | None = None) -> tuple[float, dict[str, float]]:
    """The scale and the durations in force for tools of ``node_dir`` (scale 0 when nothing is set)."""
    env = os.environ if env is None else env
    table = dict(SECONDS)
    scale = 0.0
    path = node_dir.parent / TIME_FILE
    if path.is_file():
        doc = json.loads(path.read_text(encoding="utf-8"))
        scale = float(doc.get("scale", 0.0))
        table.update({k: float(v) for k, v in (doc.get("seconds") or {}).items() if k in SECONDS})
    if env.get(ENV):
        scale = float(env[ENV])
    return max(0.0, scale), table


def nccl_seconds(output: str, init_s: float) -> float:
    """What a real nccl-tests run that printed ``output`` took: setup, then every size's iterations."""
    m = _ITERS_RE.search(output)
    if m is None:
        return init_s
    runs = int(m.group(1)) + int(m.group(2)) * int(m.group(3) or 1)
    total_us = 0.0
    for line in output.splitlines():
        fields = line.split()
        if line.startswith("#") or len(fields) < 13 or not fields[0].isdigit():
            continue
        total_us += float(fields[5]) + float(fields[9])  # out-of-place and in-place time per iteration
    return init_s + total_us * runs / 1e6


def tool_seconds(tool: str, argv: list[str], output: str, table: Mapping[str, float]) -> float:
    """The real tool's duration for this call, before scaling."""
    if "--version" in argv or argv in (["-v"], ["-V"]):
        return table["version"]
    if tool.endswith("_perf") or tool == "mpirun":  # mpirun takes as long as the run it launched
        return nccl_seconds(output, table["nccl.init"]) if output.strip() else 0.0
    if tool == "dcgmi":
        level = next((argv[i + 1] for i, a in enumerate(argv[:-1]) if a in ("-r", "--run")), "")
        return table.get(f"dcgmi.r{level}", 0.0)
    return table.get(tool, 0.0)

"""Build realistic burn-in results for a rack from the shared captures.

Each node's checks carry data parsed by burnin's own parsers from real captured output
(nccl-tests on 8x H100, ibstat from H100 nodes, ``dcgmi diag -r 1 -j``, ``nvidia-smi -q``
of an HGX H100). Nodes differ the way a real rack does: the captured nccl-tests table is
rescaled by a few per mille per node (peers are never identical), and faults are the
captured failing outputs (the ibstat with ports down) or a rescaled table (slow NVLink).
GPU stress has no public capture (it is racklife's own torch soak), so its per-GPU
numbers are drawn near the H200/H100 figures in the project's measured notes.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import pytest

from acceptance.judge import NodeInput
from burnin import judge as bj
from burnin import profiles
from burnin.gpu_stress import GpuStressResult, StressReport
from burnin.nvml import GpuHealth, GpuInventory
from burnin.parsers import dcgm, infiniband, nccl, nvidia_smi
from burnin.parsers.xid import XidReport
from burnin.result import CheckResult, Finding, RunResult, worst

PROFILE = "h100-sxm-8"
T0 = "2026-11-30T02:00:00.000Z"
T1 = "2026-11-30T02:09:30.000Z"


@dataclass(frozen=True)
class NodeSpec:
    name: str
    busbw_scale: float = 1.0
    ib_down: bool = False
    nvlink_links_gpu3: int = 18
    missing_result: bool = False
    drop_check: str | None = None


def scale_nccl(text: str, factor: float) -> str:
    """The captured table with every algbw/busbw scaled (time scaled inversely); layout unchanged."""
    out = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 13 and parts[0].isdigit():
            for i in (5, 9):
                parts[i] = f"{float(parts[i]) / factor:.1f}"
            for i in (6, 7, 10, 11):
                parts[i] = f"{float(parts[i]) * factor:.2f}"
            line = "  " + " ".join(f"{p:>10}" for p in parts)
        out.append(line)
    return "\n".join(out) + "\n"


@functools.cache
def _smi(path: Path) -> nvidia_smi.SmiReport:
    return nvidia_smi.parse(path.read_text())


class RackBuilder:
    def __init__(self, fixtures: Path, out: Path) -> None:
        self.fx = fixtures
        self.out = out
        self.profile = profiles.load(PROFILE)
        self.nccl_text = (fixtures / "nccl/h100x8_all_reduce_perf_single-node_nvls_issue290.txt").read_text()
        self.smi = _smi(fixtures / "nvidia-smi/thamada_H100SXMx8_nvidia-smi-q.txt")
        self.dcgm_text = (fixtures / "dcgm/virtualclient/DCGMIDiag_r1_results.json").read_text()
        self.ib_ok = (fixtures / "infiniband/gpud_ibstat.47.0.h100.all.active.0.txt").read_text()
        self.ib_down = (fixtures / "infiniband/gpud_ibstat.47.0.h100.some.down.0_FAIL.txt").read_text()

    def _check(self, node_dir: Path, name: str, kind: str, tool: str, version: str, argv: list[str],
               raw: str | None, findings: list[Finding], data: object, options: dict[str, object]) -> CheckResult:
        raw_rel = None
        if raw is not None:
            raw_rel = f"raw/{name}.out"
            (node_dir / raw_rel).write_text(raw)
        return CheckResult(name=name, kind=kind, verdict=worst([f.verdict for f in findings]),
                           reason="; ".join(f.reason for f in findings if f.verdict != "pass"),
                           tool=tool, tool_version=version, argv=argv, started_at=T0, ended_at=T1,
                           exit_code=0, raw_output=raw_rel, data=data, findings=findings, options=options)

    def node(self, spec: NodeSpec, seed: int) -> tuple[RunResult, Path]:
        p = self.profile
        node_dir = self.out / spec.name
        (node_dir / "raw").mkdir(parents=True, exist_ok=True)
        rng = random.Random(seed)
        gpus = [GpuHealth(index=g.index, name=g.name, serial=g.serial, uuid=g.uuid, pci_bus_id=g.pci_bus_id,
                          architecture="Hopper", ecc_enabled=g.ecc_mode == "Enabled",
                          ecc_uncorrected_volatile=g.ecc_uncorrected_volatile,
                          ecc_uncorrected_aggregate=g.ecc_uncorrected_aggregate,
                          row_remap_pending=g.remapped_rows_pending, row_remap_failure=g.remapped_rows_failure,
                          pcie_gen_current=g.pcie_gen_current, pcie_gen_max=g.pcie_gen_max,
                          pcie_width_current=g.pcie_width_current, pcie_width_max=g.pcie_width_max,
                          throttle_reasons=list(g.throttle_reasons), temperature_c=g.temperature_c,
                          temperature_slowdown_c=87.0, power_limit_w=g.power_limit_w,
                          power_default_limit_w=g.power_default_limit_w,
                          nvlink_active=[i < (spec.nvlink_links_gpu3 if g.index == 3 else 18) for i in range(18)])
                for g in self.smi.gpus]
        inv = GpuInventory("nvml", self.smi.driver_version, self.smi.cuda_version, "12.565.57.01", gpus)
        checks = [self._check(node_dir, "gpu", "gpu", "nvml", "12.565.57.01", [], None,
                              bj.judge_gpus(inv, p), asdict(inv), {})]
        checks.append(self._check(node_dir, "kernel_xid", "kernel_xid", "dmesg", "dmesg from util-linux 2.38.1",
                                  ["dmesg"], "", bj.judge_xid_log(XidReport([]), p), asdict(XidReport([])), {}))
        ib_text = self.ib_down if spec.ib_down else self.ib_ok
        ib = infiniband.parse(ib_text)
        checks.append(self._check(node_dir, "ib", "ib", "ibstat", "ibstat BUILD VERSION: 47.0", ["ibstat"],
                                  ib_text, bj.judge_ib(ib, p), asdict(ib), {}))
        dr = dcgm.parse(self.dcgm_text)
        dr.level, dr.level_inferred = 1, False
        checks.append(self._check(node_dir, "dcgm", "dcgm", "dcgmi", "3.1.8", ["dcgmi", "diag", "-r", "1", "-j"],
                                  self.dcgm_text, bj.judge_dcgm(dr, p, "quick"), asdict(dr), {"level": 1}))
        factor = spec.busbw_scale * (1 + rng.uniform(-0.004, 0.004))
        nccl_text = scale_nccl(self.nccl_text, factor)
        nr = nccl.parse(nccl_text, "all_reduce")
        checks.append(self._check(node_dir, "nccl.all_reduce", "nccl", "all_reduce_perf", "nccl-tests 2.13.9",
                                  ["all_reduce_perf", "-b", "1G", "-e", "8G", "-f", "2", "-g", "8"], nccl_text,
                                  bj.judge_nccl(nr, p, "single_node"), asdict(nr),
                                  {"collective": "all_reduce", "scope": "single_node"}))
        stress = StressReport("2.5.1", "12.4", "cuda", "bfloat16", 8192, 1 << 30, [
            GpuStressResult(index=i, name="NVIDIA H100 80GB HBM3", h2d_gbps=rng.gauss(55.2, 0.3),
                            d2h_gbps=rng.gauss(55.6, 0.3), hbm_gbps=rng.gauss(2990, 8), copy_verified=True,
                            gemm_tflops=rng.gauss(765, 4), gemm_iterations=2400, gemm_reference_ok=True,
                            gemm_reference_max_rel_error=0.004, soak_seconds=20.0)
            for i in range(8)])
        checks.append(self._check(node_dir, "stress", "stress", "torch", "torch 2.5.1 (CUDA 12.4)", [], None,
                                  bj.judge_stress(stress, p), asdict(stress), {"seconds": 20.0, "gemm_size": 8192}))
        checks.append(self._check(node_dir, "xid_events", "xid_events", "nvml", "12.565.57.01", [], None,
                                  bj.judge_xid_events([], p), {"events": []}, {}))
        if spec.drop_check:
            checks = [c for c in checks if c.kind != spec.drop_check]
        result = RunResult(profile=PROFILE, level="quick", host=spec.name, started_at=T0, ended_at=T1,
                           verdict=worst([c.verdict for c in checks]), checks=checks, burnin_version="0.1.0")
        result.write(node_dir / "result.json")
        return result, node_dir


# The lab rack of the issue: 8 nodes, 2 with faults; plus one that clears the floor but trails its peers.
RACK8 = [
    NodeSpec("gpu-a01"), NodeSpec("gpu-a02"), NodeSpec("gpu-a03", nvlink_links_gpu3=12, busbw_scale=0.80),
    NodeSpec("gpu-a04"), NodeSpec("gpu-a05", ib_down=True), NodeSpec("gpu-a06"),
    NodeSpec("gpu-a07", busbw_scale=0.97), NodeSpec("gpu-a08"),
]


@pytest.fixture(scope="session")
def rack8(
    fixtures_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Callable[[list[NodeSpec] | None], list[tuple[NodeInput, Path]]]:
    """Build a rack's results (each call in a fresh directory); the node directories are read-only by convention."""

    def build(specs: list[NodeSpec] | None = None) -> list[tuple[NodeInput, Path]]:
        builder = RackBuilder(fixtures_dir, tmp_path_factory.mktemp("results"))
        out = []
        for pos, spec in enumerate(specs or RACK8, start=1):
            result, node_dir = builder.node(spec, seed=pos)
            if spec.missing_result:
                out.append((NodeInput(spec.name, PROFILE, None, "ssh: connection refused", pos, "rack-a"), node_dir))
            else:
                out.append((NodeInput(spec.name, PROFILE, result, None, pos, "rack-a"), node_dir))
        return out

    return build


@pytest.fixture
def node_spec() -> type[NodeSpec]:
    return NodeSpec


@pytest.fixture
def rack8_specs() -> list[NodeSpec]:
    return list(RACK8)


def whole_aws_p5(aws_excerpt: str) -> str:
    """The AWS p5 capture made a whole log: the excerpt (SOURCES.md) starts at the column header
    and stops after the last row, so it lacks what nccl-tests always prints around the rows, and
    the judge (fail closed) will not pass a run that does not show them: the device list (16
    ranks, 8 per node; host names constructed) and the out-of-bounds and average lines."""
    ranks = "".join(f"0: #  Rank {r:>2} Group  0 Pid {4000 + r:>6} on {('p5-a', 'p5-b')[r // 8]:>10} device {r % 8:>2} "
                    f"[0x{r:02x}] NVIDIA H100 80GB HBM3\n" for r in range(16))
    return ("0: # Using devices\n" + ranks + "0: #\n" + aws_excerpt
            + "0: # Out of bounds values : 0 OK\n0: # Avg bus bandwidth    : 187.3\n")

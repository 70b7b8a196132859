"""The checks ``burnin run`` performs: each collects evidence, parses it, and judges it.

A check never raises for a bad node or a broken tool: a missing tool, a timeout, a
non-zero exit with unreadable output, or malformed output each become an ``error``
result with the reason, and the parsed document is kept in ``data`` so that
``burnin judge`` can re-judge it later against another profile.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from burnin import judge, kernel_window, versions
from burnin.gpu_stress import StressReport, StressUnavailable
from burnin.levels import Level
from burnin.nvml import GpuHealth, GpuInventory, Nvml, NvmlUnavailable, NvmlXid, XidWatch
from burnin.parsers import ParseError
from burnin.parsers import dcgm as dcgm_parser
from burnin.parsers import infiniband as ib_parser
from burnin.parsers import nccl as nccl_parser
from burnin.parsers import nvidia_smi as smi_parser
from burnin.parsers import xid as xid_parser
from burnin.profiles import Profile
from burnin.result import CheckResult, Finding, worst
from burnin.tools import ToolRun, ToolRunner, iso

StressFn = Callable[[float, int], StressReport]


@dataclass
class RunContext:
    profile: Profile
    level: Level
    tools: ToolRunner
    nvml: Nvml
    stress: StressFn
    expect_driver: str | None = None
    expect_cuda: str | None = None
    xid_watch: XidWatch | None = None
    xid_watch_error: str | None = None
    kernel_log_since: str | None = None
    """The run's cut-off (the node's clock, ISO 8601): kernel_xid judges only later lines; None: the whole log."""
    notes: list[str] = field(default_factory=list)


def _from_run(name: str, kind: str, run: ToolRun, tools: ToolRunner) -> CheckResult:
    version, note = tools.version(run.tool)
    return CheckResult(
        name=name,
        kind=kind,
        verdict="error",
        tool=run.tool,
        tool_version=version,
        tool_version_note=note,
        argv=run.argv,
        started_at=run.started_at,
        ended_at=run.ended_at,
        exit_code=run.exit_code,
        raw_output=run.raw_output,
    )


def _raw(ctx: RunContext, check: CheckResult) -> str:
    """The tool's saved stdout ("" when there is none)."""
    if not check.raw_output:
        return ""
    try:
        return (ctx.tools.out_dir / check.raw_output).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def _finish(check: CheckResult, findings: list[Finding], data: Any, measured: dict[str, Any]) -> CheckResult:
    check.findings = findings
    check.data = data
    check.measured = measured
    check.verdict = worst([f.verdict for f in findings])
    check.reason = "; ".join(f"{f.name}: {f.reason}" for f in findings if f.verdict != "pass" and f.reason)
    return check


def _run_and_parse(
    ctx: RunContext, name: str, kind: str, argv: list[str], timeout_s: float,
    parse: Callable[[str], Any],
) -> tuple[CheckResult, Any]:
    """Run a tool and parse its stdout; on any failure the check comes back as an error."""
    run = ctx.tools.run(name, argv, timeout_s)
    check = _from_run(name, kind, run, ctx.tools)
    if (why := run.failure()) is not None:
        check.reason = why
        return check, None
    try:
        return check, parse(run.stdout)
    except ParseError as exc:
        exit_note = f" (exit {run.exit_code}: {run.stderr_tail()})" if run.exit_code else ""
        check.reason = f"unreadable {run.tool} output: {exc}{exit_note}"
        return check, None


# The checks whose tool's exit status is judged (``_nonzero_exit``), here and when re-judged.
NONZERO_EXIT_KINDS = ("ib", "dcgm", "nccl")


def _nonzero_exit(check: CheckResult, run_exit: int | None, tool: str) -> CheckResult:
    """A tool that exits non-zero while its output reads as healthy is not trusted."""
    if run_exit not in (0, None) and check.verdict == "pass":
        check.verdict = "error"
        check.reason = f"{tool} exited {run_exit} although its output looked healthy"
    return check


# --------------------------------------------------------------------------- gpu


def _from_smi(report: smi_parser.SmiReport) -> GpuInventory:
    gpus = [
        GpuHealth(
            index=g.index, name=g.name, serial=g.serial, uuid=g.uuid, pci_bus_id=g.pci_bus_id,
            ecc_enabled=None if g.ecc_mode is None else g.ecc_mode == "Enabled",
            ecc_uncorrected_volatile=g.ecc_uncorrected_volatile,
            ecc_uncorrected_aggregate=g.ecc_uncorrected_aggregate,
            retired_pages_pending=g.retired_pages_pending,
            row_remap_pending=g.remapped_rows_pending, row_remap_failure=g.remapped_rows_failure,
            pcie_gen_current=g.pcie_gen_current, pcie_gen_max=g.pcie_gen_max,
            pcie_width_current=g.pcie_width_current, pcie_width_max=g.pcie_width_max,
            throttle_reasons=g.throttle_reasons if report.format != "table" else None,
            temperature_c=g.temperature_c, power_limit_w=g.power_limit_w,
            power_default_limit_w=g.power_default_limit_w,
            notes=["read from nvidia-smi: NVML unavailable"],
        )
        for g in report.gpus
    ]
    return GpuInventory("nvidia-smi", report.driver_version, report.cuda_version, None, gpus)


def _nvlink_from_smi(ctx: RunContext, inv: GpuInventory) -> None:
    """Without NVML, NVLink state comes from ``nvidia-smi nvlink --status`` (if it answers)."""
    run = ctx.tools.run("gpu.nvlink", ["nvidia-smi", "nvlink", "--status"], 60)
    if run.failure() is not None or run.exit_code != 0:
        return
    try:
        links = smi_parser.parse_nvlink_status(run.stdout)
    except ParseError as exc:
        for g in inv.gpus:
            g.notes.append(f"nvlink: {exc}")
        return
    for g in inv.gpus:
        if g.index in links:
            g.nvlink_active = links[g.index]


def check_gpu(ctx: RunContext) -> CheckResult:
    started = iso(ctx.tools.clock())
    try:
        inv = ctx.nvml.inventory()
        check = CheckResult(name="gpu", kind="gpu", verdict="error", tool="nvml",
                            tool_version=inv.library_version, argv=[], started_at=started)
        check.raw_output = ctx.tools.write_raw("gpu.nvml.json", json.dumps(asdict(inv), indent=2))
        check.ended_at = iso(ctx.tools.clock())
    except NvmlUnavailable as exc:
        nvml_reason = str(exc)
        check, report = _run_and_parse(ctx, "gpu", "gpu", ["nvidia-smi", "-q", "-x"], 120, smi_parser.parse)
        if report is None:
            check.reason = f"NVML unavailable ({nvml_reason}); nvidia-smi fallback: {check.reason}"
            return check
        inv = _from_smi(report)
        _nvlink_from_smi(ctx, inv)
    check.options = {"expect_driver": ctx.expect_driver, "expect_cuda": ctx.expect_cuda}
    findings = judge.judge_gpus(inv, ctx.profile, ctx.expect_driver, ctx.expect_cuda)
    measured = {
        "gpu_count": len(inv.gpus),
        "driver_version": inv.driver_version,
        "cuda_version": inv.cuda_version,
        "serials": [g.serial for g in inv.gpus],
        "source": inv.source,
    }
    return _finish(check, findings, asdict(inv), measured)


# --------------------------------------------------------------------------- logs and links


def check_kernel_xid(ctx: RunContext) -> CheckResult:
    """The kernel log's Xid lines: all of them, or those from the run's cut-off on (``kernel_log_since``)."""
    since = ctx.kernel_log_since
    argv = list(kernel_window.DMESG_ARGV if since is None else kernel_window.DMESG_WINDOWED_ARGV)
    check, report = _run_and_parse(ctx, "kernel_xid", "kernel_xid", argv, 60, xid_parser.parse)
    check.options = {"since": since}
    if report is None:
        return check
    if check.exit_code not in (0, None):
        check.reason = f"dmesg exited {check.exit_code}; the kernel log could not be read"
        return check
    window = kernel_window.split(report, since)
    measured = {"xids": sorted({e.xid for e in window.judged}), "events": len(window.judged),
                "window": window.describe(), "ignored_before_cutoff": len(window.ignored),
                "ignored_xids": sorted({e.xid for e in window.ignored})}
    return _finish(check, judge.judge_xid_log(report, ctx.profile, since), asdict(report), measured)


def check_ib(ctx: RunContext) -> CheckResult:
    argv = ["ibstat"] if ctx.tools.which("ibstat") or not ctx.tools.which("ibv_devinfo") else [
        "ibv_devinfo", "-v"]
    check, report = _run_and_parse(ctx, "ib", "ib", argv, 60, ib_parser.parse)
    if report is None:
        if check.reason.endswith("not found on PATH"):
            check.reason = "neither ibstat nor ibv_devinfo found on PATH"
        return check
    findings = judge.judge_ib(report, ctx.profile)
    ports = [p for ca in report.cas for p in ca.ports]
    measured = {"ports": len(ports), "active": sum(p.state == "Active" for p in ports)}
    return _nonzero_exit(_finish(check, findings, asdict(report), measured), check.exit_code, argv[0])


def check_dcgm(ctx: RunContext) -> CheckResult:
    level = ctx.profile.dcgm.levels[ctx.level]
    argv = ["dcgmi", "diag", "-r", str(level), "-j"]
    check, report = _run_and_parse(
        ctx, "dcgm", "dcgm", argv, ctx.profile.dcgm.timeout_s[ctx.level], dcgm_parser.parse
    )
    check.options = {"level": level}
    if report is None:
        return check
    if report.dcgm_version and not check.tool_version:
        check.tool_version, check.tool_version_note = report.dcgm_version, None
    findings = judge.judge_dcgm(report, ctx.profile, ctx.level)
    measured = {"passed": report.passed, "level_ran": report.level, "level_inferred": report.level_inferred,
                "failed_gpus": report.failed_gpus, "failed_tests": [t.name for t in report.tests if t.result == "fail"]}
    return _nonzero_exit(_finish(check, findings, asdict(report), measured), check.exit_code, "dcgmi")


def check_nccl(ctx: RunContext, collective: str) -> CheckResult:
    lim = ctx.profile.nccl
    name = f"nccl.{collective}"
    argv = [f"{collective}_perf", "-b", lim.min_bytes, "-e", lim.max_bytes, "-f", "2",
            "-g", str(ctx.profile.gpu.count)]
    check, report = _run_and_parse(
        ctx, name, "nccl", argv, lim.timeout_s, lambda text: nccl_parser.parse(text, collective)
    )
    check.options = {"collective": collective, "scope": "single_node"}
    if report is None:
        return check
    if not check.tool_version and (said := versions.nccl_from_output(_raw(ctx, check))):
        check.tool_version, check.tool_version_note = said, None
    findings = judge.judge_nccl(report, ctx.profile, "single_node")
    measured = {"avg_busbw": report.avg_busbw, "peak_busbw": report.peak_busbw,
                "wrong_results": report.wrong_results, "ranks": report.ranks}
    return _nonzero_exit(_finish(check, findings, asdict(report), measured), check.exit_code, argv[0])


# --------------------------------------------------------------------------- GPU stress


def check_stress(ctx: RunContext) -> CheckResult:
    seconds = ctx.profile.stress.seconds[ctx.level]
    size = ctx.profile.stress.gemm_size
    check = CheckResult(name="stress", kind="stress", verdict="error", tool="torch",
                        argv=[], started_at=iso(ctx.tools.clock()),
                        options={"seconds": seconds, "gemm_size": size})
    try:
        report = ctx.stress(seconds, size)
    except StressUnavailable as exc:
        check.ended_at, check.reason = iso(ctx.tools.clock()), str(exc)
        return check
    check.ended_at = iso(ctx.tools.clock())
    check.tool_version = f"torch {report.torch_version} (CUDA {report.cuda_version})"
    check.raw_output = ctx.tools.write_raw("stress.json", json.dumps(asdict(report), indent=2))
    measured = {str(g.index): {"h2d_gbps": g.h2d_gbps, "d2h_gbps": g.d2h_gbps, "hbm_gbps": g.hbm_gbps,
                               "gemm_tflops": g.gemm_tflops, "gemm_iterations": g.gemm_iterations,
                               "gemm_mismatches": g.gemm_mismatches} for g in report.gpus}
    return _finish(check, judge.judge_stress(report, ctx.profile), asdict(report), measured)


# --------------------------------------------------------------------------- NVML Xid events


def start_xid_watch(ctx: RunContext) -> None:
    try:
        ctx.xid_watch = ctx.nvml.watch_xids()
    except NvmlUnavailable as exc:
        ctx.xid_watch_error = str(exc)


def finish_xid_watch(ctx: RunContext, started_at: str) -> CheckResult:
    check = CheckResult(name="xid_events", kind="xid_events", verdict="error", tool="nvml",
                        argv=[], started_at=started_at)
    if ctx.xid_watch is None:
        check.ended_at = iso(ctx.tools.clock())
        check.reason = f"NVML Xid events could not be watched: {ctx.xid_watch_error}"
        return check
    events: list[NvmlXid] = ctx.xid_watch.stop()
    check.ended_at = iso(ctx.tools.clock())
    measured = {"xids": sorted({e.xid for e in events}), "events": len(events)}
    return _finish(check, judge.judge_xid_events(events, ctx.profile),
                   {"events": [asdict(e) for e in events]}, measured)

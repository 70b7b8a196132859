"""Run a profile's checks for one level and write ``result.json``; re-judge a stored result.

``run`` is what ``burnin run`` does on a node. ``rejudge`` is what ``burnin judge`` does
on the controller: it rebuilds each check's parsed data from the document and applies
the judge again, so a node's evidence can be held against any profile. A check the
profile's level requires but the result lacks is an error (fail closed).
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from burnin import checks, judge
from burnin.gpu_stress import StressReport
from burnin.nvml import GpuInventory, Nvml, NvmlXid
from burnin.parsers.dcgm import DcgmReport
from burnin.parsers.infiniband import IbReport
from burnin.parsers.nccl import NcclReport
from burnin.parsers.xid import XidReport
from burnin.profiles import Profile
from burnin.result import BURNIN_VERSION, CheckResult, Finding, ResultFormatError, RunResult, worst
from burnin.serde import from_dict
from burnin.tools import ToolRunner, iso

KNOWN_CHECKS = ("gpu", "kernel_xid", "ib", "dcgm", "nccl", "stress", "xid_events")


def _skipped(name: str, when: str) -> CheckResult:
    return CheckResult(name=name, kind=name, verdict="error", started_at=when, ended_at=when,
                       reason="skipped by the operator (--skip); a skipped check is not a pass")


def run(
    profile: Profile,
    level: str,
    out_dir: Path,
    *,
    nvml: Nvml,
    stress: checks.StressFn,
    tools: ToolRunner | None = None,
    skip: tuple[str, ...] = (),
    expect_driver: str | None = None,
    expect_cuda: str | None = None,
    host: str | None = None,
    on_check: Callable[[CheckResult], None] | None = None,
) -> RunResult:
    out_dir.mkdir(parents=True, exist_ok=True)
    tools = tools or ToolRunner(out_dir)
    ctx = checks.RunContext(profile, level, tools, nvml, stress, expect_driver, expect_cuda)
    started = iso(tools.clock())
    wanted = profile.checks[level]
    if "xid_events" in wanted and "xid_events" not in skip:
        checks.start_xid_watch(ctx)
    results: list[CheckResult] = []

    def record(name: str, do: Callable[[], CheckResult]) -> None:
        when = iso(tools.clock())
        try:
            check = do()
        except Exception as exc:  # a bug or an unforeseen tool state: recorded, never a pass
            check = CheckResult(name=name, kind=name.split(".")[0], verdict="error", started_at=when,
                                ended_at=iso(tools.clock()),
                                reason=f"internal error in check: {type(exc).__name__}: {exc}")
        results.append(check)
        if on_check is not None:
            on_check(check)

    steps: dict[str, Callable[[], CheckResult]] = {
        "gpu": lambda: checks.check_gpu(ctx),
        "kernel_xid": lambda: checks.check_kernel_xid(ctx),
        "ib": lambda: checks.check_ib(ctx),
        "dcgm": lambda: checks.check_dcgm(ctx),
        "stress": lambda: checks.check_stress(ctx),
    }
    for name in wanted:
        if name == "xid_events":
            continue  # finished last, after everything else has loaded the GPUs
        if name in skip:
            record(name, partial(_skipped, name, iso(tools.clock())))
        elif name == "nccl":
            for collective in profile.nccl.collectives[level]:
                record(f"nccl.{collective}", partial(checks.check_nccl, ctx, collective))
        elif name in steps:
            record(name, steps[name])
        else:
            record(name, partial(CheckResult, name=name, kind=name, verdict="error",
                                 reason=f"profile names unknown check {name!r}"))
    if "xid_events" in wanted:
        if "xid_events" in skip:
            record("xid_events", lambda: _skipped("xid_events", iso(tools.clock())))
        else:
            record("xid_events", lambda: checks.finish_xid_watch(ctx, started))
    result = RunResult(
        profile=profile.name,
        level=level,
        host=host or socket.gethostname(),
        started_at=started,
        ended_at=iso(tools.clock()),
        verdict=worst([c.verdict for c in results]),
        checks=results,
        burnin_version=BURNIN_VERSION,
    )
    result.write(out_dir / "result.json")
    return result


@dataclass(frozen=True)
class Judgement:
    passed: bool
    findings: list[Finding]


def _rejudge_check(check: CheckResult, profile: Profile, level: str) -> list[Finding]:
    data: Any = check.data
    if check.kind == "gpu":
        return judge.judge_gpus(from_dict(GpuInventory, data), profile,
                                check.options.get("expect_driver"), check.options.get("expect_cuda"))
    if check.kind == "kernel_xid":
        return judge.judge_xid_log(from_dict(XidReport, data), profile)
    if check.kind == "xid_events":
        events = data.get("events") if isinstance(data, dict) else None
        if not isinstance(events, list):
            raise ResultFormatError("xid_events data has no events list")
        return judge.judge_xid_events([from_dict(NvmlXid, e) for e in events], profile)
    if check.kind == "ib":
        return judge.judge_ib(from_dict(IbReport, data), profile)
    if check.kind == "dcgm":
        return judge.judge_dcgm(from_dict(DcgmReport, data), profile, level)
    if check.kind == "nccl":
        scope = check.options.get("scope")
        return judge.judge_nccl(from_dict(NcclReport, data), profile,
                                scope if isinstance(scope, str) else None)
    if check.kind == "stress":
        return judge.judge_stress(from_dict(StressReport, data), profile)
    raise ResultFormatError(f"unknown check kind {check.kind!r}")


def rejudge(result: RunResult, profile: Profile) -> Judgement:
    findings: list[Finding] = []
    level = result.level if result.level in profile.checks else "standard"
    for check in result.checks:
        if check.data is None:
            findings.append(Finding(check.name, "error", None, None,
                                    check.reason or f"{check.name} produced no data"))
            continue
        try:
            found = _rejudge_check(check, profile, level)
        except ResultFormatError as exc:
            found = [Finding(check.name, "error", None, None, f"stored data unreadable: {exc}")]
        if check.verdict == "error" and all(f.verdict == "pass" for f in found):
            # The node could not vouch for this check (e.g. a tool exited non-zero).
            found = [Finding(check.name, "error", None, None, check.reason or "error on the node")]
        findings.extend(found)
    have = {c.kind for c in result.checks}
    for name in profile.checks.get(level, ()):
        if name not in have:
            findings.append(Finding(name, "error", None, None,
                                    f"profile {profile.name} level {level} needs {name!r}; result lacks it"))
    verdict = worst([f.verdict for f in findings])
    return Judgement(passed=verdict == "pass", findings=findings)

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
from burnin.levels import Level
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
    level: Level,
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
    run_id: str | None = None,
    node: str | None = None,
    serial: str | None = None,
    kernel_log_since: str | None = None,
) -> RunResult:
    out_dir.mkdir(parents=True, exist_ok=True)
    tools = tools or ToolRunner(out_dir)
    ctx = checks.RunContext(profile, level, tools, nvml, stress, expect_driver, expect_cuda,
                            kernel_log_since=kernel_log_since)
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
        run_id=run_id,
        node=node,
        serial=serial if serial is not None else system_serial(tools),
    )
    result.write(out_dir / "result.json")
    return result


DMI_SERIAL = Path("/sys/class/dmi/id/product_serial")
_PLACEHOLDER_SERIALS = {"", "0", "none", "not specified", "to be filled by o.e.m.", "default string",
                        "system serial number", "0123456789"}


def system_serial(tools: ToolRunner, path: Path = DMI_SERIAL) -> str | None:
    """The machine's serial as its firmware states it (``dmidecode``, else the DMI file; both need
    root), or None when unreadable or a vendor placeholder: the controller then has no serial to
    hold against the inventory, which it reports."""
    text: str | None = None
    if tools.which("dmidecode"):
        run = tools.run("system_serial", ["dmidecode", "-s", "system-serial-number"], 30)
        if run.failure() is None and run.exit_code == 0:
            lines = [ln.strip() for ln in run.stdout.splitlines() if ln.strip() and not ln.startswith("#")]
            text = lines[0] if len(lines) == 1 else None
    if text is None:
        try:
            text = path.read_text(encoding="ascii", errors="replace").strip()
        except OSError:
            return None
    return None if text.lower() in _PLACEHOLDER_SERIALS else text[:64]


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
        since = check.options.get("since")
        return judge.judge_xid_log(from_dict(XidReport, data), profile, since if isinstance(since, str) else None)
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


def required_checks(profile: Profile, level: str) -> tuple[str, ...]:
    """Every check the level requires, each by the name it is recorded under: NCCL once per collective.

    A level is only as strong as each of its checks: one ``nccl`` check must not stand in for
    the four collectives ``standard`` asks for."""
    out: list[str] = []
    for name in profile.checks[level]:
        if name == "nccl":
            out += [f"nccl.{c}" for c in profile.nccl.collectives[level]]
        else:
            out.append(name)
    return tuple(out)


def _recorded_as(check: CheckResult) -> str:
    """The required-check name a result's check answers for (an nccl check: its collective's)."""
    if check.kind == "nccl":
        collective = check.options.get("collective")
        return f"nccl.{collective}" if isinstance(collective, str) else check.name
    return check.kind


def _collective_mismatch(check: CheckResult) -> Finding | None:
    """An nccl check whose data measured another collective than it claims answers for nothing."""
    if check.kind != "nccl" or not isinstance(check.data, dict):
        return None
    claimed, measured = check.options.get("collective"), check.data.get("collective")
    if claimed is not None and measured is not None and claimed == measured:
        return None
    return Finding(check.name, "error", measured, claimed,
                   f"check {check.name} claims collective {claimed!r} but its data measured {measured!r}")


def rejudge(result: RunResult, profile: Profile) -> Judgement:
    findings: list[Finding] = []
    if result.level not in profile.checks:
        known = ", ".join(profile.checks)
        return Judgement(False, [Finding("result.level", "error", result.level, known,
                                         f"result level {result.level!r} is not a level of {profile.name}")])
    level = result.level
    for check in result.checks:
        if check.data is None:
            findings.append(Finding(check.name, "error", None, None,
                                    check.reason or f"{check.name} produced no data"))
            continue
        mismatch = _collective_mismatch(check)
        if mismatch is not None:
            findings.append(mismatch)
            continue
        try:
            found = _rejudge_check(check, profile, level)
        except ResultFormatError as exc:
            found = [Finding(check.name, "error", None, None, f"stored data unreadable: {exc}")]
        if check.verdict == "error" and all(f.verdict == "pass" for f in found):
            # The node could not vouch for this check (e.g. a tool exited non-zero).
            found = [Finding(check.name, "error", None, None, check.reason or "error on the node")]
        elif (check.kind in checks.NONZERO_EXIT_KINDS and check.exit_code not in (0, None)
              and all(f.verdict == "pass" for f in found)):
            # The controller decides, not the node: the rule the node applies is applied again to
            # the stored exit code, so a document whose verdict says pass cannot outvote it.
            found = [Finding(check.name, "error", check.exit_code, 0,
                             f"{check.tool or check.kind} exited {check.exit_code} although its output "
                             "looked healthy")]
        findings.extend(found)
    have = {_recorded_as(c) for c in result.checks}
    for name in required_checks(profile, level):
        if name not in have:
            findings.append(Finding(name, "error", None, None,
                                    f"profile {profile.name} level {level} needs {name!r}; result lacks it"))
    verdict = worst([f.verdict for f in findings])
    return Judgement(passed=verdict == "pass", findings=findings)

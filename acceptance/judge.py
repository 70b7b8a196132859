"""Judge a rack: each node against its SKU profile, and against its peers.

A fixed floor catches a broken node; it does not catch one that is 4 % slower than
the other 31 in the same rack while still clearing the floor — a bad cable, a PCIe
slot at the wrong speed, a GPU that throttles. So on top of the profile (burnin's own
judge, re-applied here to the stored data so that the controller decides, not the
node) every node's busbw and stress numbers are compared with the other nodes of the
same SKU by robust statistics: median and MAD, and the modified z-score
``0.6745 * (x - median) / MAD`` of Iglewicz and Hoaglin, flagged below -3.5 and only
when the shortfall is also material (``min_drop``). Median and MAD are not dragged by
the outliers they are meant to find, as a mean and standard deviation would be.

Every finding names the number, the threshold and why. A node with no result, an
unreadable result or a missing number is an ``error``, and an error is not a pass.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from acceptance import words
from burnin import judge as burnin_judge
from burnin import profiles as burnin_profiles
from burnin.gpu_stress import StressReport
from burnin.levels import Level
from burnin.parsers.nccl import NcclReport
from burnin.profiles import Profile
from burnin.result import CheckResult, Finding, ResultFormatError, RunResult, Verdict, worst
from burnin.runner import rejudge
from burnin.serde import from_dict

Source = Literal["profile", "fleet", "record", "multi_node", "waiver"]
MODIFIED_Z = 0.6745  # makes MAD comparable to a standard deviation for normal data


@dataclass(frozen=True)
class NodeFinding:
    """One judged number: where the rule came from, the number, the threshold, and why."""

    check: str
    verdict: Verdict
    source: Source
    metric: str
    measured: Any = None
    threshold: Any = None
    reason: str = ""


@dataclass(frozen=True)
class Waiver:
    """An operator's explicit waiver of one required check: who gave it, why, when."""

    check: str  # "multi-node"
    by: str
    reason: str
    at: str


@dataclass(frozen=True)
class NodeJudgement:
    node: str
    profile: str
    level: str | None
    verdict: Verdict
    findings: tuple[NodeFinding, ...]
    waivers: tuple[Waiver, ...] = ()  # waivers that this node's verdict rests on

    @property
    def passed(self) -> bool:
        return self.verdict == "pass"

    def reasons(self) -> list[str]:
        """Why the node did not pass, one line per failing or unjudgeable finding."""
        return [f"{f.check}: {f.reason}" for f in self.findings if f.verdict != "pass"]


@dataclass(frozen=True)
class OutlierPolicy:
    """When a node counts as far below its peers."""

    z_max: float = 3.5  # Iglewicz & Hoaglin's cut-off for the modified z-score
    min_drop: float = 0.02  # and at least 2 % below the median, so a very tight fleet does not flag noise
    min_peers: int = 5  # fewer nodes than this: no fleet comparison (reported, not silently skipped)
    mad_floor: float = 0.002  # MAD is at least 0.2 % of the median (identical peers give MAD 0)


@dataclass(frozen=True)
class FleetStat:
    """One metric over the nodes of one profile: the baseline each node was compared with."""

    profile: str
    metric: str
    unit: str
    values: dict[str, float]
    median: float | None
    mad: float | None
    applied: bool
    note: str = ""


@dataclass(frozen=True)
class Request:
    """What the controller asked a node for: the result must say the same, or it answers another request."""

    run_id: str
    node: str
    level: Level
    serial: str | None = None  # the inventory's system serial
    kernel_log_since: str | None = None  # the run's kernel log cut-off (None: the whole log is judged)
    expect_driver: str | None = None  # the GPU driver the node must report (a driver upgrade); None: any


@dataclass(frozen=True)
class NodeInput:
    """What came back from one node: its result, or why there is none."""

    node: str
    profile: str
    result: RunResult | None
    error: str | None = None
    position: int | None = None  # rack unit, for the report's grid
    rack: str | None = None
    request: Request | None = None  # None: judged on its own (re-judging a stored result), not bound


@dataclass(frozen=True)
class GroupRun:
    """One multi-node NCCL run the controller launched (a pair, a ring, an NVLink block)."""

    nodes: tuple[str, ...]
    kind: str
    report: NcclReport | None
    error: str | None = None
    raw_output: str | None = None
    job_id: str | None = None  # the scheduler's job id (Slurm), when it ran as a job
    profile: str | None = None  # the profile it is judged against (default: judge_rack's group_profile)
    launcher: str = "srun"  # how it was started: srun (a Slurm job) or mpirun (over SSH)


@dataclass(frozen=True)
class GroupJudgement:
    run: GroupRun
    verdict: Verdict
    finding: NodeFinding


@dataclass(frozen=True)
class RackJudgement:
    nodes: tuple[NodeJudgement, ...]
    fleet: tuple[FleetStat, ...]
    groups: tuple[GroupJudgement, ...] = ()
    policy: OutlierPolicy = field(default_factory=OutlierPolicy)

    def by_node(self) -> dict[str, NodeJudgement]:
        return {n.node: n for n in self.nodes}

    @property
    def passed(self) -> list[str]:
        return [n.node for n in self.nodes if n.passed]

    @property
    def not_passed(self) -> list[str]:
        return [n.node for n in self.nodes if not n.passed]


# ------------------------------------------------------------------ fleet metrics


@dataclass(frozen=True)
class Metric:
    name: str
    unit: str
    kind: str  # the check kind it is read from
    read: Callable[[CheckResult, Profile], float | None]


def _nccl_busbw(check: CheckResult, profile: Profile) -> float | None:
    if check.options.get("collective", "all_reduce") != "all_reduce" or check.data is None:
        return None
    report = from_dict(NcclReport, check.data)
    big = [r for r in report.rows if r.size_bytes >= profile.nccl.single_node_min_size_bytes]
    return max(max(r.busbw_oop, r.busbw_ip) for r in big) if big else None


def _stress(attr: str) -> Callable[[CheckResult, Profile], float | None]:
    def read(check: CheckResult, profile: Profile) -> float | None:
        if check.data is None:
            return None
        values = [getattr(g, attr) for g in from_dict(StressReport, check.data).gpus]
        if not values or any(v is None for v in values):
            return None
        return float(min(values))  # the slowest GPU is the node's number

    return read


METRICS: tuple[Metric, ...] = (
    Metric("nccl.all_reduce.busbw", "GB/s", "nccl", _nccl_busbw),
    Metric("stress.hbm_gbps.min_gpu", "GB/s", "stress", _stress("hbm_gbps")),
    Metric("stress.gemm_tflops.min_gpu", "TFLOP/s", "stress", _stress("gemm_tflops")),
    Metric("stress.h2d_gbps.min_gpu", "GB/s", "stress", _stress("h2d_gbps")),
    Metric("stress.d2h_gbps.min_gpu", "GB/s", "stress", _stress("d2h_gbps")),
)


def read_metric(result: RunResult, metric: Metric, profile: Profile) -> tuple[float | None, str]:
    """A node's value of one metric, or None with the reason it is missing."""
    checks = [c for c in result.checks if c.kind == metric.kind]
    if metric.kind == "nccl":
        checks = [c for c in checks if c.options.get("collective", "all_reduce") == "all_reduce"]
    if not checks:
        return None, f"no {metric.kind} check in the result"
    try:
        value = metric.read(checks[0], profile)
    except ResultFormatError as exc:
        return None, f"stored {metric.kind} data unreadable: {exc}"
    return (value, "") if value is not None else (None, f"{metric.kind} check has no {metric.name} value")


def robust_stats(values: Sequence[float]) -> tuple[float, float]:
    """Median and median absolute deviation."""
    med = statistics.median(values)
    return med, statistics.median(abs(v - med) for v in values)


def modified_z(value: float, median: float, mad: float) -> float:
    return MODIFIED_Z * (value - median) / mad if mad > 0 else 0.0


# ------------------------------------------------------------------ judging


def _short(value: Any, limit: int = 120) -> str:
    """A value in a reason, in words (``acceptance.words``), not as Python prints it."""
    text = words.value(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def binding_findings(result: RunResult, want: Request) -> list[NodeFinding]:
    """The result's own run id, node, level and serial against the request (one finding each).

    A result copied from another node, left over from an earlier run, or run at a lower level
    must never pass for this one; a result that does not say is as bad as one that disagrees."""
    out: list[NodeFinding] = []
    for what, got, expected in (("run_id", result.run_id, want.run_id), ("node", result.node, want.node),
                                ("level", result.level, want.level)):
        if got == expected:
            out.append(NodeFinding(f"result.{what}", "pass", "record", what, got, expected,
                                   f"result answers this request ({what} {got})"))
        else:
            said = "does not say which" if got is None else f"is for {what} {got!r}"
            out.append(NodeFinding(f"result.{what}", "error", "record", what, got, expected,
                                   f"result.json {said}; this request is {what} {expected!r}"))
    if want.serial is not None and result.serial is not None and result.serial != want.serial:
        out.append(NodeFinding("result.serial", "error", "record", "serial", result.serial, want.serial,
                               f"result.json comes from a machine with serial {result.serial!r}; "
                               f"the inventory's {want.node} is {want.serial!r}"))
    elif want.serial is not None and result.serial == want.serial:
        out.append(NodeFinding("result.serial", "pass", "record", "serial", result.serial, want.serial,
                               f"system serial {result.serial} is the inventory's"))
    elif want.serial is not None:
        # fail closed: the inventory knows this node's serial, so a result that cannot show it is
        # unbound data (a result from a machine that could be any machine), not a pass
        out.append(NodeFinding("result.serial", "error", "record", "serial", None, want.serial,
                               f"result.json has no system serial (the node could not read it from DMI: "
                               f"dmidecode or /sys/class/dmi/id/product_serial, as root); the inventory's "
                               f"{want.node} is {want.serial!r}, so the result cannot be shown to come from it"))
    else:
        out.append(NodeFinding("result.serial", "pass", "record", "serial", result.serial, want.serial,
                               "system serial not compared: the inventory has none for this node"))
    return out + _window_findings(result, want) + _driver_findings(result, want)


def _window_findings(result: RunResult, want: Request) -> list[NodeFinding]:
    """Each kernel_xid check judged the window this run asked for: a narrower one could hide an Xid."""
    out = []
    for c in result.checks:
        if c.kind != "kernel_xid":
            continue
        got = c.options.get("since")
        if got == want.kernel_log_since:
            if got is not None:
                out.append(NodeFinding("result.kernel_log_since", "pass", "record", "kernel_log_since", got, got,
                                       f"kernel log judged from the run's cut-off {got}"))
            continue
        asked = "the whole log" if want.kernel_log_since is None else f"the log since {want.kernel_log_since}"
        said = "the whole log" if got is None else f"the log since {got!r}"
        out.append(NodeFinding("result.kernel_log_since", "error", "record", "kernel_log_since", got,
                               want.kernel_log_since, f"{c.name} judged {said}; this request is {asked}"))
    return out


def _driver_findings(result: RunResult, want: Request) -> list[NodeFinding]:
    """The driver the node itself read (its gpu check: NVML, or nvidia-smi) is the one this run asked for.

    The controller's own comparison, whatever the node was told: a node that ran no gpu check, or whose
    check read no driver version, has not shown that it runs the driver (fail closed)."""
    if want.expect_driver is None:
        return []
    seen = [c.data.get("driver_version") if isinstance(c.data, dict) else None
            for c in result.checks if c.kind == "gpu"]
    if not seen:
        return [NodeFinding("result.driver", "error", "record", "driver_version", None, want.expect_driver,
                            f"no gpu check ran, so the node did not report its driver; this request needs "
                            f"driver {want.expect_driver}")]
    bad = [v for v in seen if v != want.expect_driver]
    if not bad:
        return [NodeFinding("result.driver", "pass", "record", "driver_version", seen[0], want.expect_driver,
                            f"the node reports driver {seen[0]}, as this request needs")]
    said = "no driver version" if bad[0] is None else f"driver {bad[0]}"
    verdict: Verdict = "error" if bad[0] is None else "fail"
    return [NodeFinding("result.driver", verdict, "record", "driver_version", bad[0], want.expect_driver,
                        f"the node reports {said}, not {want.expect_driver}")]


def _profile_findings(inp: NodeInput, profile: Profile) -> list[NodeFinding]:
    if inp.result is None:
        why = inp.error or "no burn-in result came back"
        return [NodeFinding("result", "error", "record", "result.json", None, "present", why)]
    out: list[NodeFinding] = binding_findings(inp.result, inp.request) if inp.request else []
    if inp.result.profile != profile.name:
        out.append(NodeFinding("result.profile", "pass", "record", "profile", inp.result.profile, profile.name,
                               f"node ran {inp.result.profile}; re-judged against {profile.name}"))
    for f in rejudge(inp.result, profile).findings:
        why = f.reason
        if f.verdict == "fail" and f.threshold is not None and "threshold" not in why:
            why = f"{why} (threshold {_short(f.threshold)} from profile {profile.name})".strip()
        if not why:
            why = f"{_short(f.measured)} meets {_short(f.threshold)} (profile {profile.name})"
        out.append(NodeFinding(f.name, f.verdict, "profile", f.name, f.measured, f.threshold, why))
    return out


def _fleet(inputs: Sequence[NodeInput], profiles: dict[str, Profile], policy: OutlierPolicy,
           ) -> tuple[list[FleetStat], dict[str, list[NodeFinding]]]:
    stats: list[FleetStat] = []
    findings: dict[str, list[NodeFinding]] = defaultdict(list)
    by_profile: dict[str, list[NodeInput]] = defaultdict(list)
    for inp in inputs:
        by_profile[inp.profile].append(inp)
    for pname, members in sorted(by_profile.items()):
        profile = profiles[pname]
        for metric in METRICS:
            values: dict[str, float] = {}
            missing: dict[str, str] = {}
            for inp in members:
                if inp.result is None:
                    continue  # already an error on its own; not a peer
                if metric.kind not in profile.checks.get(inp.result.level, ()):
                    continue  # the profile does not ask for this check at this level: nothing to compare
                value, why = read_metric(inp.result, metric, profile)
                if value is None:
                    missing[inp.node] = why
                else:
                    values[inp.node] = value
            for node, why in missing.items():
                findings[node].append(NodeFinding(f"fleet.{metric.name}", "error", "fleet", metric.name,
                                                  None, None, f"cannot compare with peers: {why}"))
            if not values and not missing:
                continue
            if len(values) < policy.min_peers:
                stats.append(FleetStat(pname, metric.name, metric.unit, values, None, None, False,
                                       f"{len(values)} node(s) with a value; fleet comparison needs "
                                       f"{policy.min_peers}"))
                continue
            med, mad = robust_stats(list(values.values()))
            mad_used = max(mad, abs(med) * policy.mad_floor)
            stats.append(FleetStat(pname, metric.name, metric.unit, values, med, mad, True))
            floor_by_drop = med * (1 - policy.min_drop)
            for node, v in values.items():
                z = modified_z(v, med, mad_used)
                low = z < -policy.z_max and v < floor_by_drop
                threshold = {"z_min": -policy.z_max, "median": round(med, 3), "mad": round(mad_used, 4),
                             "value_max_for_flag": round(floor_by_drop, 3)}
                reason = (f"{metric.name} {v:.2f} {metric.unit} is far below its {len(values)} peers "
                          f"(median {med:.2f}, MAD {mad_used:.3f}, modified z {z:.1f} < -{policy.z_max}, "
                          f"{100 * (1 - v / med):.1f}% below median)") if low else (
                          f"modified z {z:.1f} against median {med:.2f} {metric.unit}")
                findings[node].append(NodeFinding(f"fleet.{metric.name}", "fail" if low else "pass", "fleet",
                                                  metric.name, round(v, 3), threshold, reason))
    return stats, findings


def judge_group(run: GroupRun, profile: Profile) -> GroupJudgement:
    """A multi-node run against the profile's multi-node busbw floor (burnin's judge, scope multi_node)."""
    name = f"multi_node.{run.kind}"
    if run.report is None:
        f = NodeFinding(name, "error", "multi_node", "busbw", None, None, run.error or "no output from the run")
        return GroupJudgement(run, "error", f)
    found = burnin_judge.judge_nccl(run.report, profile, "multi_node")
    hosts = run.report.hosts
    if len(hosts) != len(set(run.nodes)):
        # a run of the group's nodes lists one rank host per node; fewer or more hosts is a run
        # of other machines (or of some of them), whatever its bandwidth (names are not matched:
        # hostnames and inventory names may differ, see docs/limits.md)
        found = [Finding(f"nccl.{run.report.collective}.hosts", "error", hosts, len(set(run.nodes)),
                         f"the run lists ranks on {len(hosts)} host(s) ({', '.join(hosts) or 'none'}) "
                         f"for a group of {len(set(run.nodes))} node(s)"), *found]
    verdict = worst([x.verdict for x in found])
    first = next(x for x in found if x.verdict == verdict)  # the finding that decides, named first
    who = "+".join(run.nodes)
    reason = "; ".join(x.reason for x in found if x.verdict != "pass") if verdict != "pass" else (
        first.reason or f"peak busbw {first.measured} GB/s >= {first.threshold} GB/s")
    return GroupJudgement(run, verdict, NodeFinding(name, verdict, "multi_node", first.name, first.measured,
                                                    first.threshold, f"{who}: {reason}"))


def _judge_group_or_error(run: GroupRun, pname: str | None, profiles: dict[str, Profile],
                          bad: dict[str, str]) -> GroupJudgement:
    """A run with no profile to judge it against is an error, never dropped from the judgement."""
    if pname is not None and pname in profiles:
        return judge_group(run, profiles[pname])
    why = bad.get(pname, "") if pname is not None else "the run names no profile and none was given"
    finding = NodeFinding(f"multi_node.{run.kind}", "error", "multi_node", "busbw", None, None,
                          f"{'+'.join(run.nodes)}: cannot be judged: {why or f'profile {pname!r} not loaded'}")
    return GroupJudgement(run, "error", finding)


def judge_rack(
    inputs: Sequence[NodeInput],
    *,
    groups: Sequence[GroupRun] = (),
    group_profile: str | None = None,
    policy: OutlierPolicy | None = None,
    load_profile: Callable[[str], Profile] = burnin_profiles.load,
    culprits: dict[str, str] | None = None,
) -> RackJudgement:
    """Judge every node; ``culprits`` maps nodes that isolation blamed for slow multi-node runs to why."""
    policy = policy or OutlierPolicy()
    profiles: dict[str, Profile] = {}
    bad_profiles: dict[str, str] = {}
    wanted = {i.profile for i in inputs} | {g.profile for g in groups if g.profile}
    for name in sorted(wanted | ({group_profile} if group_profile else set())):
        try:
            profiles[name] = load_profile(name)
        except burnin_profiles.ProfileError as exc:
            bad_profiles[name] = str(exc)
    usable = [i for i in inputs if i.profile in profiles]
    stats, fleet_findings = _fleet(usable, profiles, policy)
    judged_groups = tuple(_judge_group_or_error(g, g.profile or group_profile, profiles, bad_profiles)
                          for g in groups)
    nodes: list[NodeJudgement] = []
    for inp in inputs:
        if inp.profile in bad_profiles:
            found = [NodeFinding("profile", "error", "record", "profile", inp.profile, None, bad_profiles[inp.profile])]
        else:
            found = _profile_findings(inp, profiles[inp.profile]) + fleet_findings.get(inp.node, [])
        if culprits and inp.node in culprits:
            found.append(NodeFinding("multi_node.isolation", "fail", "multi_node", "busbw", None, None,
                                     culprits[inp.node]))
        verdict = worst([f.verdict for f in found])
        level = inp.result.level if inp.result is not None else None
        nodes.append(NodeJudgement(inp.node, inp.profile, level, verdict, tuple(found)))
    return RackJudgement(tuple(nodes), tuple(stats), judged_groups, policy)

"""Multi-node coverage: each run's verdict reaches its members, and required testing was done or waived.

Judging a node on its own results and judging the multi-node runs is not enough: a node
must also *carry* what the runs it took part in said about it, and a node that the
profile says must be tested across nodes at this level (``[multi_node].levels``) but was
not — Slurm unreachable, the node not schedulable, no peer of its profile, multi-node
runs turned off — must not be accepted on its single-node results alone. This module adds
those findings on top of :func:`acceptance.judge.judge_rack`:

* ``multi_node.runs``: an ``error`` if any run the node was in could not be judged (a
  group that could not be judged is an error for every member), a ``fail`` if every run
  it was in was slow (the isolation rounds, when they name it, add their own finding),
  else a ``pass`` naming a run that cleared it;
* ``multi_node.required``: an ``error`` for a node that was required to be tested and
  was not, with the reason it was left out, unless the operator waived multi-node
  testing explicitly (``racklife accept --waive multi-node --reason ...``), in which case
  the finding is a ``pass`` from source ``waiver`` and the node's judgement carries the
  waiver (who, why, when) into the acceptance record and every report.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from acceptance.judge import (
    GroupJudgement,
    GroupRun,
    NodeFinding,
    NodeInput,
    NodeJudgement,
    RackJudgement,
    Waiver,
    judge_rack,
)
from burnin import profiles as burnin_profiles
from burnin.levels import Level
from burnin.profiles import Profile
from burnin.result import worst

WAIVABLE = ("multi-node",)
"""Checks an operator may waive by name; nothing else can be waived."""


@dataclass(frozen=True)
class MultiNodeDemand:
    """What the run asked of multi-node testing: the level, who was left out and why, and any waivers."""

    level: Level
    left_out: Mapping[str, str]
    waivers: tuple[Waiver, ...] = ()

    def waiver(self, check: str) -> Waiver | None:
        return next((w for w in self.waivers if w.check == check), None)


def _who(g: GroupJudgement) -> str:
    return f"{g.run.kind} {'+'.join(g.run.nodes)}"


def member_finding(node: str, groups: Sequence[GroupJudgement]) -> NodeFinding | None:
    """What the runs ``node`` took part in say about it (None when it was in none)."""
    mine = [g for g in groups if node in g.run.nodes]
    if not mine:
        return None
    errored = [g for g in mine if g.verdict == "error"]
    passed = [g for g in mine if g.verdict == "pass"]
    failed = [g for g in mine if g.verdict == "fail"]
    measured = {_who(g): g.verdict for g in mine}
    if errored:
        why = "; ".join(f"{_who(g)}: {g.finding.reason}" for g in errored[:3])
        return NodeFinding("multi_node.runs", "error", "multi_node", "busbw", measured, "every run judged",
                           f"{len(errored)} multi-node run(s) with this node could not be judged: {why}")
    if failed and not passed:
        why = "; ".join(f"{_who(g)}: {g.finding.reason}" for g in failed[:3])
        return NodeFinding("multi_node.runs", "fail", "multi_node", "busbw", measured, "one run at the floor",
                           f"slow in every multi-node run it was in: {why}")
    best = passed[0]
    note = f"; {len(failed)} slow run(s) it was in were put down to its peers or links by isolation" \
        if failed else ""
    return NodeFinding("multi_node.runs", "pass", "multi_node", "busbw", measured, "one run at the floor",
                       f"cleared by {_who(best)}: {best.finding.reason}{note}")


def required_finding(node: str, profile: Profile, demand: MultiNodeDemand,
                     tested: bool) -> tuple[NodeFinding, Waiver | None]:
    """Whether the profile required multi-node testing at this level, and whether it was done or waived."""
    levels = list(profile.multi_node.levels)
    threshold = {"required_at": levels}
    if tested:
        return NodeFinding("multi_node.required", "pass", "multi_node", "coverage", "tested", threshold,
                           "tested across nodes"), None
    why = demand.left_out.get(node, "no multi-node run included it")
    if demand.level not in levels:
        return NodeFinding("multi_node.required", "pass", "multi_node", "coverage", "not tested", threshold,
                           f"not required at level {demand.level} (profile {profile.name} requires it at "
                           f"{', '.join(levels) or 'no level'}); not tested: {why}"), None
    waiver = demand.waiver("multi-node")
    if waiver is not None:
        return NodeFinding("multi_node.required", "pass", "waiver", "coverage", "not tested", threshold,
                           f"WAIVED by {waiver.by}: {waiver.reason} (multi-node testing is required at "
                           f"level {demand.level} and was not done: {why})"), waiver
    return NodeFinding("multi_node.required", "error", "multi_node", "coverage", "not tested", threshold,
                       f"multi-node testing is required at level {demand.level} and was not done: {why} "
                       "(waive only explicitly: --waive multi-node --reason ...)"), None


def _with_coverage(n: NodeJudgement, groups: Sequence[GroupJudgement], demand: MultiNodeDemand | None,
                   profile: Profile | None) -> NodeJudgement:
    found = list(n.findings)
    waivers: list[Waiver] = list(n.waivers)
    runs = member_finding(n.node, groups)
    if runs is not None:
        found.append(runs)
    if demand is not None and profile is not None:
        finding, waiver = required_finding(n.node, profile, demand, runs is not None)
        found.append(finding)
        if waiver is not None:
            waivers.append(waiver)
    return replace(n, verdict=worst([f.verdict for f in found]), findings=tuple(found), waivers=tuple(waivers))


def judge_acceptance(
    inputs: Sequence[NodeInput],
    *,
    groups: Sequence[GroupRun] = (),
    demand: MultiNodeDemand | None = None,
    culprits: dict[str, str] | None = None,
    load_profile: Callable[[str], Profile] = burnin_profiles.load,
) -> RackJudgement:
    """The rack's judgement with multi-node coverage: :func:`judge_rack`, then each node's runs and
    (given ``demand``) whether the testing its profile requires at this level was done or waived."""
    base = judge_rack(inputs, groups=groups, culprits=culprits, load_profile=load_profile)
    profiles: dict[str, Profile | None] = {}
    for name in {n.profile for n in base.nodes}:
        try:
            profiles[name] = load_profile(name)
        except burnin_profiles.ProfileError:
            profiles[name] = None  # already an error finding of judge_rack
    nodes = tuple(_with_coverage(n, base.groups, demand, profiles[n.profile]) for n in base.nodes)
    return replace(base, nodes=nodes)

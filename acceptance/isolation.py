"""Find the node(s) or link(s) that make a multi-node NCCL run slow, in few rounds.

A rack-wide all_reduce that comes back slow says *that* something is wrong, not *what*.
Testing every pair takes N-1 rounds (a round-robin schedule) and N(N-1)/2 runs; pairing
every node with one known-good node takes N-1 rounds because that node can be in only
one run at a time. This module does adaptive group testing instead: a *round* is one
batch of all_reduce runs on disjoint node groups launched together, and the oracle says
which groups were slow. Slow groups are split and their parts tested again in the next
round, all branches in parallel; a part of one node is tested with a node already proven
good. The fault model (one assumption each; see docs/acceptance.md):

* a **bad node** makes every group that contains it slow;
* a **bad link** between two good nodes makes every group that contains both slow.

Fast groups prove all their members good. A node is declared bad once it was slow with
``confirm`` distinct proven-good partners (1 when link faults are not a concern; 2
tells a bad node from a bad link to its partner). A slow group whose parts are all
fast holds a bad link across parts, found by binary search over the parts and then over
each side. With ``verify`` the remaining nodes are re-tested as one group at the end, so
a fault that no earlier group exercised is still hunted down.

Pure: no I/O, no clock. The oracle is injected; :class:`FaultModel` is the one used by
the tests and the benchmark.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from acceptance._search import (
    Group,
    Link,
    State,
    Suspect,
    Task,
    Verify,
    fallback,
    link,
    plan_round,
    resolve_all,
)

__all__ = ["FaultModel", "Group", "GroupTest", "Isolation", "IsolationError", "Link", "RoundRecord", "Split",
           "all_pairs_baseline", "bound", "isolate", "link", "one_good_baseline"]

GroupTest = Callable[[Sequence[Group]], Sequence[bool]]  # one round: True where the group was slow
Split = Literal["pairs", "binary"]


@dataclass(frozen=True)
class FaultModel:
    """A fabric with known faults: the oracle of the simulations and the benchmark."""

    bad_nodes: frozenset[str] = frozenset()
    bad_links: frozenset[Link] = frozenset()

    def slow(self, group: Group) -> bool:
        members = set(group)
        return bool(members & self.bad_nodes) or any(a in members and b in members for a, b in self.bad_links)

    def __call__(self, groups: Sequence[Group]) -> list[bool]:
        return [self.slow(g) for g in groups]


@dataclass(frozen=True)
class RoundRecord:
    number: int
    groups: tuple[Group, ...]
    slow: tuple[bool, ...]


@dataclass(frozen=True)
class Isolation:
    """What the search concluded, and every round it ran to get there (the evidence)."""

    bad_nodes: frozenset[str]
    bad_links: frozenset[Link]
    good_nodes: frozenset[str]
    unresolved: frozenset[str]
    reasons: dict[str, str]
    rounds: tuple[RoundRecord, ...]

    @property
    def n_rounds(self) -> int:
        return len(self.rounds)

    @property
    def n_tests(self) -> int:
        return sum(len(r.groups) for r in self.rounds)

    def culprits(self) -> dict[str, str]:
        """Nodes to quarantine, each with why (for :func:`acceptance.judge.judge_rack`'s ``culprits``).

        A bad link is not a node fault (it is a cable, a port or a switch between two good
        nodes), so its ends are not listed here; ``bad_links`` is reported on its own.
        Unresolved nodes are listed: a node that could not be cleared does not pass.
        """
        out = {n: f"isolation: {self.reasons.get(n, 'slow in multi-node runs')}" for n in sorted(self.bad_nodes)}
        out.update({n: "isolation: could not be told apart from a bad node (no good partner)"
                    for n in sorted(self.unresolved)})
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"bad_nodes": sorted(self.bad_nodes), "bad_links": [list(x) for x in sorted(self.bad_links)],
                "good_nodes": sorted(self.good_nodes),
                "unresolved": sorted(self.unresolved), "reasons": dict(self.reasons), "rounds": self.n_rounds,
                "runs": self.n_tests,
                "history": [{"round": r.number, "groups": [list(g) for g in r.groups], "slow": list(r.slow)}
                            for r in self.rounds]}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Isolation:
        """The inverse of :meth:`to_dict` (a durable workflow step stores the JSON form)."""
        return cls(
            bad_nodes=frozenset(d["bad_nodes"]),
            bad_links=frozenset(link(a, b) for a, b in d["bad_links"]),
            good_nodes=frozenset(d.get("good_nodes", ())),
            unresolved=frozenset(d["unresolved"]),
            reasons=dict(d["reasons"]),
            rounds=tuple(RoundRecord(int(r["round"]), tuple(tuple(g) for g in r["groups"]),
                                     tuple(bool(x) for x in r["slow"])) for r in d["history"]),
        )


class IsolationError(ValueError):
    """Inputs the search cannot work with (duplicate names, an oracle that answers wrongly)."""


def isolate(
    nodes: Sequence[str],
    test: GroupTest,
    *,
    known_good: Iterable[str] = (),
    split: Split = "pairs",
    max_parallel: int | None = None,
    confirm: int = 1,
    verify: bool = True,
    assume_slow: bool = True,
    max_rounds: int | None = None,
) -> Isolation:
    """Find the bad nodes (and bad links) among ``nodes``.

    ``assume_slow``: the caller saw ``nodes`` run slow together (the usual start);
    ``split="pairs"`` screens them as disjoint pairs in one round (fewest rounds),
    ``"binary"`` halves them (fewest runs). ``max_parallel`` caps the groups in a round.
    """
    order = list(nodes)
    if len(set(order)) != len(order):
        raise IsolationError("node names must be unique")
    if confirm < 1:
        raise IsolationError("confirm must be at least 1")
    st = State(confirm)
    st.mark_good(n for n in known_good if n not in order)
    cap = max_parallel if max_parallel is not None else max(1, len(order))
    limit = max_rounds if max_rounds is not None else 4 * (len(order) + 2)
    top = max(2, len(order) // 2) if split == "pairs" else 2
    tasks: list[Task] = []
    if len(order) > 1 or (order and st.good):  # one suspect is tested with a known-good partner
        tasks.append(Suspect(order, min(top, cap), known_slow=assume_slow, observed=False))
    rounds: list[RoundRecord] = []
    tried: set[Link] = set()
    verified = not verify

    found_at_verify = -1
    while len(rounds) < limit:
        tasks = resolve_all(tasks, st, len(rounds))
        found = len(st.bad) + len(st.links)
        if not tasks and not verified and found != found_at_verify:
            verified, found_at_verify = True, found
            rest = [n for n in order if n not in st.bad and all(n != b for _, b in st.links)]
            if len(rest) >= 2:
                tasks = [Verify(rest)]
        if not tasks:
            break
        planned, waiting = plan_round(tasks, st, cap)
        if not planned:
            groups = fallback(tasks, st, tried)[:cap]
            if not groups:
                break
            slow = _run(test, [tuple(g) for g in groups], rounds)
            for g, s in zip(groups, slow, strict=True):
                tried.add(link(g[0], g[1]))
                if not s:
                    st.mark_good(g)
            continue
        flat = [tuple(g) for _, gs in planned for g in gs]
        slow = _run(test, flat, rounds)
        new_tasks: list[Task] = []
        i = 0
        for task, gs in planned:
            n = len(gs)
            new_tasks.extend(task.settle([tuple(g) for g in gs], slow[i : i + n], st, len(rounds)))
            i += n
        if any(isinstance(task, Verify) for task, _ in planned) and new_tasks:
            verified = False  # the re-run was slow: search again, then verify again
        tasks = waiting + new_tasks

    accounted = st.bad | set(st.good)
    unresolved = frozenset(n for n in order if n not in accounted)
    return Isolation(
        bad_nodes=frozenset(st.bad),
        bad_links=frozenset(st.links),
        good_nodes=frozenset(n for n in order if n in st.good),
        unresolved=unresolved,
        reasons=dict(st.reasons),
        rounds=tuple(rounds),
    )


def _run(test: GroupTest, groups: list[Group], rounds: list[RoundRecord]) -> list[bool]:
    answer = list(test(groups))
    if len(answer) != len(groups):
        raise IsolationError(f"the oracle answered {len(answer)} results for {len(groups)} groups")
    rounds.append(RoundRecord(len(rounds) + 1, tuple(groups), tuple(bool(s) for s in answer)))
    return answer


def bound(n: int, k: int) -> int:
    """The round budget the search is held to: k * ceil(log2 N) + 2."""
    return k * math.ceil(math.log2(max(2, n))) + 2


def all_pairs_baseline(n: int) -> tuple[int, int]:
    """(rounds, runs) of testing every pair, disjoint pairs in parallel (round-robin)."""
    rounds = n - 1 if n % 2 == 0 else n
    return rounds, n * (n - 1) // 2


def one_good_baseline(n: int) -> tuple[int, int]:
    """(rounds, runs) of pairing each node in turn with one known-good node."""
    return n - 1, n - 1

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
from dataclasses import dataclass, field
from typing import Literal

Group = tuple[str, ...]
Link = tuple[str, str]  # sorted pair of node names
GroupTest = Callable[[Sequence[Group]], Sequence[bool]]  # one round: True where the group was slow
Split = Literal["pairs", "binary"]


def link(a: str, b: str) -> Link:
    return (a, b) if a <= b else (b, a)


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


class IsolationError(ValueError):
    """Inputs the search cannot work with (duplicate names, an oracle that answers wrongly)."""


@dataclass
class _State:
    confirm: int
    good: dict[str, None] = field(default_factory=dict)  # insertion-ordered set
    bad: set[str] = field(default_factory=set)
    links: set[Link] = field(default_factory=set)
    slow_with: dict[str, set[str]] = field(default_factory=dict)
    reasons: dict[str, str] = field(default_factory=dict)

    def mark_good(self, nodes: Iterable[str]) -> None:
        for n in nodes:
            if n not in self.bad:
                self.good.setdefault(n, None)

    def mark_bad(self, node: str, why: str) -> None:
        self.bad.add(node)
        self.good.pop(node, None)
        self.reasons[node] = why

    def mark_link(self, a: str, b: str, why: str) -> None:
        pair = link(a, b)
        self.links.add(pair)
        self.reasons[f"{pair[0]}<->{pair[1]}"] = why


@dataclass
class _Ask:
    """Groups one task wants tested this round; ``partners`` counts the good nodes it needs."""

    groups: list[list[str]]
    partners: list[int]  # indexes into groups of the groups that need one good partner


class _Task:
    nodes: tuple[str, ...]

    def holds(self, st: _State) -> list[str]:
        """The nodes this task keeps out of the pool of partners."""
        return list(self.nodes)

    def resolve(self, st: _State, rnd: int) -> list[_Task] | None:
        """Tasks to replace this one when what it wanted to know is already known; None: still open."""
        return None

    def ask(self, st: _State, spare: int) -> _Ask | None:
        raise TypeError("abstract")

    def settle(self, groups: list[Group], slow: list[bool], st: _State, rnd: int) -> list[_Task]:
        raise TypeError("abstract")


def _chunks(items: Sequence[str], parts: int) -> list[tuple[str, ...]]:
    parts = max(1, min(parts, len(items)))
    q, r = divmod(len(items), parts)
    out, i = [], 0
    for p in range(parts):
        size = q + (1 if p < r else 0)
        out.append(tuple(items[i : i + size]))
        i += size
    return out


class _Suspect(_Task):
    """A group known (or, for the first screen, suspected) to hold a fault: split and test the parts."""

    def __init__(self, nodes: Sequence[str], parts: int, known_slow: bool, observed: bool = True) -> None:
        self.nodes = tuple(nodes)
        self.parts = parts
        self.known_slow = known_slow
        self.observed = observed  # False: slow only by the caller's word, so a link found is re-tested
        self._chunks: list[tuple[str, ...]] = []

    def _open(self, st: _State) -> list[str]:
        return [n for n in self.nodes if n not in st.good and n not in st.bad]

    def holds(self, st: _State) -> list[str]:
        return self._open(st)

    def resolve(self, st: _State, rnd: int) -> list[_Task] | None:
        if self._open(st):
            return None
        if self.known_slow and not any(n in st.bad for n in self.nodes):
            return _hunt([(n,) for n in self.nodes], st, rnd, "every node good, slow together", self.observed)
        return []

    def ask(self, st: _State, spare: int) -> _Ask | None:
        open_nodes = self._open(st)
        # as many parts as wanted, but no more one-node parts than there are good partners free
        for parts in range(min(self.parts, len(open_nodes)), 0, -1):
            self._chunks = _chunks(open_nodes, parts)
            if sum(len(c) == 1 for c in self._chunks) <= spare or parts <= 2:
                break
        groups = [list(c) for c in self._chunks]
        return _Ask(groups, [i for i, c in enumerate(self._chunks) if len(c) == 1])

    def settle(self, groups: list[Group], slow: list[bool], st: _State, rnd: int) -> list[_Task]:
        nxt: list[_Task] = []
        for chunk, group, was_slow in zip(self._chunks, groups, slow, strict=True):
            if not was_slow:
                st.mark_good(group)
            elif len(chunk) > 1:
                # three or fewer: test each with a good partner at once rather than halve twice
                nxt.append(_Suspect(chunk, len(chunk) if len(chunk) <= 3 else 2, known_slow=True))
            else:
                nxt.extend(_singleton_slow(chunk[0], group[-1], st, rnd))
        if self.known_slow and not any(slow) and not any(n in st.bad for n in self.nodes):
            rest = tuple(n for n in self.nodes if not any(n in c for c in self._chunks))
            nxt.extend(_hunt([*self._chunks, rest], st, rnd, "parts each fast, together slow", self.observed))
        return nxt


def _singleton_slow(node: str, partner: str, st: _State, rnd: int) -> list[_Task]:
    partners = st.slow_with.setdefault(node, set())
    partners.add(partner)
    if len(partners) >= st.confirm:
        who = ", ".join(sorted(partners))
        st.mark_bad(node, f"slow with proven-good node(s) {who} (round {rnd})")
        return []
    return [_Singleton(node)]


class _Singleton(_Task):
    """One node slow with a good partner; needs more good partners before it is called bad."""

    def __init__(self, node: str) -> None:
        self.nodes = (node,)

    def resolve(self, st: _State, rnd: int) -> list[_Task] | None:
        return [] if self.nodes[0] in st.good or self.nodes[0] in st.bad else None

    def ask(self, st: _State, spare: int) -> _Ask | None:
        return _Ask([[self.nodes[0]]], [0])

    def settle(self, groups: list[Group], slow: list[bool], st: _State, rnd: int) -> list[_Task]:
        node = self.nodes[0]
        if slow[0]:
            return _singleton_slow(node, groups[0][-1], st, rnd)
        st.mark_good(groups[0])
        for earlier in sorted(st.slow_with.pop(node, set())):
            st.mark_link(node, earlier, f"{node} fast with {groups[0][-1]} but slow with {earlier} (round {rnd})")
        return []


def _hunt(parts: list[tuple[str, ...]], st: _State, rnd: int, why: str, observed: bool) -> list[_Task]:
    """Search ``parts`` (each fast, together slow) for the bad link; ``observed``: "slow" was measured."""
    parts = [p for p in parts if p]
    if len(parts) == 2 and len(parts[0]) == 1 and len(parts[1]) == 1:
        if not observed:
            return [_Confirm(parts[0][0], parts[1][0])]
        st.mark_link(parts[0][0], parts[1][0], f"both nodes good, slow together ({why}; round {rnd})")
        return []
    return [_LinkHunt(parts, observed)] if len(parts) >= 2 else []


class _Confirm(_Task):
    """A link inferred from an unmeasured premise: run the two nodes together before naming it."""

    def __init__(self, a: str, b: str) -> None:
        self.nodes = (a, b)

    def ask(self, st: _State, spare: int) -> _Ask | None:
        return _Ask([list(self.nodes)], [])

    def settle(self, groups: list[Group], slow: list[bool], st: _State, rnd: int) -> list[_Task]:
        a, b = self.nodes
        if slow[0]:
            st.mark_link(a, b, f"both nodes good, slow together (round {rnd})")
        else:
            st.mark_good(self.nodes)
            st.reasons["unreproduced"] = f"the slow run did not reproduce: every group tested fast (round {rnd})"
        return []


class _LinkHunt(_Task):
    """Parts that are each fast but slow together: a bad link runs between two of them."""

    def __init__(self, parts: list[tuple[str, ...]], observed: bool) -> None:
        self.parts = parts
        self.observed = observed
        self.nodes = tuple(n for p in parts for n in p)
        self._plan: list[list[tuple[str, ...]]] = []

    def ask(self, st: _State, spare: int) -> _Ask | None:
        if len(self.parts) > 2:
            half = len(self.parts) // 2
            self._plan = [self.parts[:half], self.parts[half:]]
            groups = [[n for p in side for n in p] for side in self._plan if len(side) > 1]
            return _Ask(groups, [])
        a, b = self.parts
        if len(a) == 1:
            a, b = b, a
        a1, a2 = _chunks(a, 2)
        self._plan = [[a1, b], [a2, b]]
        return _Ask([[*a1, *b]], [])

    def settle(self, groups: list[Group], slow: list[bool], st: _State, rnd: int) -> list[_Task]:
        if len(self.parts) > 2:
            tested = [side for side in self._plan if len(side) > 1]
            slow_sides = [side for side, s in zip(tested, slow, strict=True) if s]
            if slow_sides:
                return [t for side in slow_sides for t in _hunt(side, st, rnd, "link search", True)]
            merged = [tuple(n for p in side for n in p) for side in self._plan]
            return _hunt(merged, st, rnd, "link search", self.observed)
        if slow[0]:
            return _hunt(self._plan[0], st, rnd, "link search", True)
        return _hunt(self._plan[1], st, rnd, "link search", self.observed)


def _fallback(tasks: list[_Task], st: _State, tried: set[Link]) -> list[list[str]]:
    """No good node is known yet: pair open suspects in pairs not tried before, to find some."""
    open_nodes = [n for t in tasks for n in t.nodes if n not in st.good and n not in st.bad]
    groups: list[list[str]] = []
    used: set[str] = set()
    for i, a in enumerate(open_nodes):
        if a in used:
            continue
        for b in open_nodes[i + 1 :]:
            if b not in used and link(a, b) not in tried:
                groups.append([a, b])
                used.update((a, b))
                break
    return groups


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
    st = _State(confirm)
    st.mark_good(n for n in known_good if n not in order)
    cap = max_parallel if max_parallel is not None else max(1, len(order))
    limit = max_rounds if max_rounds is not None else 4 * (len(order) + 2)
    top = max(2, len(order) // 2) if split == "pairs" else 2
    tasks: list[_Task] = [_Suspect(order, min(top, cap), known_slow=assume_slow, observed=False)] if len(order) > 1 else []
    rounds: list[RoundRecord] = []
    tried: set[Link] = set()
    verified = not verify

    found_at_verify = -1
    while len(rounds) < limit:
        tasks = _resolve_all(tasks, st, len(rounds))
        found = len(st.bad) + len(st.links)
        if not tasks and not verified and found != found_at_verify:
            verified, found_at_verify = True, found
            rest = [n for n in order if n not in st.bad and all(n != b for _, b in st.links)]
            if len(rest) >= 2:
                tasks = [_Verify(rest)]
        if not tasks:
            break
        planned, waiting = _plan_round(tasks, st, cap)
        if not planned:
            groups = _fallback(tasks, st, tried)[:cap]
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
        new_tasks: list[_Task] = []
        i = 0
        for task, gs in planned:
            n = len(gs)
            new_tasks.extend(task.settle([tuple(g) for g in gs], slow[i : i + n], st, len(rounds)))
            i += n
        if any(isinstance(task, _Verify) for task, _ in planned) and new_tasks:
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


class _Verify(_Task):
    """The nodes left after the search, run together once more: slow means a fault is still hidden."""

    def __init__(self, nodes: Sequence[str]) -> None:
        self.nodes = tuple(nodes)

    def ask(self, st: _State, spare: int) -> _Ask | None:
        return _Ask([list(self.nodes)], [])

    def settle(self, groups: list[Group], slow: list[bool], st: _State, rnd: int) -> list[_Task]:
        if not slow[0]:
            st.mark_good(self.nodes)
            return []
        return [_Suspect(self.nodes, 2, known_slow=True)]


def _resolve_all(tasks: list[_Task], st: _State, rnd: int) -> list[_Task]:
    out: list[_Task] = []
    queue = list(tasks)
    while queue:
        task = queue.pop(0)
        replacement = task.resolve(st, rnd)
        if replacement is None:
            out.append(task)
        else:
            queue.extend(replacement)
    return out


def _plan_round(tasks: list[_Task], st: _State, cap: int) -> tuple[list[tuple[_Task, list[list[str]]]], list[_Task]]:
    busy = {n for t in tasks for n in t.holds(st)}
    free = [g for g in st.good if g not in busy]
    planned: list[tuple[_Task, list[list[str]]]] = []
    waiting: list[_Task] = []
    used = 0
    for task in tasks:
        ask = task.ask(st, len(free))
        if ask is None or not ask.groups:
            continue
        if used + len(ask.groups) > cap:
            waiting.append(task)
            continue
        partners = _partners(ask, free, st)
        if partners is None:
            waiting.append(task)
            continue
        for i, g in zip(ask.partners, partners, strict=True):
            ask.groups[i].append(g)
            free.remove(g)
        used += len(ask.groups)
        planned.append((task, ask.groups))
    return planned, waiting


def _partners(ask: _Ask, free: list[str], st: _State) -> list[str] | None:
    """Free good nodes, one per group that needs one, each not yet seen slow with that group's node."""
    chosen: list[str] = []
    for i in ask.partners:
        seen = st.slow_with.get(ask.groups[i][0], set())
        pick = next((g for g in free if g not in seen and g not in chosen), None)
        if pick is None:
            return None
        chosen.append(pick)
    return chosen


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

"""The search behind :func:`acceptance.isolation.isolate`: one small task per open question.

Each task holds nodes whose state is open (a slow group to split, one node to pair with a
good partner, a bad link to narrow down, a final re-run) and, each round, asks for the
groups it wants run; the scheduler packs the asks of all tasks into one round of disjoint
groups, lending proven-good nodes as partners, and hands each task its answers. Tasks
never run anything themselves.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

Group = tuple[str, ...]
Link = tuple[str, str]  # sorted pair of node names


def link(a: str, b: str) -> Link:
    return (a, b) if a <= b else (b, a)


@dataclass
class State:
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


class Task:
    nodes: tuple[str, ...]

    def holds(self, st: State) -> list[str]:
        """The nodes this task keeps out of the pool of partners."""
        return list(self.nodes)

    def resolve(self, st: State, rnd: int) -> list[Task] | None:
        """Tasks to replace this one when what it wanted to know is already known; None: still open."""
        return None

    def ask(self, st: State, spare: int) -> _Ask | None:
        raise TypeError("abstract")

    def settle(self, groups: list[Group], slow: list[bool], st: State, rnd: int) -> list[Task]:
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


class Suspect(Task):
    """A group known (or, for the first screen, suspected) to hold a fault: split and test the parts."""

    def __init__(self, nodes: Sequence[str], parts: int, known_slow: bool, observed: bool = True) -> None:
        self.nodes = tuple(nodes)
        self.parts = parts
        self.known_slow = known_slow
        self.observed = observed  # False: slow only by the caller's word, so a link found is re-tested
        self._chunks: list[tuple[str, ...]] = []

    def _open(self, st: State) -> list[str]:
        return [n for n in self.nodes if n not in st.good and n not in st.bad]

    def holds(self, st: State) -> list[str]:
        return self._open(st)

    def resolve(self, st: State, rnd: int) -> list[Task] | None:
        if self._open(st):
            return None
        if self.known_slow and not any(n in st.bad for n in self.nodes):
            return _hunt([(n,) for n in self.nodes], st, rnd, "every node good, slow together", self.observed)
        return []

    def ask(self, st: State, spare: int) -> _Ask | None:
        open_nodes = self._open(st)
        # as many parts as wanted, but no more one-node parts than there are good partners free
        for parts in range(min(self.parts, len(open_nodes)), 0, -1):
            self._chunks = _chunks(open_nodes, parts)
            if sum(len(c) == 1 for c in self._chunks) <= spare or parts <= 2:
                break
        groups = [list(c) for c in self._chunks]
        return _Ask(groups, [i for i, c in enumerate(self._chunks) if len(c) == 1])

    def settle(self, groups: list[Group], slow: list[bool], st: State, rnd: int) -> list[Task]:
        nxt: list[Task] = []
        for chunk, group, was_slow in zip(self._chunks, groups, slow, strict=True):
            if not was_slow:
                st.mark_good(group)
            elif len(chunk) > 1:
                # three or fewer: test each with a good partner at once rather than halve twice
                nxt.append(Suspect(chunk, len(chunk) if len(chunk) <= 3 else 2, known_slow=True))
            else:
                nxt.extend(_singleton_slow(chunk[0], group[-1], st, rnd))
        if self.known_slow and not any(slow) and not any(n in st.bad for n in self.nodes):
            rest = tuple(n for n in self.nodes if not any(n in c for c in self._chunks))
            nxt.extend(_hunt([*self._chunks, rest], st, rnd, "parts each fast, together slow", self.observed))
        return nxt


def _singleton_slow(node: str, partner: str, st: State, rnd: int) -> list[Task]:
    partners = st.slow_with.setdefault(node, set())
    partners.add(partner)
    if len(partners) >= st.confirm:
        who = ", ".join(sorted(partners))
        st.mark_bad(node, f"slow with proven-good node(s) {who} (round {rnd})")
        return []
    return [_Singleton(node)]


class _Singleton(Task):
    """One node slow with a good partner; needs more good partners before it is called bad."""

    def __init__(self, node: str) -> None:
        self.nodes = (node,)

    def resolve(self, st: State, rnd: int) -> list[Task] | None:
        return [] if self.nodes[0] in st.good or self.nodes[0] in st.bad else None

    def ask(self, st: State, spare: int) -> _Ask | None:
        return _Ask([[self.nodes[0]]], [0])

    def settle(self, groups: list[Group], slow: list[bool], st: State, rnd: int) -> list[Task]:
        node = self.nodes[0]
        if slow[0]:
            return _singleton_slow(node, groups[0][-1], st, rnd)
        st.mark_good(groups[0])
        for earlier in sorted(st.slow_with.pop(node, set())):
            st.mark_link(node, earlier, f"{node} fast with {groups[0][-1]} but slow with {earlier} (round {rnd})")
        return []


def _hunt(parts: list[tuple[str, ...]], st: State, rnd: int, why: str, observed: bool) -> list[Task]:
    """Search ``parts`` (each fast, together slow) for the bad link; ``observed``: "slow" was measured."""
    parts = [p for p in parts if p]
    if len(parts) == 2 and len(parts[0]) == 1 and len(parts[1]) == 1:
        if not observed:
            return [_Confirm(parts[0][0], parts[1][0])]
        st.mark_link(parts[0][0], parts[1][0], f"both nodes good, slow together ({why}; round {rnd})")
        return []
    return [_LinkHunt(parts, observed)] if len(parts) >= 2 else []


class _Confirm(Task):
    """A link inferred from an unmeasured premise: run the two nodes together before naming it."""

    def __init__(self, a: str, b: str) -> None:
        self.nodes = (a, b)

    def ask(self, st: State, spare: int) -> _Ask | None:
        return _Ask([list(self.nodes)], [])

    def settle(self, groups: list[Group], slow: list[bool], st: State, rnd: int) -> list[Task]:
        a, b = self.nodes
        if slow[0]:
            st.mark_link(a, b, f"both nodes good, slow together (round {rnd})")
        else:
            st.mark_good(self.nodes)
            st.reasons["unreproduced"] = f"the slow run did not reproduce: every group tested fast (round {rnd})"
        return []


class _LinkHunt(Task):
    """Parts that are each fast but slow together: a bad link runs between two of them."""

    def __init__(self, parts: list[tuple[str, ...]], observed: bool) -> None:
        self.parts = parts
        self.observed = observed
        self.nodes = tuple(n for p in parts for n in p)
        self._plan: list[list[tuple[str, ...]]] = []

    def ask(self, st: State, spare: int) -> _Ask | None:
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

    def settle(self, groups: list[Group], slow: list[bool], st: State, rnd: int) -> list[Task]:
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


def fallback(tasks: list[Task], st: State, tried: set[Link]) -> list[list[str]]:
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


class Verify(Task):
    """The nodes left after the search, run together once more: slow means a fault is still hidden."""

    def __init__(self, nodes: Sequence[str]) -> None:
        self.nodes = tuple(nodes)

    def ask(self, st: State, spare: int) -> _Ask | None:
        return _Ask([list(self.nodes)], [])

    def settle(self, groups: list[Group], slow: list[bool], st: State, rnd: int) -> list[Task]:
        if not slow[0]:
            st.mark_good(self.nodes)
            return []
        return [Suspect(self.nodes, 2, known_slow=True)]


def resolve_all(tasks: list[Task], st: State, rnd: int) -> list[Task]:
    out: list[Task] = []
    queue = list(tasks)
    while queue:
        task = queue.pop(0)
        replacement = task.resolve(st, rnd)
        if replacement is None:
            out.append(task)
        else:
            queue.extend(replacement)
    return out


def plan_round(tasks: list[Task], st: State, cap: int) -> tuple[list[tuple[Task, list[list[str]]]], list[Task]]:
    busy = {n for t in tasks for n in t.holds(st)}
    free = [g for g in st.good if g not in busy]
    planned: list[tuple[Task, list[list[str]]]] = []
    waiting: list[Task] = []
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


def _partners(ask: _Ask, free: list[str], st: State) -> list[str] | None:
    """Free good nodes, one per group that needs one, each not yet seen slow with that group's node."""
    chosen: list[str] = []
    for i in ask.partners:
        seen = st.slow_with.get(ask.groups[i][0], set())
        pick = next((g for g in free if g not in seen and g not in chosen), None)
        if pick is None:
            return None
        chosen.append(pick)
    return chosen

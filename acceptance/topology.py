"""Plan multi-node NCCL runs from the inventory's topology labels.

Which nodes run together decides what a run proves: a pair under one leaf switch tests
the two nodes' NICs and that leaf; a pair under different spines also tests the uplinks
and the spine layer; a run across an NVLink block (GB200 NVL72 and the like) tests the
NVLink switch trays; a ring over the whole rack tests everything at once but says little
about *what* is slow (that is :mod:`acceptance.isolation`'s job). The planner turns
``(node, leaf, spine, nvlink_block)`` rows into disjoint groups so each kind of path is
exercised with every node busy in one round. Pure: no I/O.
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

Group = tuple[str, ...]
PairScope = Literal["same_leaf", "cross_spine"]


class TopologyError(ValueError):
    """Duplicate node names or labels the planner cannot use."""


@dataclass(frozen=True)
class Placement:
    """Where one node sits in the fabric, as the inventory labels it."""

    node: str
    leaf: str
    spine: str
    nvlink_block: str | None = None


@dataclass(frozen=True)
class RunPlan:
    """One round of disjoint runs: what it proves, the groups, and the nodes it could not place."""

    kind: str
    purpose: str
    groups: tuple[Group, ...]
    left_out: tuple[str, ...] = ()


def placements(rows: Iterable[tuple[str, str, str, str | None]]) -> list[Placement]:
    out = [Placement(*row) for row in rows]
    names = [p.node for p in out]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise TopologyError(f"duplicate node names: {', '.join(dupes)}")
    for p in out:
        if not p.node or not p.leaf or not p.spine:
            raise TopologyError(f"node {p.node!r}: node, leaf and spine labels are required")
    return out


def fabric_order(places: Sequence[Placement]) -> list[str]:
    """Nodes ordered spine, leaf, name: neighbours share a leaf, so a ring crosses each spine link least."""
    return [p.node for p in sorted(places, key=lambda p: (p.spine, p.leaf, p.node))]


def ring(places: Sequence[Placement]) -> RunPlan:
    """The whole set as one run, in fabric order."""
    order = fabric_order(places)
    groups = (tuple(order),) if len(order) >= 2 else ()
    return RunPlan("ring", "every node and path at once: the rack-wide baseline", groups,
                   tuple(order) if len(order) < 2 else ())


def _pair_off(names: list[str]) -> tuple[list[Group], list[str]]:
    pairs = [tuple(names[i : i + 2]) for i in range(0, len(names) - 1, 2)]
    return pairs, names[len(pairs) * 2 :]


def same_leaf_pairs(places: Sequence[Placement]) -> RunPlan:
    """Pairs under one leaf; a leaf's odd node pairs with another leaf's under the same spine."""
    by_leaf: dict[tuple[str, str], list[str]] = defaultdict(list)
    for p in sorted(places, key=lambda p: (p.spine, p.leaf, p.node)):
        by_leaf[(p.spine, p.leaf)].append(p.node)
    groups: list[Group] = []
    spare_by_spine: dict[str, list[str]] = defaultdict(list)
    for (spine, _leaf), names in by_leaf.items():
        pairs, rest = _pair_off(names)
        groups.extend(pairs)
        spare_by_spine[spine].extend(rest)
    left: list[str] = []
    for spine in sorted(spare_by_spine):
        pairs, rest = _pair_off(spare_by_spine[spine])
        groups.extend(pairs)
        left.extend(rest)
    return RunPlan("same_leaf_pairs", "each node's NICs and its leaf switch, no spine in the path",
                   tuple(groups), tuple(left))


def cross_spine_pairs(places: Sequence[Placement]) -> RunPlan:
    """Pairs whose nodes sit under different spines, drawing from the largest spines first."""
    by_spine: dict[str, list[str]] = defaultdict(list)
    for p in sorted(places, key=lambda p: (p.spine, p.leaf, p.node)):
        by_spine[p.spine].append(p.node)
    heap = [(-len(v), k) for k, v in by_spine.items()]
    heapq.heapify(heap)
    groups: list[Group] = []
    while len(heap) >= 2:
        n1, s1 = heapq.heappop(heap)
        n2, s2 = heapq.heappop(heap)
        groups.append((by_spine[s1].pop(0), by_spine[s2].pop(0)))
        for n, s in ((n1 + 1, s1), (n2 + 1, s2)):
            if n < 0:
                heapq.heappush(heap, (n, s))
    left = tuple(n for _, s in heap for n in by_spine[s])
    return RunPlan("cross_spine_pairs", "uplinks and the spine layer between two nodes",
                   tuple(groups), left)


def nvlink_blocks(places: Sequence[Placement]) -> RunPlan:
    """One run per NVLink block of two or more nodes; nodes outside any block are left out."""
    by_block: dict[str, list[str]] = defaultdict(list)
    loose: list[str] = []
    for p in sorted(places, key=lambda p: p.node):
        if p.nvlink_block:
            by_block[p.nvlink_block].append(p.node)
        else:
            loose.append(p.node)
    groups = [tuple(v) for _, v in sorted(by_block.items()) if len(v) >= 2]
    loose.extend(n for v in by_block.values() if len(v) < 2 for n in v)
    return RunPlan("nvlink_blocks", "the NVLink switch fabric inside each multi-node NVLink domain",
                   tuple(groups), tuple(sorted(loose)))


def acceptance_rounds(places: Sequence[Placement]) -> list[RunPlan]:
    """The multi-node rounds an acceptance run makes, cheapest evidence first; empty rounds dropped,
    and so is a round whose every group an earlier round already ran (two nodes: their ring is
    their pair, and running it twice proves nothing new)."""
    plans = [same_leaf_pairs(places), cross_spine_pairs(places), nvlink_blocks(places), ring(places)]
    out: list[RunPlan] = []
    ran: set[frozenset[str]] = set()
    for p in plans:
        groups = {frozenset(g) for g in p.groups}
        if p.groups and not groups <= ran:
            out.append(p)
            ran |= groups
    return out

"""One way to name the nodes a command acts on: names and hostlists, --rack, --pool, --all, --selector.

`provision n1 n2 --rack R` but `accept RACK --nodes a,b` (and `accept node-04`
answered "no nodes in rack 'node-04'"); `nodes list --pool bogus` was an empty
table with exit 0. Here every command that takes nodes reads them the same
way, against the store:

* positional names, each a name or a Slurm hostlist (``node-[01-04]``, ``r01-n[07-08],r02-n01``), or a
  rack's name (every node of it);
* ``--rack R`` / ``--pool P`` (repeatable), ``--all``, ``--selector key=value,…`` over state, pool,
  rack and sku; filters combine (a node must match all);
* a name, rack or pool the store does not know is bad input (exit 2) naming what it does know, never an
  empty selection that succeeds.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import typer

from lifecycle.cli._common import BAD_INPUT, fail
from lifecycle.drivers.slurm.hostlist import expand

if TYPE_CHECKING:  # the store (SQLAlchemy) is imported when a selection is made, not with the options
    from lifecycle.store import NodeRecord, Store

RackOpt = typer.Option([], "--rack", help="Every node of this rack (repeatable).")
PoolOpt = typer.Option([], "--pool", help="Every node of this pool (repeatable).")
AllOpt = typer.Option(False, "--all", help="Every node in the store.")
SelectorOpt = typer.Option(None, "--selector", "-l",
                           help="key=value[,key=value]: nodes whose state, pool, rack and sku match.")

SELECTOR_KEYS = ("state", "pool", "rack", "sku")


@dataclass(frozen=True)
class Selector:
    """``state=in_service,pool=training``: every pair must match."""

    pairs: tuple[tuple[str, str], ...]

    @classmethod
    def parse(cls, text: str) -> Selector:
        pairs: list[tuple[str, str]] = []
        for part in (p.strip() for p in text.split(",") if p.strip()):
            key, eq, value = part.partition("=")
            if not eq or key.strip() not in SELECTOR_KEYS or not value.strip():
                raise ValueError(f"--selector {text!r}: each part is KEY=VALUE with KEY one of "
                                 f"{', '.join(SELECTOR_KEYS)} (got {part!r})")
            pairs.append((key.strip(), value.strip()))
        if not pairs:
            raise ValueError("--selector is empty")
        return cls(tuple(pairs))

    def matches(self, r: NodeRecord) -> bool:
        have = {"state": r.state.value, "pool": r.pool, "rack": r.rack, "sku": r.sku}
        return all(have[k] == v for k, v in self.pairs)


def expand_names(targets: Sequence[str]) -> list[str]:
    """Names from positional targets and comma lists: hostlists expanded, order kept, each once."""
    names: list[str] = []
    for t in targets:
        try:
            names += expand(t)
        except ValueError as exc:
            fail(f"{t!r}: not a node name or hostlist: {exc}", BAD_INPUT)
    return list(dict.fromkeys(names))


def check_filters(records: Sequence[NodeRecord], racks: Sequence[str], pools: Sequence[str]) -> None:
    """A rack or pool no node of the store has is bad input (exit 2), naming those it has."""
    for value, kind, have in ((racks, "rack", sorted({r.rack for r in records})),
                              (pools, "pool", sorted({r.pool for r in records}))):
        bad = [v for v in value if v not in have]
        if bad:
            fail(f"unknown {kind}(s): {', '.join(bad)} ({kind}s in the store: {', '.join(have) or 'none'})",
                 BAD_INPUT)


def select(store: Store, targets: Sequence[str] = (), *, racks: Sequence[str] = (), pools: Sequence[str] = (),
           all_: bool = False, selector: str | None = None, racks_as_targets: bool = False) -> list[str]:
    """The nodes named, in store order for filters and in the order given for names; exit 2 on anything unknown."""
    records = store.nodes()
    known = {r.name: r for r in records}
    rack_names = sorted({r.rack for r in records})
    targets = list(targets)
    if racks_as_targets:  # `accept r01`: a positional rack name stands for its nodes
        racks = [*racks, *(t for t in targets if t in rack_names and t not in known)]
        targets = [t for t in targets if not (t in rack_names and t not in known)]
    filters = bool(racks or pools or selector)
    if sum((bool(targets), filters, all_)) != 1:
        fail("name the nodes one way: NODE… (names or hostlists), filters (--rack, --pool, --selector) or --all",
             BAD_INPUT)
    if all_:
        return [r.name for r in records]
    if targets:
        names = expand_names(targets)
        unknown = [n for n in names if n not in known]
        if unknown:
            fail(f"unknown node(s): {', '.join(unknown)} (the store has {len(known)}; import the inventory first "
                 "if it is new)", BAD_INPUT)
        return names
    check_filters(records, racks, pools)
    try:
        match = Selector.parse(selector) if selector else None
    except ValueError as exc:
        fail(str(exc), BAD_INPUT)
    chosen = [r.name for r in records if (not racks or r.rack in racks) and (not pools or r.pool in pools)
              and (match is None or match.matches(r))]
    if not chosen:
        fail("no node matches " + " and ".join([*(f"rack {r}" for r in racks), *(f"pool {p}" for p in pools),
                                                 *([f"selector {selector}"] if selector else [])]), BAD_INPUT)
    return chosen


def select_names(targets: Sequence[str] | None, *, racks: Sequence[str] = (), pools: Sequence[str] = (),
                 all_: bool = False, selector: str | None = None) -> list[str]:
    """:func:`select` against the default store, for a command that holds no store of its own."""
    from lifecycle.store import Store

    store = Store()
    try:
        return select(store, targets or [], racks=racks, pools=pools, all_=all_, selector=selector)
    finally:
        store.close()

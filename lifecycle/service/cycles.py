"""Phase times of role swaps and upgrades, read back from the node history for the metrics.

A role swap, an upgrade, or an elastic lend or reclaim runs one node cycle
(``lifecycle/workflows/node_cycle.py``) and records, per node, one history row
(``racklife_node_changes``: kind ``role-swap``, the change's kind ``image``,
``firmware``, ``bios``, or ``lend``, ``reclaim``) whose
reason is ``run <id>: `` and ``node_cycle.summary``'s line: the verdict, then
each phase's seconds (``drain wait 12.0 s, switch 3.5 s, retest 1.0 s, join
2.0 s``). The store is the one record of what happened, so the per-phase
histograms are computed from those rows at each scrape, like every other
metric. The format is ``summary``'s; a test round-trips it, so a change to
one side breaks it. A cycle row whose line cannot be read is counted as
``unreadable``, never dropped silently.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime

import sqlalchemy as sa

from lifecycle.store import Store, db

# history kind -> the workflow that writes it (the metric's label)
CYCLE_KINDS: dict[str, str] = {"role-swap": "role_swap", "image": "upgrade", "firmware": "upgrade",
                               "bios": "upgrade", "lend": "lend", "reclaim": "reclaim"}
_LINE = re.compile(r"^run (?P<run>[^:]+): (?P<verdict>done|failed, node \S+); (?P<times>[^;]*);")
_TIME = re.compile(r"^(?P<phase>[a-z][a-z0-9 .-]*) (?P<s>\d+(?:\.\d+)?) s$")


@dataclass(frozen=True)
class CycleRow:
    node: str
    workflow: str  # role_swap | upgrade
    outcome: str  # done | failed | unreadable
    phases: dict[str, float]  # phase (underscored, as node_cycle names it) -> seconds
    at: datetime


def parse(reason: str) -> tuple[str, dict[str, float]] | None:
    """(outcome, phases) of a cycle's history line; None if it is not one."""
    m = _LINE.match(reason)
    if m is None:
        return None
    phases: dict[str, float] = {}
    for item in filter(None, (t.strip() for t in m.group("times").split(", "))):
        t = _TIME.match(item)
        if t is None:
            return None
        phases[t.group("phase").replace(" ", "_")] = float(t.group("s"))
    return ("done" if m.group("verdict") == "done" else "failed"), phases


def read_cycles(store: Store) -> tuple[CycleRow, ...]:
    """Every node cycle the history records, once per run and node (an upgrade of two changes writes two rows)."""
    c = db.node_changes
    q = (sa.select(c.c.node, c.c.kind, c.c.reason, c.c.at).where(c.c.kind.in_(list(CYCLE_KINDS)))
         .order_by(c.c.id))
    seen: set[tuple[str, str]] = set()
    out = []
    with store.reader.connect() as conn:
        for r in conn.execute(q):
            if (r.node, r.reason) in seen:
                continue
            seen.add((r.node, r.reason))
            parsed = parse(r.reason)
            outcome, phases = parsed if parsed else ("unreadable", {})
            at = r.at if r.at.tzinfo else r.at.replace(tzinfo=UTC)
            out.append(CycleRow(r.node, CYCLE_KINDS[r.kind], outcome, phases, at))
    return tuple(out)

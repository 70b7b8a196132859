"""The one progress display of every long command: per node, its phase, how long, and what it waits on.

Progress lines used to show node states only ("draining: node-03"), and
apply, role-swap, decommission, upgrade and repair had none: a role swap
waiting twenty minutes for a job to end looked like a hang. The workflows
write what each node waits on to the store (``lifecycle.workflows.waiting``,
table ``racklife_waits``); this module reads it with the nodes' states and
shows it, the same way for a run of this process, one handed to
``racklife serve``, and ``racklife workflows show RUN --watch`` in another
shell:

* on a terminal, a Rich Live table (node, phase, time in it, waiting on),
  redrawn every second and folded, never cut, at any width;
* off a terminal, one timestamped plain line per node whenever its phase or
  what it waits on changes (and every minute while nothing does), never
  wrapped, so a log or ``grep`` reads whole lines:

  ``12:04:31 gpu-010 draining (8 s): waiting on drain of job 12 (root, wrap) (deadline 600 s) for 7 s``
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from rich.console import Console, RenderableType
from rich.table import Table

QUIET_S = 60.0  # a plain line at least this often while waiting, so a wait never looks like a hang


@dataclass(frozen=True)
class NodeProgress:
    """Where one node is: its state (the phase) since when, and what its run waits on, if anything."""

    node: str
    state: str
    state_since: datetime | None = None
    waiting_on: str = ""
    waiting_since: datetime | None = None
    step: str = ""  # the step of the run that waits (leave, boot, burn-in, ...)

    def key(self) -> tuple[str, str]:
        """What a plain line is printed again for (not the clock)."""
        return self.state, self.waiting_on


Reader = Callable[[Sequence[str], Collection[str] | None], list[NodeProgress]]


def elapsed(since: datetime | None, now: datetime | None = None) -> str:
    """``7 s``, ``3 m 05 s``, ``2 h 04 m``: how long ago ``since`` was, for people."""
    if since is None:
        return "-"
    s = max(0, int(((now or datetime.now(UTC)) - since).total_seconds()))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} m {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} m"


def line(p: NodeProgress, now: datetime | None = None) -> str:
    """The plain line of one node (without the timestamp)."""
    text = f"{p.node} {p.state} ({elapsed(p.state_since, now)})"
    if p.waiting_on:
        text += f": waiting on {p.waiting_on} for {elapsed(p.waiting_since, now)}"
    return text


def table(what: str, waited_s: float, rows: Sequence[NodeProgress], now: datetime | None = None) -> RenderableType:
    """The live view: one row per node; long waits fold onto more lines rather than being cut."""
    t = Table(title=f"{what}, {waited_s:.0f} s", title_justify="left", expand=False)
    t.add_column("node", no_wrap=True)
    t.add_column("phase", no_wrap=True)
    t.add_column("for", no_wrap=True)
    t.add_column("waiting on", overflow="fold")
    for p in rows:
        waits = f"{p.waiting_on} ({elapsed(p.waiting_since, now)})" if p.waiting_on else "-"
        t.add_row(p.node, p.state, elapsed(p.state_since, now), waits)
    return t


def read_store(nodes: Sequence[str], runs: Collection[str] | None) -> list[NodeProgress]:
    """The nodes' states and their runs' waits (of ``runs`` and their child runs, when given), from the store."""
    from lifecycle.store import NodeNotFound, Store
    from lifecycle.store import waits as wait_records

    store = Store()
    try:
        found = {w.node: w for w in wait_records.current(store, nodes=nodes, runs=runs)}
        out = []
        for n in nodes:
            try:
                rec = store.get(n)
                state, since = rec.state.value, rec.state_since
            except NodeNotFound:
                state, since = "unknown", None
            w = found.get(n)
            out.append(NodeProgress(n, state, since, w.waiting_on if w else "", w.since if w else None,
                                    w.phase if w else ""))
        return out
    finally:
        store.close()


class Plain:
    """Off a terminal: a timestamped line per node when it changes, and all of them every ``QUIET_S``."""

    def __init__(self, console: Console, what: str) -> None:
        self.console = console
        self.what = what
        self.last: dict[str, tuple[str, str]] = {}
        self.last_at = 0.0

    def say(self, text: str) -> None:
        self.console.print(f"{time.strftime('%H:%M:%S')} {text}", markup=False, soft_wrap=True,
                           highlight=False)

    def show(self, rows: Sequence[NodeProgress]) -> None:
        quiet = time.monotonic() - self.last_at >= QUIET_S
        for p in rows:
            if quiet or self.last.get(p.node) != p.key():
                self.say(line(p))
                self.last[p.node] = p.key()
                self.last_at = time.monotonic()
        if quiet:
            self.last_at = time.monotonic()

"""`racklife report fleet`: the fleet over a window as one self-contained HTML page, for people.

Metrics answer "what is it now" and Prometheus keeps them only as long as
its retention; the people who decide where capacity goes ask "what happened
last month, and why". The store has the whole answer: the transition history
gives every pool's GPUs by what they were doing at any time, the capacity
ledger (:mod:`lifecycle.service.ledger`) their GPU-hours, and the acceptance
records every verdict with its findings (the failing checks, and the Xids a
kernel-log or NVML check saw). The page is built like the acceptance report
(:mod:`acceptance.reports`): styles and SVG plots inline, no scripts, no
external assets, so it opens offline from an archive years later.
"""

from __future__ import annotations

import bisect
import html
import json
from collections import Counter, defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from acceptance.plots import figure_svg
from lifecycle.model.skus import SKUS
from lifecycle.model.states import State
from lifecycle.service.fleet import CAPACITY, Capacity
from lifecycle.service.ledger import Ledger, capacity_ledger, pool_at
from lifecycle.store import Store, db

if TYPE_CHECKING:
    from matplotlib.axes import Axes

XID_CHECKS = frozenset({"kernel_xid", "xid_events"})  # burnin's checks whose measured value is the Xid list
UNREADABLE = "summary unreadable"  # a record whose findings cannot be read is a cause of its own
NO_FINDING = "no failing finding recorded"
SAMPLES = 96
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_COLORS = {"in_service": "#2e7d32", "lent": "#0277bd", "draining": "#f9a825", "quarantined": "#c62828",
           "failed": "#6a1b9a", "maintenance": "#ef6c00", "bringup": "#90a4ae", "retired": "#424242"}


@dataclass(frozen=True)
class AcceptanceEntry:
    node: str
    passed: bool
    at: datetime
    causes: tuple[str, ...]  # the checks that failed (empty for a pass)
    xids: tuple[int, ...]  # the Xids the failing Xid checks measured


@dataclass(frozen=True)
class FleetReport:
    since: datetime
    until: datetime
    times: tuple[datetime, ...]
    gpus: dict[str, dict[str, list[int]]]  # pool -> Capacity -> GPUs at each of ``times``
    ledger: Ledger
    acceptance: tuple[AcceptanceEntry, ...]

    @property
    def by_check(self) -> Counter[str]:
        return Counter(c for a in self.acceptance for c in a.causes)

    @property
    def by_xid(self) -> Counter[int]:
        return Counter(x for a in self.acceptance for x in a.xids)


def _aware(v: datetime) -> datetime:
    return v if v.tzinfo else v.replace(tzinfo=UTC)


def _series(store: Store, times: list[datetime]) -> dict[str, dict[str, list[int]]]:
    t, n, c = db.transitions, db.nodes, db.node_changes
    with store.reader.connect() as conn:
        nodes = {r.name: (r.sku, r.pool) for r in conn.execute(sa.select(n.c.name, n.c.sku, n.c.pool))}
        pools = {r.name for r in conn.execute(sa.select(db.pools.c.name))} | {p for _s, p in nodes.values()}
        moves: dict[str, list[tuple[datetime, State]]] = defaultdict(list)
        for m in conn.execute(sa.select(t.c.node, t.c.target, t.c.at).order_by(t.c.id)):
            moves[m.node].append((_aware(m.at), State(m.target)))
        changes: dict[str, list[tuple[datetime, str, str]]] = defaultdict(list)
        for ch in conn.execute(sa.select(c.c.node, c.c.old, c.c.new, c.c.at).where(c.c.kind == "pool")
                               .order_by(c.c.id)):
            changes[ch.node].append((_aware(ch.at), ch.old or "", ch.new or ""))
    out = {p: {cap.value: [0] * len(times) for cap in Capacity} for p in sorted(pools)}
    for name, history in moves.items():
        if name not in nodes:
            continue
        sku, current = nodes[name]
        gpus = SKUS[sku].gpu_count if sku in SKUS else 0
        stamps = [at for at, _s in history]
        for i, when in enumerate(times):
            k = bisect.bisect_right(stamps, when)
            if k == 0:
                continue  # not enrolled yet
            pool = pool_at(changes.get(name, []), current, when)
            caps = out.setdefault(pool, {cap.value: [0] * len(times) for cap in Capacity})
            caps[CAPACITY[history[k - 1][1]].value][i] += gpus
    return out


def _entry(node: str, passed: bool, at: datetime, summary: str) -> AcceptanceEntry:
    try:
        doc = json.loads(summary)
        findings = [f for f in doc.get("findings", []) if isinstance(f, dict)]
        bad = [f for f in findings if f["verdict"] in ("fail", "error")]
        causes = tuple(sorted({str(f["check"]) for f in bad}))
        xids = tuple(sorted({int(x) for f in bad if f["check"] in XID_CHECKS
                             for x in (f.get("measured") or [])}))
    except (ValueError, KeyError, TypeError, AttributeError):
        return AcceptanceEntry(node, passed, at, () if passed else (UNREADABLE,), ())
    if not passed and not causes:
        causes = (NO_FINDING,)
    return AcceptanceEntry(node, passed, at, () if passed else causes, () if passed else xids)


def build(store: Store, since: datetime, until: datetime | None = None, samples: int = SAMPLES) -> FleetReport:
    """The report's numbers over ``[since, until)``; an empty window is a ValueError (the ledger's)."""
    until = until or datetime.now(UTC)
    ledger = capacity_ledger(store, since, until)
    step = (until - since) / (samples - 1)
    times = [since + i * step for i in range(samples)]
    a = db.acceptance_records
    q = (sa.select(a.c.node, a.c.passed, a.c.created_at, a.c.summary)
         .where(a.c.created_at >= since, a.c.created_at < until).order_by(a.c.created_at))
    with store.reader.connect() as conn:
        acceptance = tuple(_entry(r.node, bool(r.passed), _aware(r.created_at), r.summary) for r in conn.execute(q))
    return FleetReport(since, until, tuple(times), _series(store, times), ledger, acceptance)


# ------------------------------------------------------------------ plots


def _empty(ax: Axes, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center")
    ax.set_axis_off()


def _pools_plot(r: FleetReport) -> str:
    from matplotlib.figure import Figure

    pools = [p for p, caps in r.gpus.items() if any(any(v) for v in caps.values())]
    fig = Figure(figsize=(8, 0.6 + 2.2 * max(1, len(pools))))
    if not pools:
        _empty(fig.add_subplot(), "no node of any pool in the window")
        return figure_svg(fig)
    axes = fig.subplots(len(pools), 1, squeeze=False, sharex=True)
    for row, pool in enumerate(pools):
        ax = axes[row][0]
        caps = [(c, v) for c, v in r.gpus[pool].items() if any(v)]
        ax.stackplot(list(r.times), *[v for _c, v in caps], labels=[c for c, _v in caps],
                     colors=[_COLORS[c] for c, _v in caps], step="post")
        ax.set_title(f"{pool}: GPUs by status", fontsize=9, loc="left")
        ax.set_ylabel("GPUs", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.autofmt_xdate()
    return figure_svg(fig)


def _ledger_plot(r: FleetReport) -> str:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8, 1.2 + 0.5 * max(1, len(r.ledger.by_capacity))))
    ax = fig.add_subplot()
    pools = sorted(p for p, caps in r.ledger.by_capacity.items() if any(caps.values()))
    if not pools:
        _empty(ax, "no GPU-hours in the window")
        return figure_svg(fig)
    left = [0.0] * len(pools)
    for cap in Capacity:
        widths = [r.ledger.by_capacity[p][cap.value] for p in pools]
        if any(widths):
            ax.barh(pools, widths, left=left, color=_COLORS[cap.value], label=cap.value)
            left = [a + b for a, b in zip(left, widths, strict=True)]
    ax.set_xlabel("GPU-hours", fontsize=8)
    ax.tick_params(labelsize=7)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return figure_svg(fig)


def _acceptance_plot(r: FleetReport) -> str:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8, 2.6))
    ax = fig.add_subplot()
    if not r.acceptance:
        _empty(ax, "no acceptance record in the window")
        return figure_svg(fig)
    daily = r.until - r.since > timedelta(days=2)
    width = timedelta(days=1) if daily else timedelta(hours=1)

    def bucket(at: datetime) -> datetime:
        return at.replace(hour=0, minute=0, second=0, microsecond=0) if daily else \
            at.replace(minute=0, second=0, microsecond=0)
    passed = Counter(bucket(a.at) for a in r.acceptance if a.passed)
    failed = Counter(bucket(a.at) for a in r.acceptance if not a.passed)
    keys = sorted(set(passed) | set(failed))
    xs = [(k - _EPOCH) / timedelta(days=1) for k in keys]  # matplotlib's date numbers (epoch 1970)
    days = 0.8 * width / timedelta(days=1)  # matplotlib's date unit
    ax.bar(xs, [passed[k] for k in keys], width=days, align="edge", color=_COLORS["in_service"], label="pass")
    ax.bar(xs, [failed[k] for k in keys], width=days, align="edge", bottom=[passed[k] for k in keys],
           color=_COLORS["quarantined"], label="fail")
    ax.xaxis_date()
    ax.set_ylabel(f"records per {'day' if daily else 'hour'}", fontsize=8)
    ax.tick_params(labelsize=7)
    ax.legend(fontsize=7)
    fig.autofmt_xdate()
    return figure_svg(fig)


def _causes_plot(counts: Counter[Any], what: str) -> str:
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    items = counts.most_common(15)
    fig = Figure(figsize=(8, 1.0 + 0.35 * max(1, len(items))))
    ax = fig.add_subplot()
    if not items:
        _empty(ax, f"no failure {what} in the window")
        return figure_svg(fig)
    labels = [f"Xid {k}" if isinstance(k, int) else str(k) for k, _v in reversed(items)]
    ax.barh(labels, [v for _k, v in reversed(items)], color=_COLORS["quarantined"])
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("failed records", fontsize=8)
    ax.tick_params(labelsize=7)
    return figure_svg(fig)


# ------------------------------------------------------------------ page

_CSS = """body{font-family:sans-serif;margin:2em;color:#212121}table{border-collapse:collapse;margin:1em 0}
td,th{border:1px solid #bdbdbd;padding:3px 8px;font-size:13px;text-align:right}td:first-child,th:first-child
{text-align:left}section{margin-bottom:2.5em}.fail{color:#c62828}.pass{color:#2e7d32}"""


def _table(headers: list[str], rows: list[list[str]], row_attrs: list[str] | None = None) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join(f"<tr{(row_attrs or [''] * len(rows))[i]}>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>"
                   for i, row in enumerate(rows))
    return f"<table><tr>{head}</tr>{body}</table>"


def render_html(r: FleetReport) -> str:
    e = html.escape
    caps = [c.value for c in Capacity]
    ledger_rows = [[e(p), *(f"{r.ledger.by_capacity[p][c]:.1f}" for c in caps), f"{r.ledger.moving(p):.1f}"]
                   for p in sorted(r.ledger.by_capacity) if any(r.ledger.by_capacity[p].values())]
    npass = sum(a.passed for a in r.acceptance)
    recent = list(reversed(r.acceptance))[:50]
    acc_rows = [[f"{a.at:%Y-%m-%d %H:%M}Z", e(a.node), "pass" if a.passed else "fail", e(", ".join(a.causes)),
                 e(", ".join(str(x) for x in a.xids))] for a in recent]
    acc_attrs = [f' class="{"pass" if a.passed else "fail"}" data-node="{e(a.node)}"' for a in recent]
    checks = [[e(k), str(v)] for k, v in r.by_check.most_common()]
    xids = [[f"Xid {k}", str(v)] for k, v in r.by_xid.most_common()]
    window = f"{r.since:%Y-%m-%d %H:%M}Z to {r.until:%Y-%m-%d %H:%M}Z"
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>racklife fleet report, {e(window)}</title>
<style>{_CSS}</style></head><body>
<h1>racklife fleet report</h1>
<p>From {e(window)}: {len(r.gpus)} pool(s), <span id="count-records">{len(r.acceptance)}</span> acceptance
record(s), <span id="count-pass">{npass}</span> passed, <span id="count-fail">{len(r.acceptance) - npass}</span>
failed.</p>
<section id="pools"><h2>Pools over time</h2>{_pools_plot(r)}</section>
<section id="ledger"><h2>Capacity ledger (GPU-hours)</h2>{_ledger_plot(r)}
{_table(["pool", *caps, "moving"], ledger_rows)}
<p>moving: the hours in lending and reclaiming (part of lent).</p></section>
<section id="acceptance"><h2>Acceptance history</h2>{_acceptance_plot(r)}
{_table(["time", "node", "verdict", "failed checks", "Xids"], acc_rows, acc_attrs)}
<p>The newest {len(recent)} of {len(r.acceptance)} record(s).</p></section>
<section id="causes"><h2>Failure causes</h2>
<h3>By check</h3>{_causes_plot(r.by_check, "checks")}{_table(["check", "failed records"], checks)}
<h3>By Xid</h3>{_causes_plot(r.by_xid, "Xids")}{_table(["Xid", "failed records"], xids)}</section>
</body></html>
"""

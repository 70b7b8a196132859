"""The report's plots, as inline SVG text: busbw against message size, and the fleet's spread.

A table of peak numbers hides the shape of a curve: a node whose busbw flattens early
(a link trained at a lower speed) looks like its peers at 8 GiB but not at 256 MiB, and
a fleet distribution shows at a glance whether one node trails or the whole rack does.
Figures are built with matplotlib's object API on the Agg/SVG backends (no pyplot
global state, safe in a worker thread) and rendered to SVG with glyphs as paths, so the
page needs no fonts, files or network. matplotlib is imported when a plot is drawn, not
with this module: every ``racklife`` command that loads the workflows imports it, and
matplotlib alone takes about a second to import. An acceptance run calls :func:`preload`
when burn-in starts, so that second (and the font cache's load) is spent while the nodes
work rather than after them.
"""

from __future__ import annotations

import io
import re
import threading
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from acceptance.judge import MODIFIED_Z, FleetStat, OutlierPolicy

if TYPE_CHECKING:
    from matplotlib.figure import Figure

Curve = Sequence[tuple[int, float]]  # (message size in bytes, busbw GB/s)

_PASS, _FAIL = "#2e7d32", "#c62828"
_FAILING = ("#c62828", "#ef6c00", "#6a1b9a", "#ad1457", "#0277bd", "#4e342e")  # one hue per failing node


def _warm() -> None:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(1, 1))
    ax = fig.add_subplot()
    ax.set_xscale("log", base=2)
    ax.plot([1, 2], [1, 2], marker="o")
    ax.set_title("warm-up", fontsize=8)
    figure_svg(fig)


def preload() -> threading.Thread:
    """Import matplotlib and draw one throw-away figure in a daemon thread; return the thread.

    A plot drawn later waits for the import (Python's import lock) instead of repeating it.
    """
    thread = threading.Thread(target=_warm, name="plots-preload", daemon=True)
    thread.start()
    return thread


def figure_svg(fig: Figure) -> str:
    """The figure as SVG text to embed in an HTML page (glyphs as paths: no fonts needed)."""
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None})
    text = buf.getvalue()
    # drop the XML prolog and DOCTYPE: the SVG is embedded in an HTML page
    return re.sub(r"^.*?(<svg\b)", r"\1", text, count=1, flags=re.S)


def _size_label(n: float) -> str:
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= div:
            return f"{n / div:g} {unit}"
    return f"{n:g} B"


def busbw_curves(curves: Mapping[str, Curve], failing: set[str], title: str, floor: float | None = None) -> str:
    """One line per node (failing nodes in red), optional horizontal floor; returns SVG."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7.5, 3.6))
    ax = fig.add_subplot()
    hue = {name: _FAILING[i % len(_FAILING)] for i, name in enumerate(sorted(failing))}
    for name, points in sorted(curves.items(), key=lambda kv: (kv[0] in failing, kv[0])):
        if not points:
            continue
        xs = [p[0] for p in points]
        ys = [p[1] for p in points]
        bad = name in failing
        ax.plot(xs, ys, marker="o", markersize=3, linewidth=1.8 if bad else 1.0,
                color=hue.get(name, _PASS), alpha=1.0 if bad else 0.55, label=name if bad else None)
    if floor is not None:
        ax.axhline(floor, color="#37474f", linestyle="--", linewidth=1, label=f"profile floor {floor:g} GB/s")
    ax.set_xscale("log", base=2)
    ticks = sorted({p[0] for pts in curves.values() for p in pts})
    if ticks:
        ax.set_xticks(ticks)
        ax.set_xticklabels([_size_label(t) for t in ticks], rotation=30, fontsize=7)
    ax.set_xlabel("message size")
    ax.set_ylabel("busbw (GB/s)")
    ax.set_title(title, fontsize=10)
    ax.grid(True, alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7, loc="lower right")
    return figure_svg(fig)


def fleet_distribution(stats: Sequence[FleetStat], flagged: Mapping[str, set[str]], policy: OutlierPolicy) -> str:
    """One strip per metric: each node's value, the median, and the line below which a node is flagged."""
    applied = [s for s in stats if s.applied and s.median is not None and s.values]
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7.5, 1.5 + 1.2 * max(1, len(applied))))
    if not applied:
        ax = fig.add_subplot()
        ax.text(0.5, 0.5, "no fleet comparison: too few nodes with values", ha="center", va="center")
        ax.set_axis_off()
        return figure_svg(fig)
    axes = fig.subplots(len(applied), 1, squeeze=False)
    for row, stat in enumerate(applied):
        ax = axes[row][0]
        med = stat.median or 0.0
        mad = max(stat.mad or 0.0, abs(med) * policy.mad_floor)
        cut = min(med - policy.z_max * mad / MODIFIED_Z, med * (1 - policy.min_drop))
        names = sorted(stat.values)
        bad = flagged.get(stat.metric, set())
        xs = [stat.values[n] / med * 100 if med else 0.0 for n in names]
        colors = [_FAIL if n in bad else _PASS for n in names]
        ax.scatter(xs, [0] * len(xs), c=colors, s=28, zorder=3)
        for n, x in zip(names, xs, strict=True):
            if n in bad:
                ax.annotate(n, (x, 0), textcoords="offset points", xytext=(0, 7), ha="center", fontsize=7)
        ax.axvline(100, color="#37474f", linewidth=1)
        ax.axvline(cut / med * 100 if med else 0, color=_FAIL, linestyle="--", linewidth=1)
        ax.set_yticks([])
        ax.set_title(f"{stat.metric} ({stat.profile}): median {med:.1f} {stat.unit}", fontsize=8, loc="left")
        ax.tick_params(axis="x", labelsize=7)
        ax.grid(True, axis="x", alpha=0.3)
    axes[-1][0].set_xlabel("% of fleet median (dashed: flag line)")
    fig.tight_layout()
    return figure_svg(fig)

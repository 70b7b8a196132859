"""Which kernel log lines a run judges: all of them, or those from the run's cut-off on.

A kernel log keeps every line since the node booted. A GPU reset clears a
fault but not the Xid lines it left, so an acceptance that re-tests a node
after a repair would fail on the very Xid that was repaired if it read the
whole log. Such a run records a cut-off (the node's own clock, read just before
the repair's action) and judges only the Xid lines logged from then on; the
older ones are counted and named in the evidence, never dropped silently.

Fail closed: a run without a cut-off judges the whole log; a cut-off that is
not an ISO 8601 time with its offset is an error; an Xid line whose time
cannot be read (a ``dmesg`` that printed seconds since boot, or none) cannot
be placed before the cut-off, so it is judged, and is an error of its own.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from burnin.parsers.xid import XidEvent, XidReport, instant

WHOLE_LOG = "whole log"
DMESG_ARGV = ("dmesg",)
DMESG_WINDOWED_ARGV = ("dmesg", "--time-format", "iso")
"""With a cut-off, each line carries its wall-clock time on the node's clock (the cut-off's clock)."""


@dataclass(frozen=True)
class Window:
    """The log's Xid lines split by a run's cut-off."""

    since: str | None
    judged: list[XidEvent] = field(default_factory=list)
    ignored: list[XidEvent] = field(default_factory=list)
    """Logged before the cut-off: counted in the evidence, not judged."""
    unplaced: list[XidEvent] = field(default_factory=list)
    """No readable time: judged (they cannot be shown to be older), and an error."""
    error: str = ""

    def describe(self) -> str:
        if self.since is None:
            return WHOLE_LOG
        return f"since {self.since}"

    def note(self) -> str:
        """What the window left out, for the check's reason ("" for the whole log)."""
        if self.since is None:
            return ""
        older = sorted({e.xid for e in self.ignored})
        said = f"; Xid {', '.join(map(str, older))}" if older else ""
        return (f"judged the kernel log {self.describe()} (the run's cut-off); "
                f"{len(self.ignored)} older Xid line(s) ignored{said}")


def split(report: XidReport, since: str | None) -> Window:
    """The Xid lines ``since`` leaves to judge (every line when None)."""
    if since is None:
        return Window(None, list(report.events))
    cut = instant(since)
    if cut is None:
        return Window(since, list(report.events),
                      error=f"the run's kernel log cut-off {since!r} is not an ISO 8601 time with its offset")
    w = Window(since)
    for e in report.events:
        at = instant(e.timestamp)
        if at is None:
            w.unplaced.append(e)
            w.judged.append(e)
        elif at < cut:
            w.ignored.append(e)
        else:
            w.judged.append(e)
    if w.unplaced:
        stamps = sorted({repr(e.timestamp) for e in w.unplaced})[:3]
        return Window(since, w.judged, w.ignored, w.unplaced,
                      f"{len(w.unplaced)} Xid line(s) have no readable wall-clock time ({', '.join(stamps)}): "
                      f"they cannot be placed against the cut-off {since}")
    return w

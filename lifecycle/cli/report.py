"""`racklife report capacity`: GPU-hours per pool by what the GPUs were doing, over a window."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import typer

from lifecycle.cli._common import BAD_INPUT, JsonOpt, emit_json, emit_table, fail, out_console
from lifecycle.service.fleet import Capacity
from lifecycle.service.ledger import capacity_ledger
from lifecycle.store import Store

app = typer.Typer(help="Reports on the fleet from the store.", no_args_is_help=True)

_HEADERS = ("in svc", "lent", "drain", "quar", "failed", "maint", "bringup", "retired")  # Capacity, in order
_AGO = re.compile(r"^(\d+)([hdw])$")
_UNIT = {"h": timedelta(hours=1), "d": timedelta(days=1), "w": timedelta(weeks=1)}


def parse_when(text: str, now: datetime, option: str) -> datetime:
    """``7d``, ``24h``, ``2w`` (that long before now) or an ISO 8601 time (UTC if no zone is given)."""
    m = _AGO.match(text.strip())
    if m:
        return now - int(m.group(1)) * _UNIT[m.group(2)]
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        fail(f"{option} {text!r}: not a duration (7d, 24h, 2w) nor an ISO 8601 time (2026-11-24T00:00)", BAD_INPUT)
    return when if when.tzinfo else when.replace(tzinfo=UTC)


@app.command("capacity")
def capacity_cmd(since: str = typer.Option(..., "--since", help="Start: 7d, 24h, 2w ago, or an ISO 8601 time."),
                 until: str | None = typer.Option(None, "--until", help="End (default: now); same forms."),
                 as_json: bool = JsonOpt) -> None:
    """GPU-hours per pool in service, lent, draining, quarantined, failed, in maintenance, in bring-up."""
    now = datetime.now(UTC)
    start = parse_when(since, now, "--since")
    end = parse_when(until, now, "--until") if until else now
    store = Store()
    try:
        try:
            ledger = capacity_ledger(store, start, end)
        except ValueError as exc:
            fail(str(exc), BAD_INPUT)
    finally:
        store.close()
    if as_json:
        emit_json(ledger.to_json())
        return
    cols = [c.value for c in Capacity]
    emit_table(f"GPU-hours from {ledger.since:%Y-%m-%d %H:%M}Z to {ledger.until:%Y-%m-%d %H:%M}Z",
               ["pool", *_HEADERS, "moving"],
               [(p, *(f"{caps[c]:.1f}" for c in cols), f"{ledger.moving(p):.1f}")
                for p, caps in sorted(ledger.by_capacity.items()) if any(caps.values())])
    out_console.print("moving: hours in lending and reclaiming (part of lent); no reconciliation with Slurm "
                      "accounting (docs/limits.md)")

"""`racklife report capacity` (GPU-hours per pool by what the GPUs were doing) and `report fleet` (an HTML page)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import typer

from lifecycle.cli._common import BAD_INPUT, FAILED, UNAVAILABLE, JsonOpt, emit_json, emit_table, fail, out_console
from lifecycle.service.fleet import Capacity
from lifecycle.service.ledger import Ledger, capacity_ledger
from lifecycle.service.reconcile import Reconciliation
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
                 slurm_accounting: bool = typer.Option(
                     False, "--slurm-accounting",
                     help="Reconcile each Slurm pool with Slurm's own accounting (sacct from slurmdbd): "
                          "in service against allocated GPU-hours, the difference explained."),
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
        checked = _reconcile(store, ledger) if slurm_accounting else None
    finally:
        store.close()
    if as_json:
        doc = ledger.to_json()
        if checked is not None:
            doc["slurm_accounting"] = {r.pool: r.to_json() for r in checked}
        emit_json(doc)
        if checked is not None and not all(r.consistent for r in checked):
            raise typer.Exit(FAILED)
        return
    cols = [c.value for c in Capacity]
    emit_table(f"GPU-hours from {ledger.since:%Y-%m-%d %H:%M}Z to {ledger.until:%Y-%m-%d %H:%M}Z",
               ["pool", *_HEADERS, "moving"],
               [(p, *(f"{caps[c]:.1f}" for c in cols), f"{ledger.moving(p):.1f}")
                for p, caps in sorted(ledger.by_capacity.items()) if any(caps.values())])
    out_console.print("moving: hours in lending and reclaiming (part of lent)")
    if checked is None:
        return
    emit_table("against Slurm's accounting (sacct)", ["pool", "partition", "in svc", "draining", "allocated", "idle",
                                                       "unexplained"],
               [(r.pool, r.partition, f"{r.in_service:.2f}", f"{r.draining:.2f}", f"{r.allocated:.2f}",
                 f"{r.idle:.2f}", f"{r.unexplained:.2f}") for r in checked])
    for r in checked:
        for line in r.explanation:
            out_console.print(f"{r.pool}: {line}", markup=False)
    if not all(r.consistent for r in checked):
        raise typer.Exit(FAILED)


def _reconcile(store: Store, ledger: Ledger) -> list[Reconciliation]:
    """Each Slurm pool against sacct; sacct failing (no slurmdbd, no Slurm setup) is exit 6."""
    from lifecycle.drivers.errors import DriverError
    from lifecycle.drivers.slurm.accounting import allocations
    from lifecycle.drivers.slurm.runner import CommandRunner
    from lifecycle.service.fleet import read_fleet
    from lifecycle.service.reconcile import reconcile

    partitions = read_fleet(store).partitions
    if not partitions:
        fail("--slurm-accounting: no pool in the store is served by Slurm", BAD_INPUT)
    run = CommandRunner(timeout_s=60)
    try:
        return reconcile(ledger, partitions, lambda part, a, b: allocations(run, part, a, b))
    except DriverError as exc:
        fail(f"--slurm-accounting: Slurm's accounting cannot be read: {exc}", UNAVAILABLE)


@app.command("fleet")
def fleet_cmd(out: Path = typer.Option(..., "--out", help="The HTML file to write (its directory must exist)."),
              since: str = typer.Option("7d", "--since", help="Start: 7d, 24h, 2w ago, or an ISO 8601 time."),
              until: str | None = typer.Option(None, "--until", help="End (default: now); same forms."),
              as_json: bool = JsonOpt) -> None:
    """One self-contained HTML page: pools over time, the capacity ledger, acceptance history, failure causes."""
    from lifecycle.service import fleet_report

    now = datetime.now(UTC)
    start = parse_when(since, now, "--since")
    end = parse_when(until, now, "--until") if until else now
    if not out.parent.is_dir():
        fail(f"--out {out}: directory {out.parent} does not exist", BAD_INPUT)
    store = Store()
    try:
        try:
            report = fleet_report.build(store, start, end)
        except ValueError as exc:
            fail(str(exc), BAD_INPUT)
    finally:
        store.close()
    tmp = out.with_name(f".{out.name}.tmp")
    tmp.write_text(fleet_report.render_html(report), encoding="utf-8")
    tmp.replace(out)
    failed = sum(not a.passed for a in report.acceptance)
    if as_json:
        emit_json({"out": str(out), "since": report.since.isoformat(), "until": report.until.isoformat(),
                   "pools": sorted(report.gpus), "acceptance_records": len(report.acceptance),
                   "failed": failed, "by_check": dict(report.by_check),
                   "by_xid": {str(k): v for k, v in report.by_xid.items()}})
        return
    out_console.print(f"wrote {out}: {len(report.gpus)} pool(s), {len(report.acceptance)} acceptance record(s), "
                      f"{failed} failed")

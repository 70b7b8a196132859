"""`racklife status`: pools, capacity, nodes per state and running workflows, once or live (--watch)."""

from __future__ import annotations

import time

import typer
from rich.console import Group
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.table import Table

from lifecycle.cli._common import JsonOpt, emit_json, out_console
from lifecycle.service.status import FleetStatus, fleet_status
from lifecycle.store import Store

# (capacity status, column header): GPUs per pool; "retired" is left out of the view (in --json).
_CAPACITY_COLUMNS = (("in_service", "in svc"), ("lent", "lent"), ("draining", "drain"), ("quarantined", "quar"),
                     ("failed", "failed"), ("maintenance", "maint"), ("bringup", "bringup"))


def _view(st: FleetStatus) -> Group:
    shown = [p for p in st.pools if p.nodes]  # the built-in pools without nodes are in --json
    pools = Table(title=f"GPUs per pool at {st.at:%Y-%m-%d %H:%M:%S}Z", title_justify="left")
    for col in ("pool", "nodes", "GPUs", *(h for _c, h in _CAPACITY_COLUMNS), "in service"):
        pools.add_column(col, justify="left" if col == "pool" else "right", no_wrap=True)
    for p in shown:
        serving = ProgressBar(total=max(p.gpus, 1), completed=p.capacity["in_service"], width=10)
        pools.add_row(p.name, str(p.nodes), str(p.gpus), *(str(p.capacity[c]) for c, _h in _CAPACITY_COLUMNS),
                      serving)
    states = Table(title="nodes per state", title_justify="left")
    states.add_column("pool")
    states.add_column("states")
    for p in shown:
        states.add_row(p.name, ", ".join(f"{s} {n}" for s, n in p.states.items()) or "-")
    runs = Table(title=f"running workflows ({len(st.running)})", title_justify="left")
    for col in ("run", "workflow", "status", "started", "steps done", "last step done", "nodes"):
        runs.add_column(col)
    for r in st.running:
        runs.add_row(r.id, r.workflow, r.status, f"{r.created_at:%H:%M:%S}", str(r.steps_done), r.last_step or "-",
                     ", ".join(r.nodes) or "-")
    parts: list[Table | str] = [pools, states, runs]
    if st.stuck:
        stuck = Table(title="stuck in a transitional state (over 1 h)", title_justify="left")
        for col in ("node", "state", "for"):
            stuck.add_column(col)
        for node, state, seconds in st.stuck:
            stuck.add_row(node, state, f"{seconds / 3600:.1f} h")
        parts.append(stuck)
    parts.append(f"drift: {st.drift} node(s); never observed: {st.unobserved} node(s)")
    parts.append(f"racklife serve: {', '.join(st.services)} (runs are handed to it)" if st.services else
                 "racklife serve: none running (commands run their workflows themselves)")
    return Group(*parts)


def status_cmd(as_json: bool = JsonOpt,
               watch: float = typer.Option(0, "--watch", min=0, help="Refresh every N seconds until interrupted "
                                                                      "(0: print once).")) -> None:
    """Show the fleet: pools and GPU capacity, nodes per state, running workflows and their current step."""
    store = Store()
    try:
        if as_json or not watch:
            st = fleet_status(store)
            if as_json:
                emit_json(st.to_json())
            else:
                out_console.print(_view(st))
            return
        with Live(_view(fleet_status(store)), console=out_console, refresh_per_second=4) as live:
            try:
                while True:
                    time.sleep(watch)
                    live.update(_view(fleet_status(store)))
            except KeyboardInterrupt:
                pass
    finally:
        store.close()

"""`racklife nodes list` and `racklife node show|history`: what the store knows about nodes."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import typer

from lifecycle.cli._common import BAD_INPUT, JsonOpt, emit_json, emit_table, err_console, fail, out_console
from lifecycle.cli._select import Selector, SelectorOpt, check_filters
from lifecycle.model.states import State
from lifecycle.store import NodeNotFound, NodeRecord, Store

# One group under two names (`racklife node list` was "No such command"): `node` and `nodes` take the same
# commands.
HELP = "List nodes, show one, and its history (`node` and `nodes` are the same group)."
nodes_app = typer.Typer(help=HELP, no_args_is_help=True)
node_app = typer.Typer(help=HELP, no_args_is_help=True)


def _summary(r: NodeRecord) -> dict[str, Any]:
    return {"name": r.name, "state": r.state.value, "pool": r.pool, "rack": r.rack, "u": r.u,
            "sku": r.sku, "serial": r.serial, "state_since": r.state_since.isoformat()}


@nodes_app.command("list")
def list_(state: str | None = typer.Option(None, "--state", help="Only nodes in this state."),
          pool: str | None = typer.Option(None, "--pool", help="Only nodes of this pool."),
          rack: str | None = typer.Option(None, "--rack", help="Only nodes of this rack."),
          selector: str | None = SelectorOpt,
          as_json: bool = JsonOpt) -> None:
    """List nodes with their state and pool."""
    st: State | None = None
    if state is not None:
        try:
            st = State(state)
        except ValueError:
            fail(f"unknown state '{state}' (states: {', '.join(s.value for s in State)})", BAD_INPUT)
    store = Store()
    try:
        check_filters(store.nodes(), [rack] if rack else [], [pool] if pool else [])  # an unknown one: exit 2
        recs = store.nodes(state=st, pool=pool, rack=rack)
        if selector is not None:
            try:
                match = Selector.parse(selector)
            except ValueError as exc:
                fail(str(exc), BAD_INPUT)
            recs = [r for r in recs if match.matches(r)]
        if not recs and not store.nodes():
            # An empty answer from an empty store: say which store, so a forgotten `lab env` shows.
            err_console.print(f"no nodes in the store {store.url} (racklife config view shows where it comes "
                              "from)", markup=False, soft_wrap=True)
    finally:
        store.close()
    if as_json:
        emit_json([_summary(r) for r in recs])
        return
    emit_table(None, ["node", "state", "pool", "rack", "U", "sku", "since", "serial", "bmc"],
               [(r.name, r.state.value, r.pool, r.rack, r.u, r.sku, f"{r.state_since:%Y-%m-%d %H:%M:%S}", r.serial,
                 (r.spec.get("bmc") or {}).get("address")) for r in recs], wide=("serial", "bmc"))


def _get(store: Store, name: str) -> NodeRecord:
    try:
        return store.get(name)
    except NodeNotFound as exc:
        fail(str(exc), BAD_INPUT)


@node_app.command("show")
def show(name: str = typer.Argument(..., help="The node's name."), as_json: bool = JsonOpt) -> None:
    """Show a node: state and why (the last transition's reason, who, which run), pool, record, acceptance."""
    store = Store()
    try:
        rec = _get(store, name)
        acc = store.acceptance_records(name)
        last = store.history(name)[-1]  # enrolment is a transition too: never empty
    finally:
        store.close()
    why = {"event": last.event, "reason": last.reason, "actor": last.actor.value, "run_id": last.run_id,
           "at": last.at.isoformat()}
    data = _summary(rec) | {"why": why, "spec": rec.spec, "acceptance": [
        {"id": a.id, "passed": a.passed, "level": a.level, "profile": a.profile,
         "created_at": a.created_at.isoformat(), "expires_at": a.expires_at.isoformat(),
         "accepted_by": a.accepted_by, "evidence_dir": a.evidence_dir, "evidence_sha256": a.evidence_sha256,
         "waivers": a.summary.get("waivers", [])} for a in acc[:1]]}
    if as_json:
        emit_json(data)
        return
    out_console.print(f"[bold]{rec.name}[/]  state [cyan]{rec.state.value}[/] since "
                      f"{rec.state_since:%Y-%m-%d %H:%M:%S}  pool {rec.pool}")
    out_console.print(f"why: {last.reason} ({last.event} by {last.actor.value}"
                      + (f", run {last.run_id})" if last.run_id else ")"), markup=False)
    out_console.print(f"rack {rec.rack} U{rec.u}  sku {rec.sku}  serial {rec.serial}")
    bmc = rec.spec.get("bmc", {})
    out_console.print(f"bmc {bmc.get('driver')} {bmc.get('address')}  verify_tls={bmc.get('verify_tls', True)}")
    for nic in rec.spec.get("nics", []):
        out_console.print(f"nic {nic['name']} {nic['mac']} {nic.get('role', 'data')} {nic.get('ip') or ''}")
    if acc:
        a = acc[0]
        out_console.print(f"acceptance {a.id}: {'PASS' if a.passed else 'FAIL'} ({a.level}, {a.profile}) "
                          f"expires {a.expires_at:%Y-%m-%d}")
        if a.evidence_sha256:
            out_console.print(f"evidence {a.evidence_dir} (manifest sha256 {a.evidence_sha256})", markup=False)
        for w in a.summary.get("waivers", []):
            out_console.print(f"waived {w.get('check')} by {w.get('by')}: {w.get('reason')}", markup=False)
    else:
        out_console.print("acceptance: none")


@node_app.command("history")
def history(name: str = typer.Argument(..., help="The node's name."), as_json: bool = JsonOpt) -> None:
    """Every transition of a node (time, event, from → to, actor, operator, reason, run), and every change of its
    record."""
    store = Store()
    try:
        _get(store, name)
        hist = store.history(name)
        changes = store.changes(name)
    finally:
        store.close()
    rows: list[tuple[datetime, dict[str, object]]] = [
        (t.at, {"at": t.at.isoformat(), "event": t.event, "from": t.source.value if t.source else None,
                "to": t.target.value, "actor": t.actor.value, "operator": t.operator, "reason": t.reason,
                "run_id": t.run_id})
        for t in hist]
    # A record change (rename, pool, BMC, other fields) is an event of its own, from the old value to the new.
    rows += [(c.at, {"at": c.at.isoformat(), "event": c.kind, "from": c.old, "to": c.new, "actor": c.actor.value,
                     "operator": c.operator, "reason": c.reason, "run_id": None}) for c in changes]
    rows.sort(key=lambda r: r[0])
    if as_json:
        emit_json([r for _, r in rows])
        return
    emit_table(f"history of {name}", ["at", "event", "from", "to", "actor", "operator", "reason", "run"],
               [(f"{at:%Y-%m-%d %H:%M:%S}", r["event"], r["from"] or "-", r["to"], r["actor"], r["operator"] or "-",
                 r["reason"], r["run_id"] or "") for at, r in rows])


for _name, _fn in (("list", list_), ("show", show), ("history", history)):
    for _group in (nodes_app, node_app):
        if _name not in {c.name for c in _group.registered_commands}:
            _group.command(_name)(_fn)

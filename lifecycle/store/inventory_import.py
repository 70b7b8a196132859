"""An inventory import as a set of changes to known servers, keyed by serial.

The file says which servers exist; the store remembers what each one has been
through. A node's name is how people and schedulers call it, its serial is
what it *is*: a record whose serial is known is that server, whatever it is
called now. So an import is worked out against the store before anything is
written:

- a known serial under a new name is a **rename** (the node's history,
  acceptance records and boot records follow it, and a change row says so);
- a known name with a serial the store has never seen is **another server**:
  refused, because taking over the old one's history and acceptance would let
  an untested machine into service;
- two known servers **swapping names** is refused with both names: a swap
  crosses every record that follows a name (Slurm, Kubernetes, DHCP, people's
  tickets), and done in one step it is indistinguishable from two mistakes;
  rename one to a free name, import, then rename the other;
- serials in the store but not in the file are **removed**: reported (the
  planner plans their decommission), kept with their state, never deleted,
  and their rack slots and names stay theirs until they are decommissioned;
- a decommissioned server's name may go to a new server: its record (state,
  history, acceptance and erase records) is kept under ``NAME~SERIAL`` and a
  change row says so;
- a new pool, a new BMC or other changed fields get a change row each.

All of it is one transaction: a refused import writes nothing.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from lifecycle.model.inventory import Inventory, Node
from lifecycle.model.states import Actor, State
from lifecycle.store import db, operators
from lifecycle.store.errors import known

# A node whose spec may not change under it: a scheduler is using it.
FROZEN_STATES = frozenset({State.JOINING, State.IN_SERVICE, State.DRAINING,
                           State.LENDING, State.LENT, State.RECLAIMING})


@dataclass(frozen=True)
class Removed:
    """A server the store knows that the file no longer lists."""

    node: str
    serial: str
    state: State


@dataclass(frozen=True)
class Change:
    """One change to a node's record that is not a state move (a row of ``racklife_node_changes``)."""

    node: str
    serial: str
    kind: str  # rename | pool | bmc | spec
    old: str | None
    new: str | None


@dataclass
class ImportReport:
    added: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    renamed: list[tuple[str, str]] = field(default_factory=list)
    """(old name, new name)."""
    removed: list[Removed] = field(default_factory=list)
    changes: list[Change] = field(default_factory=list)


def canonical(node: Node) -> tuple[str, str]:
    text = json.dumps(node.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return text, hashlib.sha256(text.encode()).hexdigest()


def _bmc(spec: dict[str, Any]) -> str:
    bmc = spec.get("bmc") or {}
    text = f"{bmc.get('driver')} {bmc.get('address')}"
    return text + (f" system {bmc['system']}" if bmc.get("system") else "")


def _changes(row: Any, node: Node, spec_text: str) -> list[Change]:
    """What differs between the stored record and the file's, as change rows (the rename is separate)."""
    old, new = json.loads(row.spec), json.loads(spec_text)
    found: list[Change] = []
    if old.get("pool") != new.get("pool"):
        found.append(Change(node.name, node.serial, "pool", old.get("pool"), new.get("pool")))
    if old.get("bmc") != new.get("bmc"):
        found.append(Change(node.name, node.serial, "bmc", _bmc(old), _bmc(new)))
    other = sorted(k for k in set(old) | set(new) if k not in ("name", "pool", "bmc") and old.get(k) != new.get(k))
    if other:
        found.append(Change(node.name, node.serial, "spec", None, "changed: " + ", ".join(other)))
    return found


@dataclass(frozen=True)
class Plan:
    """An import worked out against the store: refusals, or the stored row of each known server."""

    problems: list[str]
    matched: dict[str, Any]
    removed: list[Removed]
    archive: dict[str, str] = field(default_factory=dict)
    """Decommissioned servers whose name a new server takes: old name -> the name their record keeps."""


def plan(conn: Connection, inv: Inventory) -> Plan:
    """Refusals, the stored row matched to each file node (by serial), and the removed servers."""
    rows = list(conn.execute(sa.select(db.nodes)))
    by_serial = {r.serial: r for r in rows}
    by_name = {r.name: r for r in rows}
    leased = {r.node for r in conn.execute(sa.select(db.leases.c.node))}
    serials = {n.serial for n in inv.nodes}
    problems: list[str] = []
    swaps: set[frozenset[str]] = set()
    matched: dict[str, Any] = {}
    archive: dict[str, str] = {}
    for node in inv.nodes:
        row = by_serial.get(node.serial)
        holder = by_name.get(node.name)
        if row is None and holder is not None and holder.serial in serials:
            problems.append(
                f"{node.name}: the name passes from serial {holder.serial} to a new server (serial "
                f"{node.serial}) in the same import: import the rename of {holder.serial} first, then add the "
                "new server")
            continue
        if row is None and holder is not None and _freed(holder, serials):
            archive[holder.name] = archived_name(holder.name, holder.serial)
            continue
        if row is None and holder is not None:
            problems.append(
                f"{node.name}: the store knows this name as serial {holder.serial} (state {holder.state}); "
                f"serial {node.serial} is another server (the serial is a node's identity). Decommission "
                f"{node.name} before its name is reused, or give the new server a new name")
            continue
        if row is None:
            continue
        matched[node.name] = row
        sha = canonical(node)[1]
        state = known(State, row.state, row.name)
        if row.name != node.name:
            if holder is not None and holder.serial in serials:
                if frozenset((row.serial, holder.serial)) in swaps:
                    continue
                swaps.add(frozenset((row.serial, holder.serial)))
                problems.append(
                    f"{row.name} (serial {row.serial}) and {holder.name} (serial {holder.serial}) would swap or "
                    f"rotate names: refused; rename one to a free name, import, then rename the other")
                continue
            if holder is not None and _freed(holder, serials):
                archive[holder.name] = archived_name(holder.name, holder.serial)
            elif holder is not None:
                problems.append(
                    f"{row.name} → {node.name}: the name {node.name} is still held by serial {holder.serial} "
                    f"(state {holder.state}), which the file no longer lists; decommission it first")
                continue
            if row.name in leased:
                problems.append(f"{row.name} → {node.name}: a workflow run holds {row.name}; rename it when "
                                "the run has ended")
                continue
        if row.spec_sha256 != sha and state in FROZEN_STATES:
            what = f"rename to {node.name}" if row.name != node.name else "change"
            problems.append(f"{row.name} (state {state}): refusing to {what} a node that a scheduler is "
                            "using; drain it first")
    removed = [Removed(archive.get(r.name, r.name), r.serial, known(State, r.state, r.name))
               for r in rows if r.serial not in serials]
    held = {(r.rack, r.u): r for r in rows
            if r.serial not in serials and known(State, r.state, r.name) != State.DECOMMISSIONED}
    for node in inv.nodes:
        other = held.get((node.rack, node.u))
        if other is not None:
            problems.append(
                f"{node.name}: rack {node.rack} U{node.u} is still held by {other.name} (serial {other.serial}, "
                f"state {other.state}), removed from the file but not decommissioned")
    return Plan(problems, matched, sorted(removed, key=lambda r: r.node), archive)


def _freed(holder: Any, serials: set[str]) -> bool:
    """A decommissioned server the file no longer lists has given its name up."""
    return holder.serial not in serials and known(State, holder.state, holder.name) is State.DECOMMISSIONED


def archived_name(name: str, serial: str) -> str:
    """The name a decommissioned server's record keeps once a new server takes its name (unique: the serial)."""
    full = f"{name}~{serial}"
    if len(full) <= 63:
        return full
    return f"{name[:40]}~{hashlib.sha256(serial.encode()).hexdigest()[:22]}"


def _rename(conn: Connection, old: str, new: str) -> None:
    """Give a node a new name, moving every row that names it (the table list comes from the schema)."""
    row = conn.execute(sa.select(db.nodes).where(db.nodes.c.name == old)).one()
    values = dict(row._mapping)
    # The serial is unique: park the old row on a placeholder while both rows exist.
    conn.execute(sa.update(db.nodes).where(db.nodes.c.name == old).values(serial=f"~{uuid.uuid4().hex}"))
    conn.execute(sa.insert(db.nodes).values({**values, "name": new}))
    for table in _naming_tables():
        conn.execute(sa.update(table).where(table.c.node == old).values(node=new))
    conn.execute(sa.delete(db.nodes).where(db.nodes.c.name == old))


def _naming_tables() -> Iterable[sa.Table]:
    return [t for t in db.metadata.sorted_tables if t is not db.nodes and "node" in t.c]


def apply(conn: Connection, inv: Inventory, worked_out: Plan, actor: Actor, reason: str,
          now: datetime) -> ImportReport:
    """Write an import that :func:`plan` found no problem with."""
    if worked_out.problems:
        raise ValueError("apply() of a refused import")
    matched = worked_out.matched
    report = ImportReport(removed=worked_out.removed)
    who = operators.current()
    for old_name, kept in worked_out.archive.items():
        serial = conn.execute(sa.select(db.nodes.c.serial).where(db.nodes.c.name == old_name)).scalar_one()
        _rename(conn, old_name, kept)
        report.renamed.append((old_name, kept))
        change = Change(kept, serial, "rename", old_name, kept)
        report.changes.append(change)
        conn.execute(sa.insert(db.node_changes).values(
            node=kept, serial=serial, kind="rename", old=old_name, new=kept, actor=actor.value,
            reason=f"{reason}: decommissioned; its name passes to another server", at=now, operator=who))
    for name in inv.pool_names():
        pool_spec = json.dumps(inv.pool(name).model_dump(mode="json"), sort_keys=True)
        conn.execute(sa.delete(db.pools).where(db.pools.c.name == name))
        conn.execute(sa.insert(db.pools).values(name=name, spec=pool_spec))
    for node in inv.nodes:
        spec, sha = canonical(node)
        row = matched.get(node.name)
        values = dict(serial=node.serial, rack=node.rack, u=node.u, sku=node.sku,
                      pool=node.pool, spec=spec, spec_sha256=sha)
        if row is None:
            conn.execute(sa.insert(db.nodes).values(
                name=node.name, state=State.ENROLLED.value, state_since=now, generation=0, **values))
            conn.execute(sa.insert(db.transitions).values(
                node=node.name, source=None, target=State.ENROLLED.value,
                event="enroll", actor=actor.value, reason=reason, run_id=None, at=now, operator=who))
            report.added.append(node.name)
            continue
        changes = _changes(row, node, spec)
        if row.name != node.name:
            _rename(conn, row.name, node.name)
            report.renamed.append((row.name, node.name))
            changes.insert(0, Change(node.name, node.serial, "rename", row.name, node.name))
        if row.spec_sha256 != sha:
            conn.execute(sa.update(db.nodes).where(db.nodes.c.name == node.name).values(**values))
            report.updated.append(node.name)
        else:
            report.unchanged.append(node.name)
        for c in changes:
            conn.execute(sa.insert(db.node_changes).values(
                node=c.node, serial=c.serial, kind=c.kind, old=c.old, new=c.new,
                actor=actor.value, reason=reason, at=now, operator=who))
        report.changes += changes
    return report

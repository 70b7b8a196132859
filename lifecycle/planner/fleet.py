"""The planner's front door: observe the fleet now and plan it against the inventory.

``racklife plan`` and ``racklife refresh`` (and, later, apply and the service)
call these, so the CLI never assembles a plan itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime

from lifecycle.drivers.bmc.base import Capability
from lifecycle.drivers.bmc.factory import supports
from lifecycle.model.inventory import Inventory
from lifecycle.planner import observe
from lifecycle.planner.observed import Desired, Observation, Source
from lifecycle.planner.plan import Floor, Plan, plan
from lifecycle.store import NodeRecord, Store, leases


class UnknownNodes(ValueError):
    """Names asked for that neither the store nor the inventory has."""


@dataclass(frozen=True)
class Refreshed:
    observations: list[Observation]
    wants: dict[str, Desired]


def _select(records: Sequence[NodeRecord], inv: Inventory | None, names: Sequence[str] | None) -> list[NodeRecord]:
    if names is None:
        return list(records)
    known = {r.name for r in records} | ({n.name for n in inv.nodes} if inv is not None else set())
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        raise UnknownNodes(f"unknown node(s): {', '.join(unknown) or '(none given)'}")
    return [r for r in records if r.name in set(names)]


def refresh(store: Store, inv: Inventory | None, names: Sequence[str] | None,
            sources: observe.Sources) -> Refreshed:
    """Observe the chosen nodes from every source and store what was seen."""
    records = _select(store.nodes(), inv, names)
    wants = observe.desired_all(inv, records, store)
    seen = observe.observe(store, records, sources, {n: d.pool.scheduler for n, d in wants.items()},
                           firmware_for={n for n, d in wants.items()
                                         if d.node.firmware and supports(d.node, Capability.FIRMWARE)},
                           bios_for={n: sorted(d.bios) for n, d in wants.items()
                                     if d.bios and supports(d.node, Capability.BIOS)})
    observe.save(store, seen)
    return Refreshed(seen, wants)


def plan_fleet(store: Store, inv: Inventory | None, names: Sequence[str] | None,
               sources: observe.Sources) -> Plan:
    """Refresh, then plan every chosen node (and the inventory's nodes the store lacks, and the reverse)."""
    fresh = refresh(store, inv, names, sources)
    return _plan(store, inv, names, fresh)


def plan_observed(store: Store, inv: Inventory | None, names: Sequence[str] | None,
                  sources: observe.Sources | None = None) -> Plan:
    """Plan on the last stored observations (``racklife plan --observed``): no source is read.

    Each observation is taken with the node's state and pool as the store has them now; a
    node never observed is planned as unreadable (fail closed: nothing is inferred from silence).
    """
    records = _select(store.nodes(), inv, names)
    wants = observe.desired_all(inv, records, store)
    stored = observe.load(store, [r.name for r in records] if names is not None else None)
    now = datetime.now(UTC)
    seen = []
    for r in records:
        o = stored.get(r.name)
        if o is None:
            o = Observation(r.name, now, r.state, r.pool,
                            errors={Source.BMC: "never observed: run `racklife refresh` first"})
        seen.append(replace(o, state=r.state, pool=r.pool))
    return _plan(store, inv, names, Refreshed(seen, wants))


def _plan(store: Store, inv: Inventory | None, names: Sequence[str] | None, fresh: Refreshed) -> Plan:
    in_store = {o.node for o in fresh.observations}
    chosen = set(names) if names is not None else None
    missing: list[str] = []
    removed: list[str] = []
    wants = dict(fresh.wants)
    if inv is not None:
        stored_names = {r.name for r in store.nodes()}
        for n in inv.nodes:
            if n.name not in stored_names and (chosen is None or n.name in chosen):
                missing.append(n.name)
                wants[n.name] = Desired(n, inv.pool(n.pool), n.image, None)
        listed = {n.name for n in inv.nodes}
        removed = sorted(n for n in in_store if n not in listed)
    holders = {n: le.run_id for n, le in leases.holders(store, in_store).items()}
    sources = {o.pool for o in fresh.observations if o.node in wants and o.pool != wants[o.node].node.pool}
    floors = {}
    for pool in sorted(sources):
        count = leases.floor_count(store, pool, ())
        floors[pool] = Floor(pool, count.serving, count.others, count.floor)
    return plan(fresh.observations, wants, holders, missing, removed, floors)

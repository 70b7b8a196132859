"""The inventory the planner is handed: the base file, what the store knows, and what Terraform says.

Terraform describes only part of the desired state (each node's pool, image
and firmware baseline; each pool's floors, labels and taints); the hardware
(site, racks, serials, BMCs, NICs) comes from the base inventory file. The
planner takes one :class:`Inventory`, so the provider composes it:

* pools: the base file's, then the store's (the last ``racklife_pool``
  apply or import wins), then the pool being applied;
* nodes: the base file's; a node the store knows keeps its stored record
  (an import of it then changes nothing, so a node a scheduler uses is never
  refused), with the pool it is in now; the nodes being applied get
  Terraform's pool and image.

``for_import`` keeps the stored records verbatim (their own pool field), so
an import made for a pool changes no node.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from lifecycle.model.inventory import BUILTIN_POOLS, Inventory, Node, Pool
from lifecycle.store import Store, StoreError


@dataclass(frozen=True)
class NodeWant:
    """What a ``racklife_node`` resource asks of one node."""

    name: str
    pool: str
    image: str | None = None  # None: the base inventory's (no opinion)
    firmware: Mapping[str, str] = field(default_factory=dict)  # component -> version; empty: no baseline


class UnknownNode(ValueError):
    """A node the base inventory does not list: its hardware (serial, BMC, NICs) is unknown."""


class UnknownPool(ValueError):
    """A pool neither the store, the base inventory nor a racklife_pool defines."""


def compose(base: Inventory, store: Store, nodes: Mapping[str, NodeWant] | None = None,
            pools: Mapping[str, Pool] | None = None, for_import: bool = False) -> Inventory:
    """The inventory for a plan, an apply or an import (see the module's docstring)."""
    nodes = nodes or {}
    listed = {n.name for n in base.nodes}
    missing = sorted(set(nodes) - listed)
    if missing:
        raise UnknownNode(f"not in the base inventory: {', '.join(missing)} (add its serial, BMC and NICs "
                          "to the inventory file the provider reads)")
    merged: dict[str, Pool] = dict(base.pools)
    for name in {r.pool for r in store.nodes()} | set(base.pools):
        if name in BUILTIN_POOLS:
            continue
        try:
            merged[name] = store.pool(name)
        except StoreError:  # a pool the store has no definition of: the base file's stands
            continue
    merged.update(pools or {})
    unknown = sorted({w.pool for w in nodes.values()} - set(merged) - set(BUILTIN_POOLS))
    if unknown:
        raise UnknownPool(f"no such pool: {', '.join(unknown)} (define it with a racklife_pool resource "
                          "or in the base inventory)")
    stored = {r.name: r for r in store.nodes()}
    out: list[Node] = []
    for n in base.nodes:
        rec = stored.get(n.name)
        node = rec.node() if rec is not None else n
        want = nodes.get(n.name)
        if want is not None:
            node = node.model_copy(update={"pool": want.pool, **({"image": want.image} if want.image else {})})
        elif rec is not None and not for_import:
            node = node.model_copy(update={"pool": rec.pool})
        out.append(node)
    return base.model_copy(update={"nodes": out, "pools": merged})

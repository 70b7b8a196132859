"""What a node's resources carry as inputs, and how they become the planner's inventory.

A Pulumi input is what ends up in the stack's state, so it holds the node's
inventory entry and nothing secret: the BMC's ``credentials`` is a reference
(``env:NAME``, ``file:/path``) that the drivers resolve at the moment they
talk to the BMC, as everywhere in racklife. Each resource passes the planner a
one-node inventory (its site, rack, every pool, its image) built from its
inputs and checked by the same parser as an inventory file, so a bad input
fails ``pulumi preview`` with the field and the reason, before anything is
touched. A one-node import changes only that node's record (the store treats
the others as "not in this file", which it reports and never deletes).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from lifecycle.model.inventory import Inventory, parse_inventory
from lifecycle.model.strict_yaml import InventoryError


@dataclass(frozen=True)
class Problem:
    """One input that cannot be used: the property (``spec.bmc.address``) and why."""

    prop: str
    reason: str


def _prop(field: str) -> str:
    """The inventory parser's field (``nodes[0](r01-n01).bmc.address``) as the resource's property
    (``spec.bmc.address``)."""
    field = re.sub(r"\([^)]*\)", "", field)
    for prefix, prop in (("nodes[0]", "spec"), ("racks[0]", "rack"), ("pools", "pools"), ("images", "images"),
                         ("site", "site")):
        if field.startswith(prefix):
            return prop + field[len(prefix):]
    return field


def wire_ints(value: Any) -> Any:
    """Whole numbers back to ints: Pulumi's wire format (protobuf Struct) carries every number as a double,
    and the inventory's counts are strict integers."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, Mapping):
        return {k: wire_ints(v) for k, v in value.items()}
    if isinstance(value, list):
        return [wire_ints(v) for v in value]
    return value


def node_document(site: Mapping[str, Any], rack: Mapping[str, Any], pools: Mapping[str, Any],
                  images: list[Mapping[str, Any]], spec: Mapping[str, Any]) -> dict[str, Any]:
    doc = {"site": dict(site), "racks": [dict(rack)], "pools": {k: dict(v) for k, v in pools.items()},
           "images": [dict(i) for i in images], "nodes": [dict(spec)]}
    out: dict[str, Any] = wire_ints(doc)
    return out


def one_node_inventory(props: Mapping[str, Any], what: str) -> Inventory:
    """The inputs ``site``, ``rack``, ``pools``, ``images``, ``spec`` as a validated one-node inventory.

    Raises ``InventoryError`` with every problem (``what`` names the resource in the messages).
    """
    doc = node_document(props.get("site") or {}, props.get("rack") or {}, props.get("pools") or {},
                        list(props.get("images") or []), props.get("spec") or {})
    return parse_inventory(yaml.safe_dump(doc, sort_keys=False), what)


def problems_of(props: Mapping[str, Any], what: str) -> list[Problem]:
    """Every problem of the inputs, each on its property; empty when they make a valid one-node inventory."""
    for key in ("site", "rack", "pools", "spec"):
        if not isinstance(props.get(key), Mapping):
            return [Problem(key, f"required: a mapping (the inventory's {key} entry)")]
    if not isinstance(props.get("images", []), list):
        return [Problem("images", "a list of the inventory's image entries")]
    try:
        inv = one_node_inventory(props, what)
    except InventoryError as exc:
        return [Problem(_prop(p.field), p.message) for p in exc.problems]
    if props.get("node") != inv.nodes[0].name:
        return [Problem("node", f"must be the spec's name {inv.nodes[0].name!r}, not {props.get('node')!r}")]
    return []


def with_node(inv: Inventory, **changes: Any) -> Inventory:
    """``inv`` with its one node's fields changed (``pool=…``, ``image=…``)."""
    node = inv.nodes[0].model_copy(update=changes)
    return inv.model_copy(update={"nodes": [node]})


def without_nodes(inv: Inventory) -> Inventory:
    """``inv`` listing no node: planned against it, a stored node is one to decommission."""
    return inv.model_copy(update={"nodes": []})

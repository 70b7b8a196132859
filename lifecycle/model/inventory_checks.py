"""Checks across the records of an inventory: what no single record's schema can see.

They run on the plain data, before and beside pydantic's per-record
validation, so that one broken node does not hide a duplicate MAC two nodes
further down: every problem is reported at once. Uniqueness is checked on the
canonical form of each value (a MAC in lower case, an IP in its canonical
spelling, a BMC as host and port, see :mod:`lifecycle.model.bmc_address`).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from lifecycle.model import bmc_address

Path_ = tuple[str | int, ...]
Found = list[tuple[Path_, str]]


def _canon_ip(value: str) -> str | None:
    try:
        return str(ipaddress.ip_address(value))
    except ValueError:
        return None


# kind -> canonical form (None: not comparable, the record's own validation reports it).
_CANON: dict[str, Callable[[str], str | None]] = {
    "node name": lambda v: v,
    "serial": lambda v: v.lower(),
    "MAC": lambda v: v.strip().lower().replace("-", ":"),
    "IP": _canon_ip,
}


@dataclass
class _Unique:
    found: Found
    firsts: dict[tuple[str, str], str] = field(default_factory=dict)

    def add(self, kind: str, value: Any, path: Path_, where: str) -> None:
        if not isinstance(value, str) or not value:
            return
        norm = _CANON[kind](value)
        if norm is None:
            return
        key = (kind, norm)
        if key in self.firsts:
            self.found.append((path, f"duplicate {kind} '{value}' (also used by {self.firsts[key]})"))
        else:
            self.firsts[key] = where


def _names(items: Any) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    if isinstance(items, list):
        for item in items:
            if isinstance(item, dict) and isinstance(item.get("name"), str):
                out.setdefault(item["name"], item)
    return out


def _who(i: int, n: dict[str, Any]) -> str:
    return f"nodes[{i}]" + (f"({n['name']})" if isinstance(n.get("name"), str) else "")


def _bmc_identity(nodes: list[Any], found: Found) -> None:
    """Two nodes on one BMC: the same host on a default port (any protocol), or the same host:port."""
    seen: dict[tuple[str, int | None], list[tuple[str, str | None]]] = {}
    for i, n in enumerate(nodes):
        bmc = n.get("bmc") if isinstance(n, dict) else None
        if not isinstance(bmc, dict) or not isinstance(bmc.get("address"), str):
            continue
        try:
            endpoint = bmc_address.parse(bmc["address"], str(bmc.get("driver") or "redfish"))
        except ValueError:
            continue  # the record's own validation reports it
        system = bmc.get("system") if isinstance(bmc.get("system"), str) else None
        key = endpoint.identity()
        for other, other_system in seen.get(key, []):
            # One BMC may manage several systems (Redfish system ids); it may not manage one twice.
            if system is None or other_system is None or system == other_system:
                what = f"{endpoint.host}" + (f":{endpoint.port}" if key[1] else "")
                found.append((("nodes", i, "bmc", "address"),
                              f"same BMC as {other} ({what}"
                              + (f", system {system}" if system else "") + "): a power command would "
                              "reach both nodes; give each its own BMC, or distinct Redfish 'system' ids"))
                break
        seen.setdefault(key, []).append((_who(i, n), system))


def _boot_ip(i: int, n: dict[str, Any], found: Found) -> None:
    nics: list[Any] = n["nics"] if isinstance(n.get("nics"), list) else []
    boot = next((x for x in nics if isinstance(x, dict) and x.get("role") == "boot"), None)
    boot_ip = n.get("boot_ip")
    if boot is None or not isinstance(boot_ip, str) or not isinstance(boot.get("ip"), str):
        return
    if _canon_ip(boot_ip) is not None and _canon_ip(boot_ip) != _canon_ip(boot["ip"]):
        found.append((("nodes", i, "boot_ip"),
                      f"differs from the boot NIC's ip ({boot.get('name')}: {boot['ip']}); "
                      "DHCP would hand out one and the node be looked for at the other"))


def _references(i: int, n: dict[str, Any], racks: dict[str, dict[str, Any]], pools: Iterable[str],
                images: Iterable[str], found: Found) -> None:
    for key, known, kind in (("rack", racks, "rack"), ("pool", pools, "pool"), ("image", images, "image")):
        value = n.get(key)
        if isinstance(value, str) and value not in known:
            names = ", ".join(sorted(str(x) for x in known)) or "none defined"
            found.append((("nodes", i, key), f"unknown {kind} '{value}' ({kind}s: {names})"))


def _slot(i: int, n: dict[str, Any], racks: dict[str, dict[str, Any]],
          positions: dict[tuple[str, int], str], found: Found) -> None:
    rack, u = n.get("rack"), n.get("u")
    if not isinstance(rack, str) or type(u) is not int:  # a bool is not a rack unit
        return
    units = racks.get(rack, {}).get("units", 42)
    if type(units) is int and u > units:
        found.append((("nodes", i, "u"), f"U{u} is beyond rack {rack}'s height ({units} units)"))
    if (rack, u) in positions:
        found.append((("nodes", i, "u"), f"rack {rack} U{u} is already taken by {positions[(rack, u)]}"))
    positions.setdefault((rack, u), _who(i, n))


def cross_checks(data: Any, builtin_pools: Iterable[str]) -> Found:
    """Problems across records of the raw inventory data, each with the path of the field to blame."""
    found: Found = []
    if not isinstance(data, dict) or not isinstance(data.get("nodes") or [], list):
        return found
    nodes: list[Any] = data.get("nodes") or []
    racks = _names(data.get("racks"))
    pools = data.get("pools")
    pool_names = (set(pools) if isinstance(pools, dict) else set()) | set(builtin_pools)
    image_names = set(_names(data.get("images")))

    seen_racks: dict[str, int] = {}
    rack_list: list[Any] = data["racks"] if isinstance(data.get("racks"), list) else []
    for i, r in enumerate(rack_list):
        if isinstance(r, dict) and isinstance(r.get("name"), str):
            if r["name"] in seen_racks:
                found.append((("racks", i, "name"),
                              f"duplicate rack name '{r['name']}' (first at racks[{seen_racks[r['name']]}])"))
            seen_racks.setdefault(r["name"], i)

    unique = _Unique(found)
    positions: dict[tuple[str, int], str] = {}
    for i, n in enumerate(nodes):
        if not isinstance(n, dict):
            continue
        who = _who(i, n)
        unique.add("node name", n.get("name"), ("nodes", i, "name"), who)
        unique.add("serial", n.get("serial"), ("nodes", i, "serial"), who)
        unique.add("IP", n.get("boot_ip"), ("nodes", i, "boot_ip"), who + ".boot_ip")
        unique.add("IP", n.get("mgmt_ip"), ("nodes", i, "mgmt_ip"), who + ".mgmt_ip")
        nics: list[Any] = n["nics"] if isinstance(n.get("nics"), list) else []
        for j, nic in enumerate(nics):
            if isinstance(nic, dict):
                unique.add("MAC", nic.get("mac"), ("nodes", i, "nics", j, "mac"), f"{who}.nics[{j}]")
                if nic.get("ip") not in (None, n.get("boot_ip"), n.get("mgmt_ip")):
                    unique.add("IP", nic.get("ip"), ("nodes", i, "nics", j, "ip"), f"{who}.nics[{j}]")
        _references(i, n, racks, pool_names, image_names, found)
        _slot(i, n, racks, positions, found)
        _boot_ip(i, n, found)
    _bmc_identity(nodes, found)
    _floors(pools, nodes, found)
    _pool_images(pools, image_names, found)
    return found


def _pool_images(pools: Any, images: set[str], found: Found) -> None:
    for name, pool in (pools or {}).items() if isinstance(pools, dict) else ():
        value = pool.get("image") if isinstance(pool, dict) else None
        if isinstance(value, str) and value not in images:
            found.append((("pools", name, "image"),
                          f"unknown image '{value}' (images: {', '.join(sorted(images)) or 'none defined'})"))


def _floors(pools: Any, nodes: list[Any], found: Found) -> None:
    """A pool's ``min_nodes`` above the nodes the inventory gives it can never be kept."""
    if not isinstance(pools, dict):
        return
    members: dict[str, int] = {}
    for n in nodes:
        if isinstance(n, dict) and isinstance(n.get("pool"), str):
            members[n["pool"]] = members.get(n["pool"], 0) + 1
    for name, pool in pools.items():
        floor = pool.get("min_nodes") if isinstance(pool, dict) else None
        if type(floor) is int and floor > members.get(str(name), 0):
            found.append((("pools", name, "min_nodes"),
                          f"{floor} is more than the {members.get(str(name), 0)} node(s) the inventory puts in "
                          f"pool '{name}': the floor could never be kept"))

"""Load-time normalisation of a captured tree, so the emulator serves conformant Redfish.

The captured trees are real vendor data, and real vendor data breaks the DMTF
schemas: links to resources the capture does not hold, required properties left
out or null, typos, decimal numbers where the schema wants hex strings, action
targets and URIs the schemas do not allow. DMTF's ``redfish-service-validator``
reports each of those, and the emulator must pass it with zero failures.

The captured files are never edited. Instead, when a tree is loaded, two things
happen to the in-memory copy:

* **table fixes**: one table per tree (``vendor_fixes.py``), each entry naming
  the resources and property it changes, what the capture had, and why;
* **generic rules**, the same for every tree: a captured Redfish *error* body is
  not a resource (served as 404); a navigation link (``{"@odata.id": …}``,
  ``@Redfish.ActionInfo``, a sensor excerpt's ``DataSourceUri``) to a resource
  that neither the tree nor the emulator itself serves (the sessions collection,
  log entries, task monitors) is pruned, with its ``…@odata.count`` kept right;
  a Bios whose ``@Redfish.Settings`` object the capture lacks gets an empty one
  (nothing staged), which PATCH then fills.

Every change is recorded in a ``Normalisation`` report (the tests read it), and
a table entry that matches nothing is reported as unused, so tables cannot rot
silently when a capture changes.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

Resource = dict[str, Any]
_DROP = object()
_KEEP = object()


def key_of(path: str) -> str:
    """The lookup key of a path (same rule as ``tree.norm``, which imports this module)."""
    path = path.split("?", 1)[0].split("#", 1)[0]
    while "//" in path:
        path = path.replace("//", "/")
    return path.rstrip("/").lower() or "/"


# --- changes --------------------------------------------------------------------------------

@dataclass(frozen=True)
class Set:
    """Set the property (creating missing parent objects) to ``value``."""

    value: Any

    def new_value(self, resource: Resource, old: Any) -> Any:
        return self.value


@dataclass(frozen=True)
class Default:
    """Set the property to ``value`` where it is absent or null; leave other values alone."""

    value: Any

    def new_value(self, resource: Resource, old: Any) -> Any:
        return self.value if old is None else _KEEP


@dataclass(frozen=True)
class CopyFrom:
    """Where the property is absent or null, set it to another top-level property's value."""

    source: str

    def new_value(self, resource: Resource, old: Any) -> Any:
        return resource.get(self.source) if old is None else _KEEP


@dataclass(frozen=True)
class Drop:
    """Remove the property."""

    def new_value(self, resource: Resource, old: Any) -> Any:
        return _DROP


@dataclass(frozen=True)
class Rename:
    """Move the property's value to ``new_name`` in the same object."""

    new_name: str


@dataclass(frozen=True)
class Convert:
    """Replace the value with ``func(value)``; ``label`` says what the conversion is."""

    func: Callable[[Any], Any]
    label: str

    def new_value(self, resource: Resource, old: Any) -> Any:
        return self.func(old)


Change = Set | Default | CopyFrom | Drop | Rename | Convert


@dataclass(frozen=True)
class Fix:
    """One table entry: in every resource whose path matches ``where`` (case-insensitive;
    ``*`` is one path segment), change ``prop`` (``/``-separated; ``*`` is every list item
    or key). The entry counts as applied where it changed something."""

    where: str
    prop: str
    change: Change
    captured: str
    why: str


@dataclass(frozen=True)
class Relocate:
    """Serve the resource at ``old`` (with ``subtree``: and everything under it) at ``new``,
    rewriting every ``@odata.id`` and action ``target`` that points there."""

    old: str
    new: str
    captured: str
    why: str
    subtree: bool = False


Entry = Fix | Relocate


@dataclass
class Normalisation:
    """What the load did to one tree."""

    tree: str
    applied: list[tuple[Entry, int]] = field(default_factory=list)
    unused: list[Entry] = field(default_factory=list)
    error_bodies: list[str] = field(default_factory=list)
    settings_objects: list[str] = field(default_factory=list)  # empty ones added
    pruned: list[tuple[str, str, str]] = field(default_factory=list)  # (resource, prop, target)

    def summary(self) -> dict[str, int]:
        return {"fixes": sum(n for _, n in self.applied), "unused": len(self.unused),
                "error_bodies": len(self.error_bodies), "pruned_links": len(self.pruned),
                "settings_objects": len(self.settings_objects)}


# --- applying a table ------------------------------------------------------------------------

def _walk(node: Any, parts: list[str], create: bool) -> Iterator[tuple[Any, str | int]]:
    """(container, key) pairs the property path ``parts`` names under ``node``; with
    ``create``, missing parent objects are made on the way."""
    if not parts:
        return
    head, rest = parts[0], parts[1:]
    if head == "*":
        if isinstance(node, list):
            keys: list[str | int] = list(range(len(node)))
        elif isinstance(node, dict):
            keys = list(node)
        else:
            return
    else:
        keys = [head]
    for key in keys:
        if isinstance(node, list) and isinstance(key, int):
            child = node[key]
        elif isinstance(node, dict) and isinstance(key, str):
            if not rest:
                yield node, key
                continue
            child = node.get(key)
            if child is None and create:
                child = node[key] = {}
        else:
            continue
        if not rest:
            yield node, key
        else:
            yield from _walk(child, rest, create)


def _apply_fix(fix: Fix, resources: dict[str, Resource]) -> int:
    pattern = re.compile("[^/]*".join(re.escape(p) for p in key_of(fix.where).split("*")))
    count = 0
    for path, resource in resources.items():
        if not pattern.fullmatch(path):
            continue
        create = isinstance(fix.change, Set | Default | CopyFrom)
        for container, key in list(_walk(resource, fix.prop.split("/"), create)):
            present = (key in container) if isinstance(container, dict) else True
            if isinstance(fix.change, Rename):
                if present and isinstance(container, dict) and isinstance(key, str):
                    container[fix.change.new_name] = container.pop(key)
                    count += 1
                continue
            if not present and not create:
                continue
            old = container[key] if present else None
            value = fix.change.new_value(resource, old)
            if value is _KEEP or (present and value is not _DROP and value == old):
                continue
            if value is _DROP:
                del container[key]
            else:
                container[key] = value
            count += 1
    return count


def _relocate(entry: Relocate, resources: dict[str, Resource]) -> int:
    old_key, new = key_of(entry.old), entry.new.rstrip("/")

    def moved(value: str) -> str | None:
        base, _, fragment = value.partition("#")
        key = key_of(base)
        if key == old_key:
            return new + ("#" + fragment if fragment else "")
        if entry.subtree and key.startswith(old_key + "/"):
            return new + base.rstrip("/")[len(old_key):] + ("#" + fragment if fragment else "")
        return None

    count = 0
    for key in [k for k in resources if k == old_key or (entry.subtree
                                                          and k.startswith(old_key + "/"))]:
        resource = resources.pop(key)
        target = moved(str(resource.get("@odata.id", key))) or key
        resources[key_of(target)] = resource
        count += 1

    def rewrite(node: Any) -> None:
        if isinstance(node, dict):
            for name, value in node.items():
                if name in {"@odata.id", "target"} and isinstance(value, str):
                    node[name] = moved(value) or value
                else:
                    rewrite(value)
        elif isinstance(node, list):
            for item in node:
                rewrite(item)

    for resource in resources.values():
        rewrite(resource)
    return count


# --- generic rules ---------------------------------------------------------------------------

def _add_bios_settings_objects(resources: dict[str, Resource], report: Normalisation) -> None:
    for resource in list(resources.values()):
        if not str(resource.get("@odata.type", "")).startswith("#Bios."):
            continue
        link = resource.get("@Redfish.Settings", {}).get("SettingsObject", {}).get("@odata.id")
        if isinstance(link, str) and key_of(link) not in resources:
            resources[key_of(link)] = {
                "@odata.id": link, "@odata.type": resource["@odata.type"],
                "Id": link.rstrip("/").rsplit("/", 1)[-1], "Name": "BIOS pending settings",
                "Attributes": {}}
            report.settings_objects.append(key_of(link))


def _is_error_body(data: Resource) -> bool:
    return "error" in data and "@odata.id" not in data and "@odata.type" not in data


def _prune(node: Any, served: Callable[[str], bool], where: str, trail: str,
           pruned: list[tuple[str, str, str]]) -> None:
    if isinstance(node, dict):
        for name in list(node):
            value = node[name]
            here = f"{trail}/{name}" if trail else name
            if (name in {"@Redfish.ActionInfo", "DataSourceUri"} and isinstance(value, str)
                    and value.startswith("/") and not served(value)):
                pruned.append((where, here, value))
                del node[name]
            elif _dangling(value, served):
                pruned.append((where, here, value["@odata.id"]))
                del node[name]
            elif isinstance(value, list):
                kept = [v for v in value if not _dangling(v, served)]
                for gone in (v for v in value if _dangling(v, served)):
                    pruned.append((where, here, gone["@odata.id"]))
                if len(kept) != len(value):
                    node[name] = kept
                    if f"{name}@odata.count" in node:
                        node[f"{name}@odata.count"] = len(kept)
                for item in kept:
                    _prune(item, served, where, here, pruned)
            else:
                _prune(value, served, where, here, pruned)


def _dangling(value: Any, served: Callable[[str], bool]) -> bool:
    if not (isinstance(value, dict) and set(value) == {"@odata.id"}):
        return False
    target = value["@odata.id"]
    # Links into other services (absolute URLs) are not this service's to judge.
    return (isinstance(target, str) and target.startswith("/") and "#" not in target
            and not served(target))


def normalise(name: str, resources: dict[str, Resource], table: tuple[Entry, ...],
              served_elsewhere: Callable[[str], bool]) -> Normalisation:
    """Apply ``table`` and the generic rules to ``resources`` (keyed by ``key_of``) in place.

    ``served_elsewhere(key)`` says whether the emulator answers a path the tree does not
    hold (the sessions collection, log entries, task monitors, raw files): links there
    are not dangling.
    """
    report = Normalisation(name)
    for path in [p for p, r in resources.items() if _is_error_body(r)]:
        del resources[path]
        report.error_bodies.append(path)
    _add_bios_settings_objects(resources, report)
    for entry in table:
        count = (_apply_fix(entry, resources) if isinstance(entry, Fix)
                 else _relocate(entry, resources))
        if count:
            report.applied.append((entry, count))
        else:
            report.unused.append(entry)

    def served(target: str) -> bool:
        key = key_of(target)
        return key in resources or served_elsewhere(key)

    for path, resource in resources.items():
        _prune(resource, served, path, "", report.pruned)
    return report

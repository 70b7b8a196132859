"""A vendor's captured Redfish tree, loaded once and shared by every BMC that serves it.

The captured trees (``shared/fixtures/redfish/<vendor>/redfish/v1/.../index.json``)
are read at start from the path the lab passes in; nothing is copied into the
package. One ``VendorTree`` is immutable and shared by all emulated BMCs of that
vendor; each BMC keeps only the resources it changed (see ``bmc.py``), so a
thousand BMCs cost little more memory than one.

At load, ``normalise.py`` applies the tree's table from ``vendor_fixes.py`` and
the generic rules, so what is served passes DMTF's service validator; the files
on disk are never changed.

Paths are looked up case-insensitively and without trailing slashes, because
real BMCs (iLO in particular) answer that way and their own links rely on it:
the DL325 tree's Bios ``SettingsObject`` is ``/redfish/v1/systems/1/bios/settings/``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lifecycle.lab.redfish_emulator.normalise import Normalisation, Resource, normalise
from lifecycle.lab.redfish_emulator.normalise import key_of as norm
from lifecycle.lab.redfish_emulator.vendor_fixes import TABLES

__all__ = ["Resource", "VendorTree", "load_tree", "norm"]

# Served by the emulator itself rather than from the tree (see dispatch.py): links there
# are live, not dangling. Tasks and sessions the emulator makes come after the load, so
# a captured link to a captured task or session must still lead to one.
_TASK_MONITORS = "/redfish/v1/taskservice/taskmonitors/"


@dataclass(frozen=True)
class VendorTree:
    """Immutable resources of one captured tree, keyed by ``norm(path)``."""

    name: str
    root: Path
    resources: dict[str, Resource]
    raw_files: dict[str, tuple[bytes, str]] = field(default_factory=dict)  # key -> (body, type)
    normalisation: Normalisation | None = None  # what the load changed (vendor_fixes.py)

    @classmethod
    def load(cls, root: Path, *, normalised: bool = True) -> VendorTree:
        """Read ``root/redfish/v1/**``: ``index.json`` files become resources, others raw files.

        ``normalised=False`` serves the capture as it is (dangling links and all), for
        tests of how clients cope with real vendor data."""
        base = root / "redfish" / "v1"
        if not (base / "index.json").is_file():
            raise FileNotFoundError(f"no Redfish service root under {base}")
        resources: dict[str, Resource] = {}
        raw: dict[str, tuple[bytes, str]] = {}
        for file in sorted(base.rglob("*")):
            if not file.is_file():
                continue
            rel = file.relative_to(root).parent.as_posix()
            url = "/" + rel
            if file.name == "index.json":
                data = json.loads(file.read_text(encoding="utf-8"))
                if isinstance(data, dict):
                    resources[norm(url)] = _strip_mockup_annotations(data)
            elif file.name == "index.xml":
                raw[norm(url)] = (file.read_bytes(), "application/xml")
            elif file.suffix == ".json":
                raw[norm(url + "/" + file.name)] = (file.read_bytes(), "application/json")
        _add_missing_service_collections(resources)
        if not normalised:
            return cls(name=root.name, root=root, resources=resources, raw_files=raw)
        root_res = resources.get(norm("/redfish/v1"), {})
        sessions = norm(str(root_res.get("Links", {}).get("Sessions", {}).get(
            "@odata.id", "/redfish/v1/SessionService/Sessions")))

        # A LogService's Entries collection is served live (bmc.py), captured or not.
        live_entries = {norm(str(res.get("Entries", {}).get("@odata.id", "")))
                        for res in resources.values()
                        if str(res.get("@odata.type", "")).startswith("#LogService.")}

        def served_elsewhere(key: str) -> bool:
            return (key in raw or key in live_entries or key == sessions
                    or key.startswith(_TASK_MONITORS))

        report = normalise(root.name, resources, TABLES.get(root.name, ()), served_elsewhere)
        return cls(name=root.name, root=root, resources=resources, raw_files=raw,
                   normalisation=report)

    def get(self, path: str) -> Resource | None:
        return self.resources.get(norm(path))

    @property
    def service_root(self) -> Resource:
        return self.resources[norm("/redfish/v1")]

    def system_ids(self) -> list[str]:
        """``@odata.id`` of every ComputerSystem listed in the Systems collection."""
        systems = self.service_root.get("Systems", {}).get("@odata.id")
        coll = self.get(systems) if isinstance(systems, str) else None
        if coll is None:
            return []
        return [m["@odata.id"] for m in coll.get("Members", []) if "@odata.id" in m]

    def first_link(self, path: str, key: str) -> str | None:
        """``resource[key]['@odata.id']`` if present."""
        res = self.get(path)
        if res is None:
            return None
        link = res.get(key)
        if isinstance(link, dict) and isinstance(link.get("@odata.id"), str):
            return str(link["@odata.id"])
        return None

    def links_of(self, path: str, key: str) -> list[str]:
        """``resource['Links'][key][*]['@odata.id']``."""
        res = self.get(path) or {}
        items = res.get("Links", {}).get(key, [])
        return [i["@odata.id"] for i in items if isinstance(i, dict) and "@odata.id" in i]

    def members(self, path: str) -> list[str]:
        coll = self.get(path) or {}
        return [m["@odata.id"] for m in coll.get("Members", []) if isinstance(m, dict)
                and "@odata.id" in m]


# Collections a service root links that captures often leave out; served empty when absent.
_ROOT_COLLECTIONS = {
    "Registries": ("#MessageRegistryFileCollection.MessageRegistryFileCollection", "Registries"),
    "JsonSchemas": ("#JsonSchemaFileCollection.JsonSchemaFileCollection", "JSON Schemas"),
}


def _add_missing_service_collections(resources: dict[str, Resource]) -> None:
    root = resources.get(norm("/redfish/v1"), {})
    for name, (odata_type, title) in _ROOT_COLLECTIONS.items():
        link = root.get(name, {}).get("@odata.id") if isinstance(root.get(name), dict) else None
        if isinstance(link, str) and norm(link) not in resources:
            resources[norm(link)] = {"@odata.id": link.rstrip("/"), "@odata.type": odata_type,
                                     "Name": title, "Members": [], "Members@odata.count": 0}


def _strip_mockup_annotations(data: Any) -> Any:
    """Drop ``@Redfish.Copyright``: DMTF marks it "only for use in mockups"; services omit it."""
    if isinstance(data, dict):
        return {k: _strip_mockup_annotations(v) for k, v in data.items()
                if k != "@Redfish.Copyright"}
    if isinstance(data, list):
        return [_strip_mockup_annotations(v) for v in data]
    return data


_TREES: dict[tuple[Path, bool], VendorTree] = {}


def load_tree(root: Path, *, normalised: bool = True) -> VendorTree:
    """Load (once per process) the tree at ``root``, normalised or as captured."""
    key = (root.resolve(), normalised)
    if key not in _TREES:
        _TREES[key] = VendorTree.load(key[0], normalised=normalised)
    return _TREES[key]

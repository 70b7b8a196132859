"""A vendor's captured Redfish tree, loaded once and shared by every BMC that serves it.

The captured trees (``shared/fixtures/redfish/<vendor>/redfish/v1/.../index.json``)
are read at start from the path the lab passes in; nothing is copied into the
package. One ``VendorTree`` is immutable and shared by all emulated BMCs of that
vendor; each BMC keeps only the resources it changed (see ``bmc.py``), so a
thousand BMCs cost little more memory than one.

Paths are looked up case-insensitively and without trailing slashes, because
real BMCs (iLO in particular) answer that way and their own links rely on it:
the DL325 tree's Bios ``SettingsObject`` is ``/redfish/v1/systems/1/bios/settings/``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

Resource = dict[str, Any]


def norm(path: str) -> str:
    """The lookup key of a Redfish path: no query, no fragment, no trailing slash, lower case."""
    path = path.split("?", 1)[0].split("#", 1)[0]
    while "//" in path:
        path = path.replace("//", "/")
    return path.rstrip("/").lower() or "/"


@dataclass(frozen=True)
class VendorTree:
    """Immutable resources of one captured tree, keyed by ``norm(path)``."""

    name: str
    root: Path
    resources: dict[str, Resource]
    raw_files: dict[str, tuple[bytes, str]] = field(default_factory=dict)  # key -> (body, type)

    @classmethod
    def load(cls, root: Path) -> VendorTree:
        """Read ``root/redfish/v1/**``: ``index.json`` files become resources, others raw files."""
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
        return cls(name=root.name, root=root, resources=resources, raw_files=raw)

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


_TREES: dict[Path, VendorTree] = {}


def load_tree(root: Path) -> VendorTree:
    """Load (once per process) the tree at ``root``."""
    key = root.resolve()
    if key not in _TREES:
        _TREES[key] = VendorTree.load(key)
    return _TREES[key]

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
  Terraform's pool and image, and its firmware baseline where it gives one
  (``firmware``: component -> version, ``firmware_files``: component -> the
  image that installs it; the planner plans and applies it as for
  ``racklife apply``);
* images: the base file's versions, except that a node's ``image =
  "NAME:VERSION"`` pins that version. An inventory gives each image one
  version, so nodes pinned to different versions of one image, and the nodes
  that pin none, are planned in separate groups (:func:`groups`), each with
  its own inventory.

``for_import`` keeps the stored records verbatim (their own pool field), so
an import made for a pool changes no node.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from pydantic import ValidationError

from lifecycle.model import vocab
from lifecycle.model.inventory import BUILTIN_POOLS, FirmwareBaseline, Image, Inventory, Node, Pool
from lifecycle.store import Store, StoreError


@dataclass(frozen=True)
class NodeWant:
    """What a ``racklife_node`` resource asks of one node."""

    name: str
    pool: str
    image: str | None = None  # NAME or NAME:VERSION; None: the base inventory's (no opinion)
    firmware: Mapping[str, str] = field(default_factory=dict)  # component -> version; empty: no opinion
    firmware_files: Mapping[str, str] = field(default_factory=dict)  # component -> the image installing it

    @property
    def pin(self) -> tuple[str, str] | None:
        """(image, version) when the resource names a version, else None (the base inventory's version)."""
        if not self.image:
            return None
        name, _, version = self.image.partition(":")
        return (name, version) if version else None


def image_problem(image: str) -> str | None:
    """Why ``image`` is not NAME or NAME:VERSION (an image name and a version as an inventory writes them)."""
    name, colon, version = image.partition(":")
    checks = [(name, vocab.node_name, "name")] + ([(version, vocab.version, "version")] if colon else [])
    for part, check, what in checks:
        try:
            check(part)
        except ValueError as exc:
            return f"image {what} {part!r} {exc} (give NAME or NAME:VERSION)"
    return None


def baseline_problems(firmware: Mapping[str, str], files: Mapping[str, str]) -> list[tuple[str, str]]:
    """(attribute, why) for each part of a baseline that is not an inventory's ``firmware:`` entry."""
    out = [("firmware_files", f"no image for component {c!r}: firmware_files must name the file that installs "
                              f"version {v}") for c, v in sorted(firmware.items()) if c not in files]
    out += [("firmware_files", f"component {c!r} is not in the baseline (firmware)") for c in sorted(files)
            if c not in firmware]
    for c, v in sorted(firmware.items()):
        if c in files:
            try:
                FirmwareBaseline(component=c, version=v, file=files[c])
            except ValidationError as exc:
                for e in exc.errors(include_url=False):
                    attr = "firmware_files" if e["loc"] == ("file",) else "firmware"
                    out.append((attr, f"{c}: {e['loc'][0]} {str(e['msg']).removeprefix('Value error, ')}"))
    return out


def baseline(want: NodeWant) -> list[FirmwareBaseline]:
    """The inventory's ``firmware:`` list for the resource's baseline; ``ValueError`` saying what is wrong."""
    problems = baseline_problems(want.firmware, want.firmware_files)
    if problems:
        raise ValueError(f"racklife_node {want.name}: " + "; ".join(f"{a}: {w}" for a, w in problems))
    return [FirmwareBaseline(component=c, version=v, file=want.firmware_files[c])
            for c, v in sorted(want.firmware.items())]


def groups(wants: Mapping[str, NodeWant]) -> list[dict[str, NodeWant]]:
    """``wants`` split so that each group's inventory gives every node the version it asks for: the nodes that
    pin no version (the base file's version) together, and the pinning ones in groups that pin no image twice.

    An unpinned node is never grouped with a pin: the pin would change the version its image has in that
    group's inventory (its image may be the base file's, whatever the resource says)."""
    loose = {n: w for n, w in sorted(wants.items()) if w.pin is None}
    out: list[tuple[dict[str, str], dict[str, NodeWant]]] = []
    for name, want in sorted(wants.items()):
        pin = want.pin
        if pin is None:
            continue
        for versions, members in out:
            if versions.get(pin[0], pin[1]) == pin[1]:
                versions[pin[0]] = pin[1]
                members[name] = want
                break
        else:
            out.append(({pin[0]: pin[1]}, {name: want}))
    return ([loose] if loose else []) + [members for _versions, members in out]


class UnknownNode(ValueError):
    """A node the base inventory does not list: its hardware (serial, BMC, NICs) is unknown."""


class UnknownPool(ValueError):
    """A pool neither the store, the base inventory nor a racklife_pool defines."""


def compose(base: Inventory, store: Store, nodes: Mapping[str, NodeWant] | None = None,
            pools: Mapping[str, Pool] | None = None, for_import: bool = False) -> Inventory:
    """The inventory for a plan, an apply or an import (see the module's docstring)."""
    nodes = nodes or {}
    for w in nodes.values():
        if w.image and (why := image_problem(w.image)):
            raise ValueError(f"racklife_node {w.name}: {why}")
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
            image = want.image.partition(":")[0] if want.image else None
            node = node.model_copy(update={"pool": want.pool, **({"image": image} if image else {}),
                                           **({"firmware": baseline(want)} if want.firmware else {})})
        elif rec is not None and not for_import:
            node = node.model_copy(update={"pool": rec.pool})
        out.append(node)
    return base.model_copy(update={"nodes": out, "pools": merged, "images": _images(base, nodes)})


def _images(base: Inventory, nodes: Mapping[str, NodeWant]) -> list[Image]:
    """The base file's images, with the versions the nodes pin (one per image: see :func:`groups`)."""
    pins = dict(p for w in nodes.values() if (p := w.pin) is not None)
    if len(pins) != len({p for w in nodes.values() if (p := w.pin) is not None}):
        raise ValueError("two versions of one image pinned in one plan (split them with groups())")
    out = [i.model_copy(update={"version": pins.pop(i.name)}) if i.name in pins else i for i in base.images]
    return out + [Image(name=name, version=version) for name, version in sorted(pins.items())]

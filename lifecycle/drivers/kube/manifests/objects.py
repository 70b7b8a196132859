"""Kubernetes objects as racklife renders them: one typed wrapper, and the errors a check finds.

A rendered object is the JSON document the API server would receive, held in
a frozen ``Manifest`` that knows its apiVersion, kind, name and namespace, so
that callers (the CLI, ``stacks/`` handing objects to pulumi-kubernetes) pass
one typed value instead of a bare dict. ``FieldError`` is what every check
(schema, CEL rule, built-in kind) reports: the field path in the API's own
notation (``spec.mig.strategy``, ``spec.env[0].name``) and the message.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

JsonObject = dict[str, Any]


@dataclass(frozen=True)
class Manifest:
    """One Kubernetes object. ``body`` holds the whole document, metadata included."""

    body: Mapping[str, Any]

    @classmethod
    def new(cls, api_version: str, kind: str, name: str, namespace: str | None = None,
            labels: Mapping[str, str] | None = None, **fields: Any) -> Manifest:
        meta: JsonObject = {"name": name}
        if namespace is not None:
            meta["namespace"] = namespace
        if labels:
            meta["labels"] = dict(sorted(labels.items()))
        return cls({"apiVersion": api_version, "kind": kind, "metadata": meta, **fields})

    @property
    def api_version(self) -> str:
        return str(self.body.get("apiVersion", ""))

    @property
    def kind(self) -> str:
        return str(self.body.get("kind", ""))

    @property
    def metadata(self) -> Mapping[str, Any]:
        meta = self.body.get("metadata")
        return meta if isinstance(meta, Mapping) else {}

    @property
    def name(self) -> str:
        return str(self.metadata.get("name", ""))

    @property
    def namespace(self) -> str | None:
        ns = self.metadata.get("namespace")
        return str(ns) if ns is not None else None

    @property
    def ref(self) -> str:
        """``Kind/namespace/name`` (``Kind/name`` for cluster-scoped objects), for messages."""
        return "/".join(p for p in (self.kind, self.namespace, self.name) if p)

    def to_dict(self) -> JsonObject:
        """A deep copy of the document, safe to change."""
        return copy.deepcopy(dict(self.body))


@dataclass(frozen=True, order=True)
class FieldError:
    """One problem with one object, at one field (``spec.nodeSelector``), as the API server would say it."""

    object_ref: str
    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.object_ref}: {self.path}: {self.message}"


@dataclass(frozen=True)
class Rendered:
    """What a renderer gives: the objects in apply order, and the Secrets they expect to exist.

    racklife never renders a Secret's value: each entry of ``secrets`` names a
    Secret and key that the stack creates from the site's secret store.
    """

    objects: tuple[Manifest, ...]
    secrets: tuple[SecretKeyRef, ...] = field(default=())


@dataclass(frozen=True, order=True)
class SecretKeyRef:
    namespace: str
    name: str
    key: str
    purpose: str


def path_str(parts: tuple[str | int, ...] | list[str | int]) -> str:
    """``("spec", "env", 0, "name")`` → ``spec.env[0].name`` (the notation of API errors)."""
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or "<object>"


class _Dumper(yaml.SafeDumper):
    """Block style (``|``) for multi-line strings, as people write config files."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def dump(objects: tuple[Manifest, ...] | list[Manifest], fmt: str) -> str:
    """YAML documents (``---`` between them) or a JSON ``List``, as ``kubectl get -o`` prints them."""
    docs = [m.to_dict() for m in objects]
    if fmt == "json":
        return json.dumps({"apiVersion": "v1", "kind": "List", "items": docs}, indent=2) + "\n"
    return "".join("---\n" + yaml.dump(d, Dumper=_Dumper, sort_keys=False) for d in docs)

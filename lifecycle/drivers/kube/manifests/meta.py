"""ObjectMeta checks as kube-apiserver makes them: names, namespaces, label and annotation keys and values.

A CRD's schema says only ``metadata: {type: object}``; the API server checks
metadata itself, with the rules of ``k8s.io/apimachinery`` validation
(``IsDNS1123Subdomain``, ``IsQualifiedName``, ``IsValidLabelValue``). The
model's vocabulary holds those rules once (the inventory and the lab's API
stand-in use the same functions); this module applies them to a rendered
object, so an object the cluster would refuse is refused before it leaves
racklife.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lifecycle.model import vocab

# What ObjectMeta holds that a client may set; the server owns the rest (uid, resourceVersion, …).
_CLIENT_FIELDS = frozenset({"name", "generateName", "namespace", "labels", "annotations", "finalizers",
                            "ownerReferences"})
_SERVER_FIELDS = frozenset({"uid", "resourceVersion", "generation", "creationTimestamp", "deletionTimestamp",
                            "deletionGracePeriodSeconds", "managedFields", "selfLink"})
_ANNOTATIONS_MAX_BYTES = vocab.ANNOTATIONS_MAX_BYTES


def _joined(errors: list[str]) -> str | None:
    """apimachinery's reasons as one message (None: valid)."""
    return "; ".join(errors) or None


def dns1123_label(value: str) -> str | None:
    """Why ``value`` is not a namespace's (or another RFC 1123 label's) name, or None."""
    return _joined(vocab.dns1123_label_errors(value))


def check_metadata(meta: Any, namespaced: bool) -> list[tuple[str, str]]:
    """``(path, message)`` for every problem in an object's metadata."""
    if not isinstance(meta, Mapping):
        return [("metadata", "Required value: metadata must be an object")]
    found: list[tuple[str, str]] = []
    for key in meta:
        if key in _SERVER_FIELDS:
            found.append((f"metadata.{key}", "Forbidden: set by the API server, not by a client"))
        elif key not in _CLIENT_FIELDS:
            found.append((f"metadata.{key}", f'unknown field "metadata.{key}"'))
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        found.append(("metadata.name", "Required value: name or generateName is required"))
    elif err := _joined(vocab.dns1123_subdomain_errors(name)):
        found.append(("metadata.name", f'Invalid value: "{name}": {err}'))
    ns = meta.get("namespace")
    if namespaced:
        if not isinstance(ns, str) or not ns:
            found.append(("metadata.namespace", "Required value: a namespaced object needs a namespace"))
        elif err := dns1123_label(ns):
            found.append(("metadata.namespace", f'Invalid value: "{ns}": {err}'))
    elif ns:
        found.append(("metadata.namespace", "Forbidden: not allowed on a cluster-scoped object"))
    found += _string_map(meta.get("labels"), "metadata.labels", values_are_labels=True)
    found += _string_map(meta.get("annotations"), "metadata.annotations", values_are_labels=False)
    return found


def _string_map(value: Any, path: str, values_are_labels: bool) -> list[tuple[str, str]]:
    if value is None:
        return []
    if not isinstance(value, Mapping):
        return [(path, "Invalid value: must be a map of strings")]
    found: list[tuple[str, str]] = []
    for key, item in value.items():
        where = f"{path}[{key}]"
        why = vocab.qualified_name_errors(str(key)) if values_are_labels else vocab.annotation_key_errors(str(key))
        if err := _joined(why):
            found.append((path, f'Invalid value: "{key}": {err}'))
        if not isinstance(item, str):
            found.append((where, f"Invalid value: {item!r}: must be a string"))
            continue
        if values_are_labels and (err := _joined(vocab.label_value_errors(item))):
            found.append((where, f'Invalid value: "{item}": {err}'))
    if not values_are_labels and vocab.annotations_size(value) > _ANNOTATIONS_MAX_BYTES:
        found.append((path, f"Too long: must have at most {_ANNOTATIONS_MAX_BYTES} bytes"))
    return found

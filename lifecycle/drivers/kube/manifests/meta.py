"""ObjectMeta checks as kube-apiserver makes them: names, namespaces, label and annotation keys and values.

A CRD's schema says only ``metadata: {type: object}``; the API server checks
metadata itself, with the rules of ``k8s.io/apimachinery`` validation
(``IsDNS1123Subdomain``, ``IsQualifiedName``, ``IsValidLabelValue``). They are
repeated here, so a rendered object that the cluster would refuse is refused
before it leaves racklife.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")

# What ObjectMeta holds that a client may set; the server owns the rest (uid, resourceVersion, …).
_CLIENT_FIELDS = frozenset({"name", "generateName", "namespace", "labels", "annotations", "finalizers",
                            "ownerReferences"})
_SERVER_FIELDS = frozenset({"uid", "resourceVersion", "generation", "creationTimestamp", "deletionTimestamp",
                            "deletionGracePeriodSeconds", "managedFields", "selfLink"})
_ANNOTATIONS_MAX_BYTES = 256 * 1024


def dns1123_label(value: str) -> str | None:
    if len(value) > 63:
        return "must be no more than 63 characters"
    if not _DNS1123_LABEL.match(value):
        return ("a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
                "and must start and end with an alphanumeric character")
    return None


def dns1123_subdomain(value: str) -> str | None:
    if len(value) > 253:
        return "must be no more than 253 characters"
    if not _DNS1123_SUBDOMAIN.match(value):
        return ("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
                "'.', and must start and end with an alphanumeric character")
    return None


def qualified_name(value: str) -> str | None:
    """A label or annotation key: ``[prefix/]name``, the prefix a DNS subdomain."""
    prefix, slash, name = value.rpartition("/")
    if slash and not prefix:
        return "prefix part must be non-empty"
    if prefix and (err := dns1123_subdomain(prefix)):
        return f"prefix part {err}"
    if not name:
        return "name part must be non-empty"
    if len(name) > 63:
        return "name part must be no more than 63 characters"
    if not _QUALIFIED_NAME.match(name):
        return ("name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end "
                "with an alphanumeric character")
    return None


def label_value(value: str) -> str | None:
    if len(value) > 63:
        return "must be no more than 63 characters"
    if not _LABEL_VALUE.match(value):
        return ("a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', "
                "and must start and end with an alphanumeric character")
    return None


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
    elif err := dns1123_subdomain(name):
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
    size = 0
    for key, item in value.items():
        where = f"{path}[{key}]"
        if err := qualified_name(str(key)):
            found.append((path, f'Invalid value: "{key}": {err}'))
        if not isinstance(item, str):
            found.append((where, f"Invalid value: {item!r}: must be a string"))
            continue
        size += len(str(key)) + len(item.encode())
        if values_are_labels and (err := label_value(item)):
            found.append((where, f'Invalid value: "{item}": {err}'))
    if not values_are_labels and size > _ANNOTATIONS_MAX_BYTES:
        found.append((path, f"Too long: must have at most {_ANNOTATIONS_MAX_BYTES} bytes"))
    return found

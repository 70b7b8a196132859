"""The three patch formats kube-apiserver accepts, applied as it applies them.

Why it exists: kubectl sends a strategic merge patch for ``cordon``, ``taint``
and ``apply`` (with ``$setElementOrder`` and ``$retainKeys`` directives, and
lists merged by their key: containers by ``name``, conditions by ``type``),
a JSON merge patch for ``label`` and ``patch --type merge``, and an RFC 6902
JSON patch for ``patch --type json``. A stand-in that treated them alike
would accept patches a real server applies differently. The merge keys come
from the Kubernetes types' ``patchMergeKey`` tags for the fields these kinds
have; a list without one (``taints``, ``tolerations``) is replaced, as there.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import jsonpatch

from lifecycle.drivers.kube import selectors as sel

MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
APPLY = "application/apply-patch+yaml"
TYPES = (JSON_PATCH, MERGE, APPLY, STRATEGIC)

# Field name → patchMergeKey (lists merged element by element), from k8s.io/api's struct tags.
MERGE_KEYS: dict[str, str] = {
    "containers": "name", "initContainers": "name", "ephemeralContainers": "name", "volumes": "name",
    "env": "name", "ports": "containerPort", "volumeMounts": "mountPath", "volumeDevices": "devicePath",
    "conditions": "type", "ownerReferences": "uid", "imagePullSecrets": "name", "addresses": "type",
    "hostAliases": "ip", "resourceClaims": "name", "podIPs": "ip",
}
PRIMITIVE_MERGE = frozenset({"finalizers"})
"""Lists of scalars with ``patchStrategy: merge``: a patch adds to them."""


class PatchError(ValueError):
    """The patch cannot be applied (422 for a failed JSON-patch test or path, 400 for a malformed body)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def apply(kind: str, current: Mapping[str, Any], patch: Any) -> dict[str, Any]:
    if kind == JSON_PATCH:
        if not isinstance(patch, list):
            raise PatchError(400, "json: cannot unmarshal object into Go value of type jsonpatch.Patch")
        try:
            out = jsonpatch.apply_patch(dict(current), patch, in_place=False)
        except jsonpatch.JsonPatchConflict as e:
            raise PatchError(422, f"the server rejected our request due to an error in our request: {e}") from e
        except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as e:
            raise PatchError(422, f"the server rejected our request due to an error in our request: {e}") from e
        if not isinstance(out, dict):
            raise PatchError(422, "the patched object is not an object")
        return out
    if not isinstance(patch, Mapping):
        raise PatchError(400, "json: cannot unmarshal array into Go value of type map[string]interface {}")
    if kind == MERGE:
        return dict(sel.merge_patch(current, patch))
    return strategic(current, patch)


def strategic(base: Any, patch: Mapping[str, Any]) -> dict[str, Any]:
    """A strategic merge patch over a map (the directives kubectl emits are honoured)."""
    if patch.get("$patch") == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    out = dict(base) if isinstance(base, Mapping) else {}
    retain = patch.get("$retainKeys")
    for key, value in patch.items():
        if key in ("$patch", "$retainKeys") or key.startswith("$setElementOrder/"):
            continue
        if key.startswith("$deleteFromPrimitiveList/"):
            field = key.split("/", 1)[1]
            out[field] = [v for v in out.get(field) or [] if v not in (value or [])]
            continue
        if value is None or (isinstance(value, Mapping) and value.get("$patch") == "delete"):
            out.pop(key, None)
        elif isinstance(value, Mapping):
            out[key] = strategic(out.get(key), value)
        elif isinstance(value, list):
            out[key] = _list(key, out.get(key), value)
        else:
            out[key] = copy.deepcopy(value)
    if isinstance(retain, list):
        out = {k: v for k, v in out.items() if k in retain}
    return out


def _list(field: str, base: Any, patch: list[Any]) -> list[Any]:
    if any(isinstance(i, Mapping) and i.get("$patch") == "replace" for i in patch):
        return [copy.deepcopy(i) for i in patch if not (isinstance(i, Mapping) and "$patch" in i)]
    current = list(base) if isinstance(base, list) else []
    if field in PRIMITIVE_MERGE:
        return current + [v for v in patch if v not in current]
    key = MERGE_KEYS.get(field)
    if key is None:
        return copy.deepcopy(patch)
    out = [copy.deepcopy(i) for i in current]
    for item in patch:
        if not isinstance(item, Mapping) or key not in item:
            raise PatchError(400, f"map: {item} does not contain declared merge key: {key}")
        at = next((n for n, have in enumerate(out) if isinstance(have, Mapping) and have.get(key) == item[key]), None)
        if item.get("$patch") == "delete":
            if at is not None:
                del out[at]
        elif at is None:
            out.append(strategic({}, item))
        else:
            out[at] = strategic(out[at], item)
    return out

"""A CRD's structural schema applied as kube-apiserver applies it: unknown fields, defaults, then values.

kube-apiserver does three things with a custom resource before storing it,
in this order: it finds the fields its schema does not declare (with
``fieldValidation=Strict``, which ``kubectl apply`` uses, each is an error;
otherwise they are silently pruned, which hides a typo until the operator
ignores the setting), it applies the schema's ``default`` values, and it
validates the result against the OpenAPI v3 schema. ``jsonschema`` alone
would do none of the first two: OpenAPI allows any extra field unless told
otherwise, and defaults are annotations to it. So this module walks object
and schema together for the first two, and hands the third to
``openapi-schema-validator`` (OpenAPI 3.0 semantics: ``nullable``, formats).

Structural rules followed (``apiextensions`` "structural schema"): a field is
known if it is in ``properties``, or any key is known under an
``additionalProperties`` schema; ``x-kubernetes-preserve-unknown-fields:
true`` keeps everything below it; ``x-kubernetes-embedded-resource`` allows
``apiVersion``, ``kind`` and ``metadata``. A default is applied where the
field is absent, or null and not ``nullable``; defaults are then walked too,
so nested defaults apply.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterator
from typing import Any

from jsonschema.exceptions import ValidationError
from openapi_schema_validator import OAS30Validator, oas30_format_checker

from lifecycle.drivers.kube.manifests.objects import path_str

Path = tuple[str | int, ...]
Problem = tuple[str, str]

_EMBEDDED = ("apiVersion", "kind", "metadata")


def unknown_fields(value: Any, schema: dict[str, Any], path: Path = ()) -> list[Problem]:
    """Every field of ``value`` its schema does not declare, as ``unknown field "spec.x"``."""
    found: list[Problem] = []
    if schema.get("x-kubernetes-preserve-unknown-fields") is True:
        # Known fields below still get their own schema's treatment.
        if isinstance(value, dict):
            for key, sub in (schema.get("properties") or {}).items():
                if key in value:
                    found += unknown_fields(value[key], sub, (*path, key))
        return found
    if isinstance(value, dict):
        props: dict[str, Any] = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        for key, item in value.items():
            where = (*path, key)
            if path == () and key == "metadata":
                continue  # ObjectMeta is checked on its own (meta.py)
            if key in props:
                found += unknown_fields(item, props[key], where)
            elif isinstance(extra, dict):
                found += unknown_fields(item, extra, where)
            elif extra is True or (schema.get("x-kubernetes-embedded-resource") and key in _EMBEDDED):
                continue
            else:
                found.append((path_str(where), f'unknown field "{path_str(where)}"'))
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            found += unknown_fields(item, schema["items"], (*path, i))
    return found


def apply_defaults(value: Any, schema: dict[str, Any]) -> None:
    """Fill in the schema's defaults, in place (as the API server does before validating)."""
    if isinstance(value, dict):
        props: dict[str, Any] = schema.get("properties") or {}
        for key, sub in props.items():
            if "default" in sub and (key not in value or (value[key] is None and not sub.get("nullable"))):
                value[key] = copy.deepcopy(sub["default"])
            if key in value:
                apply_defaults(value[key], sub)
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            for key, item in value.items():
                if key not in props:
                    apply_defaults(item, extra)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for item in value:
            apply_defaults(item, schema["items"])


def _kind(value: Any) -> str:
    """The JSON type name the API server uses in its messages."""
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if value is None:
        return "null"
    if isinstance(value, dict):
        return "object"
    if isinstance(value, list):
        return "array"
    return "string" if isinstance(value, str) else type(value).__name__


def _quoted(value: Any) -> str:
    return json.dumps(value) if isinstance(value, (str, int, float, bool)) or value is None else f'"{_kind(value)}"'


# The API server's wording, per JSON-schema keyword (k8s.io/kube-openapi validate errors).
_MESSAGES: dict[str, Callable[[ValidationError, str], str]] = {
    "type": lambda e, p: f'Invalid value: "{_kind(e.instance)}": {p} in body must be of type {e.validator_value}',
    "enum": lambda e, p: ("Unsupported value: " + _quoted(e.instance) + ": supported values: "
                          + ", ".join(json.dumps(v) for v in e.validator_value)),
    "pattern": lambda e, p: f"Invalid value: {_quoted(e.instance)}: {p} in body should match '{e.validator_value}'",
    "format": lambda e, p: f"Invalid value: {_quoted(e.instance)}: {p} in body must be of type {e.validator_value}",
    "minimum": lambda e, p: f"Invalid value: {_quoted(e.instance)}: {p} in body should be greater than or "
                            f"equal to {e.validator_value}",
    "maximum": lambda e, p: f"Invalid value: {_quoted(e.instance)}: {p} in body should be less than or "
                            f"equal to {e.validator_value}",
    "minLength": lambda e, p: f"Invalid value: {_quoted(e.instance)}: {p} in body should be at least "
                              f"{e.validator_value} chars long",
    "maxLength": lambda e, p: f"Too long: may not be more than {e.validator_value} bytes",
    "minItems": lambda e, p: f"Invalid value: {len(e.instance)}: {p} in body should have at least "
                             f"{e.validator_value} items",
    "maxItems": lambda e, p: f"Too many: {len(e.instance)}: must have at most {e.validator_value} items",
}


def _errors(error: ValidationError) -> Iterator[Problem]:
    path = path_str(list(error.absolute_path))
    if error.validator == "required":
        for name in error.validator_value:
            if isinstance(error.instance, dict) and name not in error.instance:
                yield (path_str([*error.absolute_path, name]), "Required value")
        return
    message = _MESSAGES.get(str(error.validator))
    yield (path, message(error, path) if message else f"Invalid value: {_quoted(error.instance)}: {error.message}")


def validate_values(value: Any, schema: dict[str, Any]) -> list[Problem]:
    """Types, enums, patterns, formats, required fields: the OpenAPI v3 part of the check."""
    validator = OAS30Validator(schema, format_checker=oas30_format_checker)
    found: list[Problem] = []
    for error in validator.iter_errors(value):
        found += _errors(error)
    return found

"""Kubernetes' protobuf request bodies, decoded for the few kinds kubectl's typed generators send.

Why it exists: ``kubectl create namespace NAME`` (a typed client) sends its
body as ``application/vnd.kubernetes.protobuf`` and does not fall back to
JSON when refused, so without this the most common first command on a new
cluster fails. The wire format is the ``k8s\\0`` envelope around a
``runtime.Unknown`` whose ``raw`` field holds the object; the field numbers
are those of k8s.io/api's ``generated.proto`` for the kinds in ``SCHEMAS``.
Any other kind is refused (415), never guessed at.
"""

from __future__ import annotations

from typing import Any

Obj = dict[str, Any]
MAGIC = b"k8s\x00"
# A schema: field number -> (JSON name, "string" | "strings" | "map" | "int" | schema).
Schema = dict[int, tuple[str, Any]]
_META: Schema = {1: ("name", "string"), 2: ("generateName", "string"), 3: ("namespace", "string"),
                 11: ("labels", "map"), 12: ("annotations", "map"), 14: ("finalizers", "strings")}
SCHEMAS: dict[tuple[str, str], Schema] = {
    ("v1", "Namespace"): {1: ("metadata", _META), 2: ("spec", {1: ("finalizers", "strings")})},
}


class Undecodable(ValueError):
    """Not a protobuf body the stand-in can read."""


def _varint(data: bytes, at: int) -> tuple[int, int]:
    value, shift = 0, 0
    while True:
        if at >= len(data):
            raise Undecodable("truncated varint")
        byte = data[at]
        value |= (byte & 0x7F) << shift
        at += 1
        if not byte & 0x80:
            return value, at
        shift += 7


def fields(data: bytes) -> list[tuple[int, int | bytes]]:
    """The (field number, value) pairs of one message; varints as int, length-delimited as bytes."""
    out: list[tuple[int, int | bytes]] = []
    at = 0
    while at < len(data):
        key, at = _varint(data, at)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, at = _varint(data, at)
            out.append((number, value))
        elif wire == 2:
            size, at = _varint(data, at)
            if at + size > len(data):
                raise Undecodable("truncated field")
            out.append((number, data[at:at + size]))
            at += size
        elif wire in (1, 5):
            at += 8 if wire == 1 else 4
        else:
            raise Undecodable(f"unsupported wire type {wire}")
    return out


def _decode(data: bytes, schema: Schema) -> Obj:
    out: Obj = {}
    for number, value in fields(data):
        if number not in schema:
            continue
        name, kind = schema[number]
        if kind == "int" and isinstance(value, int):
            out[name] = value
        elif not isinstance(value, bytes):
            raise Undecodable(f"field {name} has the wrong wire type")
        elif kind == "string":
            out[name] = value.decode()
        elif kind == "strings":
            out.setdefault(name, []).append(value.decode())
        elif kind == "map":
            entry = dict(fields(value))
            key, val = entry.get(1, b""), entry.get(2, b"")
            if not isinstance(key, bytes) or not isinstance(val, bytes):
                raise Undecodable(f"bad map entry in {name}")
            out.setdefault(name, {})[key.decode()] = val.decode()
        elif isinstance(kind, dict):
            out[name] = _decode(value, kind)
    return out


def decode(body: bytes) -> Obj:
    """The JSON form of a protobuf-encoded object of a kind in ``SCHEMAS``."""
    if not body.startswith(MAGIC):
        raise Undecodable("no k8s protobuf envelope")
    unknown = dict(fields(body[len(MAGIC):]))
    type_meta, raw = unknown.get(1), unknown.get(2)
    if not isinstance(type_meta, bytes) or not isinstance(raw, bytes):
        raise Undecodable("the envelope has no type or no object")
    meta = {n: v.decode() for n, v in fields(type_meta) if isinstance(v, bytes)}
    api_version, kind = meta.get(1, ""), meta.get(2, "")
    schema = SCHEMAS.get((api_version, kind))
    if schema is None:
        raise Undecodable(f"protobuf bodies of {kind or 'this kind'} are not decoded by the lab stand-in; send JSON")
    return {"apiVersion": api_version, "kind": kind, **_decode(raw, schema)}

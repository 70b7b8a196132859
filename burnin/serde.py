"""Rebuild the parsers' dataclasses from the JSON stored in ``result.json``.

``judge`` re-reads a result written on a node, perhaps by an older run, so the stored
``data`` is validated against the dataclass types on the way in rather than trusted:
a wrong type anywhere is a :class:`ResultFormatError`, which ``judge`` reports as an
``error`` verdict for that check.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any, TypeVar, cast

from burnin.result import ResultFormatError

T = TypeVar("T")


def _convert(tp: Any, value: Any, where: str) -> Any:
    origin = typing.get_origin(tp)
    if tp is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _convert(arg, value, where)
            except ResultFormatError as exc:
                errors.append(str(exc))
        raise ResultFormatError(f"{where}: {value!r} matches none of {args}")
    if origin is typing.Literal:
        if value not in typing.get_args(tp):
            raise ResultFormatError(f"{where}: {value!r} is not one of {typing.get_args(tp)}")
        return value
    if origin is list:
        (item,) = typing.get_args(tp)
        if not isinstance(value, list):
            raise ResultFormatError(f"{where}: expected a list")
        return [_convert(item, v, f"{where}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        key_t, val_t = typing.get_args(tp)
        if not isinstance(value, dict):
            raise ResultFormatError(f"{where}: expected an object")
        return {
            _convert(key_t, k, where): _convert(val_t, v, f"{where}.{k}") for k, v in value.items()
        }
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        return from_dict(tp, value, where)
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ResultFormatError(f"{where}: expected a number, got {value!r}")
        return float(value)
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ResultFormatError(f"{where}: expected an integer, got {value!r}")
        return value
    if tp in (str, bool):
        if not isinstance(value, tp):
            raise ResultFormatError(f"{where}: expected {tp.__name__}, got {value!r}")
        return value
    raise ResultFormatError(f"{where}: cannot rebuild type {tp!r}")


def from_dict(cls: type[T], value: object, where: str = "data") -> T:
    """Build dataclass ``cls`` from its ``dataclasses.asdict`` form, checking every type."""
    if not isinstance(value, dict):
        raise ResultFormatError(f"{where}: expected an object for {cls.__name__}")
    hints = typing.get_type_hints(cls)
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(cast(Any, cls)):
        if f.name not in value:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise ResultFormatError(f"{where}: missing {f.name!r}")
            continue
        kwargs[f.name] = _convert(hints[f.name], value[f.name], f"{where}.{f.name}")
    return cls(**kwargs)

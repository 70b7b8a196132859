"""BIOS values as ``KEY=VALUE`` text, typed like the live attribute they set.

Why it exists: a Bios resource types each attribute (a boolean, an integer, a
string of an enumeration), while a person types text (``--bios KEY=VALUE``,
an inventory's ``bios:``). The rolling upgrade's BIOS change and the
planner's comparison of an inventory with the live Bios must read a value
alike, or plan would show a change that apply finds done (or the reverse).
"""

from __future__ import annotations


def as_text(value: bool | int | str) -> str:
    """A value as ``KEY=VALUE`` text: ``true``/``false`` for a boolean."""
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def typed_like(now: object, key: str, text: str) -> bool | int | str:
    """``text`` typed like ``now``, the attribute's live value; ValueError saying why it cannot be."""
    if isinstance(now, bool):
        if text.lower() not in ("true", "false"):
            raise ValueError(f"{key} is a boolean: true or false, not {text!r}")
        return text.lower() == "true"
    if isinstance(now, int):
        try:
            return int(text, 0)
        except ValueError:
            raise ValueError(f"{key} is an integer, not {text!r}") from None
    return text

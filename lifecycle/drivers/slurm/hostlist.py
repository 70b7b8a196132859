"""Slurm hostlist expressions (``gpu-[001-004,007]``), both ways, without calling Slurm.

Parsers must not hide subprocess calls (``scontrol show hostnames``) and the
renderer must produce the same compact lists Slurm prints, so both directions
live here as pure functions.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

_TAIL_DIGITS = re.compile(r"^(.*?)(\d+)$")
# A host in a hostlist: nothing that is hostlist syntax ('[', ']', ',', '-' ranges) or a word break.
_HOST = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


MAX_HOSTS = 100_000
"""Most names one hostlist may expand to: ``n[0-999999999]`` would otherwise fill memory."""


def expand(expr: str) -> list[str]:
    """Expand a hostlist such as ``node[1433,1889-1890],login1`` into names, in order."""
    names: list[str] = []
    for part in _split_top(expr.strip()):
        if part:
            names.extend(_expand_one(part))
            if len(names) > MAX_HOSTS:
                raise ValueError(f"hostlist expands to more than {MAX_HOSTS:,} names")
    return names


def _split_top(expr: str) -> list[str]:
    parts: list[str] = []
    depth = 0
    cur = ""
    for ch in expr:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise ValueError(f"unbalanced ']' in hostlist {expr!r}")
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    if depth != 0:
        raise ValueError(f"unbalanced '[' in hostlist {expr!r}")
    parts.append(cur)
    return parts


def _expand_one(part: str) -> list[str]:
    start = part.find("[")
    if start < 0:
        return [part]
    end = part.index("]", start)
    head, ranges, rest = part[:start], part[start + 1 : end], part[end + 1 :]
    tails = _expand_one(rest) if rest else [""]
    out: list[str] = []
    for item in ranges.split(","):
        lo, sep, hi = item.partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()):
            raise ValueError(f"bad range {item!r} in hostlist {part!r}")
        if not sep:
            out.extend(head + lo + t for t in tails)
            continue
        width = len(lo)
        if (int(hi) - int(lo) + 1) * len(tails) > MAX_HOSTS:
            raise ValueError(f"range {item!r} in hostlist {part!r} is more than {MAX_HOSTS:,} names")
        for n in range(int(lo), int(hi) + 1):
            out.extend(f"{head}{n:0{width}d}{t}" for t in tails)
    return out


def compress(names: Iterable[str]) -> str:
    """The shortest usual hostlist for ``names``: sorted, runs of equal-width numbers merged."""
    groups: dict[tuple[str, int], list[int]] = {}
    plain: list[str] = []
    unique = sorted(set(names))
    bad = [n for n in unique if not isinstance(n, str) or _HOST.fullmatch(n) is None]
    if bad:
        raise ValueError(f"not host names, cannot be put in a hostlist: {', '.join(map(repr, bad[:5]))}")
    for name in unique:
        m = _TAIL_DIGITS.match(name)
        if m is None:
            plain.append(name)
            continue
        groups.setdefault((m.group(1), len(m.group(2))), []).append(int(m.group(2)))
    items: list[tuple[str, str]] = [(p, p) for p in plain]
    for (prefix, width), numbers in groups.items():
        if len(numbers) == 1:
            text = f"{prefix}{numbers[0]:0{width}d}"
            items.append((text, text))
            continue
        runs: list[str] = []
        numbers.sort()
        lo = prev = numbers[0]
        for n in [*numbers[1:], None]:
            if n is not None and n == prev + 1:
                prev = n
                continue
            runs.append(f"{lo:0{width}d}" if lo == prev else f"{lo:0{width}d}-{prev:0{width}d}")
            if n is not None:
                lo = prev = n
        items.append((f"{prefix}{numbers[0]:0{width}d}", f"{prefix}[{','.join(runs)}]"))
    return ",".join(text for _, text in sorted(items, key=lambda it: (_natural(it[0]), it[1])))


def _natural(name: str) -> tuple[tuple[int, str], ...]:
    return tuple((int(p), "") if p.isdigit() else (-1, p) for p in re.split(r"(\d+)", name) if p)

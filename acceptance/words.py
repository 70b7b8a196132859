"""Measured values, thresholds and reasons as people read them, not as Python prints them.

The HTML report showed measured and threshold cells as truncated raw JSON
(``{"0": true, "1": true, …``) and reasons as Python reprs
(``{'min': '520.61.05', 'expected': None} meets …``). Findings keep their
values as data (the JSON report and the evidence need them exact); this module
is the one place that turns them into words, for the judge's reasons and the
HTML page alike:

* per-GPU maps (keys ``"0"``…``"7"``) collapse to "all 8 GPUs: 0" when every
  GPU agrees, else list each GPU;
* a threshold map drops its unset parts and names the rest ("min 520.61.05");
* the fleet rule reads "modified z ≥ -3.5 (median 475.51, MAD 1.82)";
* booleans are yes/no, None is "-", floats are rounded for reading.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from acceptance.judge import Waiver

LIMIT = 300  # characters of one value in words; more is cut with its count said

_KEY_WORDS = {
    "min": "min", "max": "max", "expected": "expected", "z_min": "modified z ≥", "median": "median",
    "mad": "MAD", "value_max_for_flag": "flagged below", "value_min_for_flag": "flagged above",
    "remap_pending": "remap pending", "remap_failure": "remap failure",
    "retired_pages_pending": "retired pages pending",
}


def _number(x: float) -> str:
    if x == int(x) and abs(x) < 1e15:
        return str(int(x))
    return f"{x:.4g}" if abs(x) < 1 else f"{x:.2f}".rstrip("0").rstrip(".")


def _key(k: str) -> str:
    return _KEY_WORDS.get(k, k.replace("_", " "))


def _per_gpu(value: Mapping[str, Any]) -> bool:
    return bool(value) and all(isinstance(k, str) and k.isdigit() for k in value)


def value(v: Any) -> str:
    """``v`` in words (see the module docstring); never longer than ``LIMIT`` characters."""
    text = _words(v)
    return text if len(text) <= LIMIT else f"{text[:LIMIT - 20].rstrip(', ')} … ({len(text)} characters)"


def _words(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int | float):
        return _number(float(v))
    if isinstance(v, str):
        return v
    if isinstance(v, Mapping):
        if _per_gpu(v):
            shown = {k: _words(x) for k, x in v.items()}
            distinct = set(shown.values())
            if len(distinct) == 1:
                return f"all {len(shown)} GPUs: {distinct.pop()}"
            return ", ".join(f"GPU {k}: {x}" for k, x in sorted(shown.items(), key=lambda kv: int(kv[0])))
        parts = [(k, x) for k, x in v.items() if x is not None]
        if set(v) >= {"z_min", "median"}:  # the fleet outlier rule
            rest = ", ".join(f"{_key(k)} {_words(x)}" for k, x in parts if k != "z_min")
            return f"modified z ≥ {_words(v['z_min'])} ({rest})"
        return ", ".join(f"{_key(str(k))} {_words(x)}" for k, x in parts) or "-"
    if isinstance(v, Sequence):
        items = [_words(x) for x in v]
        if not items:
            return "none"
        if len(items) > 1 and len(set(items)) == 1:
            return f"{len(items)} x {items[0]}"
        return ", ".join(items)
    return str(v)


def waiver(w: Waiver) -> str:
    """A waiver as a sentence: what, by whom, when, why."""
    return f"{w.check} waived by {w.by} at {w.at}: {w.reason}"

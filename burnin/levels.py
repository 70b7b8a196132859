"""The acceptance levels: how much of a profile one burn-in runs (``quick``, ``standard``, ``full``).

A level means what burn-in does at it (each profile names the checks, DCGM run level, NCCL
collectives and stress seconds per level), so the vocabulary is defined here, on the node side;
the controller names the same type for a pool's ``retest_level``, the settings every workflow
takes and the command line's ``--level``. This module imports nothing, so the model may use it:
it is the one import of ``burnin`` that ``lifecycle.model``'s import contract allows.
"""

from __future__ import annotations

from typing import Literal, get_args

Level = Literal["quick", "standard", "full"]
LEVELS: tuple[Level, ...] = get_args(Level)
"""Every level, weakest first: the one list, read off ``Level`` so the two cannot drift apart."""


def level(value: str) -> Level:
    """``value`` as a :data:`Level`; anything else is a ValueError that names the levels (and not the value:
    the caller says which option or field it came from, as ``lifecycle.model.vocab``'s checkers do)."""
    for known in LEVELS:
        if value == known:
            return known
    raise ValueError(f"must be one of {', '.join(LEVELS)}")

"""A pre-check's result, and the one rule every pre-check follows: a reading that failed is a failure.

The role swap's and the decommission's pre-checks (and their ``--dry-run``s)
are built from the same two pieces, so that an unreadable scheduler or BMC
refuses both the same way instead of each module deciding for itself.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from lifecycle.drivers.errors import DriverError


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str


def guard(name: str, probe: Callable[[], str]) -> Check:
    """Run ``probe`` (the problem it finds, "" for none); a probe that could not read is a failed check."""
    try:
        problem = probe()
    except DriverError as exc:
        return Check(name, False, f"could not be read: {exc.message}")
    except Exception as exc:  # a broken kubeconfig, a client's own error: unknown is a failure
        return Check(name, False, f"could not be read: {type(exc).__name__}: {exc}")
    return Check(name, not problem, problem or "ok")

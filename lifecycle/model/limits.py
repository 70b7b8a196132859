"""How many of a pool's nodes may be out of service at once: ``--max-unavailable N|P%``.

``racklife apply`` and ``racklife upgrade`` both take this limit, and both
count it per pool, so it is one type with one parser (the error names the
option), shared below the planner and the workflows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Unavailable:
    """A pool's limit on nodes out of service at once: a count, or a percentage of the pool."""

    count: int | None = None
    percent: float | None = None

    @staticmethod
    def parse(text: str) -> Unavailable:
        t = text.strip()
        try:
            if t.endswith("%"):
                p = float(t[:-1])
                if not 0 < p <= 100:
                    raise ValueError
                return Unavailable(percent=p)
            n = int(t)
            if n < 1:
                raise ValueError
            return Unavailable(count=n)
        except ValueError:
            raise ValueError(f"--max-unavailable must be N (>= 1) or P% (0 < P <= 100), not {text!r}") from None

    def of(self, pool_size: int) -> int:
        if self.count is not None:
            return self.count
        return max(1, math.floor(pool_size * (self.percent or 100.0) / 100.0))


__all__ = ["Unavailable"]

"""Parsers for the text the node's tools print, each into a typed document.

Every parser is pure (text in, dataclass out) and raises :class:`ParseError` with a
reason on output it cannot read with confidence; the checks turn that into an
``error`` verdict. A parser never guesses a healthy value for something it did not see.
"""

from __future__ import annotations

import re

_RANK_PREFIX = re.compile(r"^\s*(?:\d+:\s?|\[\d+,\d+\]<std(?:out|err)>:\s?)")


class ParseError(ValueError):
    """Tool output that is malformed, truncated or not the expected tool's output."""


def strip_rank_prefix(line: str) -> str:
    """Drop the per-rank prefix that ``srun -l`` (``0: ``) or Open MPI (``[1,0]<stdout>:``) adds."""
    m = _RANK_PREFIX.match(line)
    return line[m.end() :] if m else line

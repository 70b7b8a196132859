"""The store's two kinds of failure, kept apart because front ends answer them differently.

``StoreError`` is a request the store refuses (an unknown node, a change to a
node a scheduler is using): the store is fine, the request is not.
``StoreUnavailable`` means the store cannot be used at all (a URL that is not
a database, a server that does not answer, a file that is not racklife's, a
schema newer than this code): no command can do its work, and the CLI maps it
to its own exit code with one line and no traceback.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from lifecycle.model.states import Actor, State


class StoreError(Exception):
    """A request the store refuses (unknown node, changed in-service node, ...)."""


class NodeNotFound(StoreError):
    def __init__(self, name: str) -> None:
        super().__init__(f"no node named '{name}' in the store (import an inventory first)")


class StoreUnavailable(Exception):
    """The store cannot be opened or used: wrong URL, unreachable, locked, read-only, not racklife's."""


_E = TypeVar("_E", State, Actor)


def known(vocabulary: Callable[[str], _E], value: str, node: str) -> _E:
    """A stored state or actor, or one line saying the row is not this code's to read."""
    try:
        return vocabulary(value)
    except ValueError:
        kind = getattr(vocabulary, "__name__", "value").lower()
        raise StoreUnavailable(f"node {node} has {kind} '{value}' in the store, which this racklife does "
                               "not know (written by a newer racklife, or edited by hand)") from None

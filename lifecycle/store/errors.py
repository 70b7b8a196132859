"""The store's two kinds of failure, kept apart because front ends answer them differently.

``StoreError`` is a request the store refuses (an unknown node, a change to a
node a scheduler is using): the store is fine, the request is not.
``StoreUnavailable`` means the store cannot be used at all (a URL that is not
a database, a server that does not answer, a file that is not racklife's, a
schema newer than this code): no command can do its work, and the CLI maps it
to its own exit code with one line and no traceback.
"""

from __future__ import annotations


class StoreError(Exception):
    """A request the store refuses (unknown node, changed in-service node, ...)."""


class NodeNotFound(StoreError):
    def __init__(self, name: str) -> None:
        super().__init__(f"no node named '{name}' in the store (import an inventory first)")


class StoreUnavailable(Exception):
    """The store cannot be opened or used: wrong URL, unreachable, locked, read-only, not racklife's."""

"""Durable state: nodes, transitions, acceptance records and the evidence index."""

from lifecycle.store.errors import NodeNotFound, StoreError, StoreUnavailable
from lifecycle.store.inventory_import import ImportReport, Removed
from lifecycle.store.store import (
    AcceptanceRecord,
    ImportRefused,
    NodeChange,
    NodeRecord,
    Store,
    shared_store,
)

__all__ = [
    "AcceptanceRecord", "ImportRefused", "ImportReport", "NodeChange", "NodeNotFound", "NodeRecord", "Removed",
    "Store", "StoreError", "StoreUnavailable", "shared_store",
]

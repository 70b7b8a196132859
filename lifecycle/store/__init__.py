"""Durable state: nodes, transitions, acceptance records and the evidence index."""

from lifecycle.store.inventory_import import ImportReport, Removed
from lifecycle.store.store import (
    AcceptanceRecord,
    ImportRefused,
    NodeChange,
    NodeNotFound,
    NodeRecord,
    Store,
    StoreError,
    shared_store,
)

__all__ = [
    "AcceptanceRecord", "ImportRefused", "ImportReport", "NodeChange", "NodeNotFound", "NodeRecord", "Removed",
    "Store", "StoreError", "shared_store",
]

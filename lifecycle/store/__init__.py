"""Durable state: nodes, transitions, acceptance records and the evidence index."""

from lifecycle.store.store import (
    AcceptanceRecord,
    ImportReport,
    NodeNotFound,
    NodeRecord,
    Store,
    StoreError,
    shared_store,
)

__all__ = ["AcceptanceRecord", "ImportReport", "NodeNotFound", "NodeRecord", "Store", "StoreError", "shared_store"]

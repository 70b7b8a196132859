"""Failed BMC calls, kept so that a scrape can count them by vendor and class.

The drivers say what failed and why (``lifecycle/drivers/bmc/call_errors.py``)
but write nowhere; the workflows hand each driver an observer that lands here
(``lifecycle/workflows/bmc_calls.py``). Kept in the store, not in a process's
counters, because calls fail in every controller and CLI process and the
metrics are read from the store by whichever process serves them; a restart
loses nothing.

The vendor is the driver's own identification when it had one; a call that
failed before it (a BMC that times out on the service root) takes the vendor
the node's BMC last named, remembered in ``racklife_bmc_vendors``, else
``unknown``. Values here are the drivers' vocabulary; this module only stores
and counts them.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime

import sqlalchemy as sa

from lifecycle.store import db
from lifecycle.store.store import Store

UNKNOWN = "unknown"
MESSAGE_MAX = 500


@dataclass(frozen=True)
class CallErrorCount:
    hardware_type: str
    vendor: str
    error_class: str
    count: int


# Built once: every BMC a run opens is identified (store.py says why).
_VENDOR = sa.select(db.bmc_vendors.c.hardware_type, db.bmc_vendors.c.vendor).where(
    db.bmc_vendors.c.node == sa.bindparam("b_node"))


def remember_vendor(store: Store, node: str, hardware_type: str, vendor: str) -> None:
    """The vendor ``node``'s BMC named; written only when it changed (a read per identification).

    The usual case, the vendor already recorded, is a read without SQLite's write lock (every
    provisioning run identifies its BMC, fifty at once); the write re-reads under the lock."""
    t = db.bmc_vendors
    with store._read() as conn:
        row = conn.execute(_VENDOR, {"b_node": node}).first()
    if row is not None and (row.hardware_type, row.vendor) == (hardware_type, vendor):
        return
    with store.engine.begin() as conn:
        row = conn.execute(_VENDOR, {"b_node": node}).first()
        if row is not None and (row.hardware_type, row.vendor) == (hardware_type, vendor):
            return
        now = datetime.now(UTC)
        if row is None:
            conn.execute(sa.insert(t).values(node=node, hardware_type=hardware_type, vendor=vendor[:64], seen_at=now))
        else:
            conn.execute(sa.update(t).where(t.c.node == node)
                         .values(hardware_type=hardware_type, vendor=vendor[:64], seen_at=now))


def record(store: Store, node: str, hardware_type: str, vendor: str | None, error_class: str, message: str,
           at: datetime | None = None) -> str:
    """Append one failed call; returns the vendor it was counted under."""
    with store.engine.begin() as conn:
        if vendor is None:
            t = db.bmc_vendors
            row = conn.execute(sa.select(t.c.vendor).where(t.c.node == node, t.c.hardware_type == hardware_type)
                               ).first()
            vendor = row.vendor if row is not None else UNKNOWN
        conn.execute(sa.insert(db.bmc_call_errors).values(
            node=node, hardware_type=hardware_type, vendor=vendor[:64], error_class=error_class,
            message=message[:MESSAGE_MAX], at=at or datetime.now(UTC)))
    return vendor


def counts(store: Store) -> tuple[CallErrorCount, ...]:
    """Failed calls so far by hardware type, vendor and class (sorted)."""
    t = db.bmc_call_errors
    q = sa.select(t.c.hardware_type, t.c.vendor, t.c.error_class, sa.func.count().label("n")).group_by(
        t.c.hardware_type, t.c.vendor, t.c.error_class)
    with store.reader.connect() as conn:
        found = Counter({(r.hardware_type, r.vendor, r.error_class): int(r.n) for r in conn.execute(q)})
    return tuple(CallErrorCount(h, v, c, n) for (h, v, c), n in sorted(found.items()))


"""Every BMC a workflow talks to is opened here, so that each failed call is recorded.

The driver classifies a failure where it translates it (timeout, connection,
TLS, auth, HTTP 4xx/5xx, throttled, protocol, IPMI completion code:
``lifecycle/drivers/bmc/call_errors.py``) and tells its observer; the
observer made here appends it to the store with the node and the vendor
(``lifecycle/store/bmc_calls.py``), where the metrics count it. Each attempt
of a retried step (``retry.py``) is a call of its own and is counted once.

Recording must never hide the BMC's error: a store that cannot take the row
is logged, and the driver's own error goes on to the workflow unchanged.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from sqlalchemy.exc import SQLAlchemyError

from lifecycle.drivers.bmc.base import BmcDriver
from lifecycle.drivers.bmc.call_errors import CallFailure
from lifecycle.model.inventory import Node
from lifecycle.store import Store, StoreError, bmc_calls, shared_store

log = logging.getLogger(__name__)


@dataclass
class StoreObserver:
    """Writes a node's failed BMC calls, and the vendor its BMC named, to the store."""

    store: Store
    node: str
    _vendor: tuple[str, str] | None = None  # what this observer already wrote

    def failed(self, failure: CallFailure) -> None:
        try:
            bmc_calls.record(self.store, self.node, failure.hardware_type, failure.vendor,
                             failure.error_class.value, failure.message)
        except (SQLAlchemyError, StoreError) as exc:
            log.warning("%s: a failed BMC call (%s) was not recorded: %s", self.node, failure.error_class.value,
                        type(exc).__name__)

    def identified(self, hardware_type: str, vendor: str) -> None:
        if self._vendor == (hardware_type, vendor):
            return
        try:
            bmc_calls.remember_vendor(self.store, self.node, hardware_type, vendor)
            self._vendor = (hardware_type, vendor)
        except (SQLAlchemyError, StoreError) as exc:
            log.warning("%s: the BMC's vendor was not recorded: %s", self.node, type(exc).__name__)


def open_bmc(node: str, store: Store | None = None, *, timeout: float = 10.0, spec: Node | None = None) -> BmcDriver:
    """The driver for ``node``'s BMC (from its stored inventory record, or ``spec`` where the caller
    has just read it), recording every failed call."""
    from lifecycle.drivers.bmc.factory import driver_for  # vendor SDKs only when a BMC is used

    store = store or shared_store()
    spec = spec or store.get(node).node()
    return driver_for(spec.bmc, timeout=timeout, observer=StoreObserver(store, node))

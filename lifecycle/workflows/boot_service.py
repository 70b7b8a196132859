"""The boot server's backend: scripts and tokens from the store, phone-home to the waiting workflow.

The boot server may run in the controller's process or in its own; either
way it signals the provisioning run through DBOS (``DBOSClient``), which
only needs the shared database. The message is written in the transaction
that spends the token: one commit, and never a spent token whose run was
not told.
"""

from __future__ import annotations

import logging

import sqlalchemy as sa
from dbos import DBOSClient

from lifecycle.drivers.boot.server import PhoneHomeReport, PhoneHomeVerdict
from lifecycle.store import Store
from lifecycle.store import boot as boot_store
from lifecycle.workflows.provision import PHONE_HOME_TOPIC, WATCH

log = logging.getLogger(__name__)


class StoreBootBackend:
    def __init__(self, store: Store) -> None:
        self.store = store
        self._client = DBOSClient(system_database_url=store.url)
        self.refused: list[tuple[str, str]] = []  # (node, reason), for status and tests

    def script_for(self, mac: str) -> str | None:
        return boot_store.pending_script(self.store, mac)

    def phone_home(self, report: PhoneHomeReport) -> PhoneHomeVerdict:
        payload = {"node": report.node, "image": report.image, "image_version": report.image_version,
                   "macs": list(report.macs), "remote": report.remote}

        def signal(conn: sa.Connection, got: boot_store.Redeemed) -> None:
            # In the transaction that spends the token: a spent token always reaches its run.
            self._client.send_in_transaction(conn, str(got.run_id), payload | {"attempt": got.attempt},
                                             PHONE_HOME_TOPIC,
                                             idempotency_key=f"{got.run_id}:phone-home:{got.attempt}")

        got = boot_store.redeem(self.store, report.token, report.node, payload, then=signal)
        if not got.accepted or got.run_id is None or got.attempt is None:
            self.refused.append((report.node, got.reason))
            return PhoneHomeVerdict(False, got.reason)
        WATCH.arrived(got.run_id, got.attempt)  # a run waiting in this process goes on at once
        log.info("node %s phoned home for run %s attempt %s", report.node, got.run_id, got.attempt)
        return PhoneHomeVerdict(True)

    def close(self) -> None:
        self._client.destroy()

"""The boot server's backend: scripts and tokens from the store, phone-home to the waiting workflow.

The boot server may run in the controller's process or in its own; either
way it needs only the shared database. Spending a token stores the node's
report in the same commit, and the waiting provisioning run reads it from
there (``provision.await_phone_home``): there is no message that could be
lost between the two. A run in this process is woken at once; one in
another process finds the spent token at its watch's next poll.
"""

from __future__ import annotations

import logging

from lifecycle.drivers.boot.server import PhoneHomeReport, PhoneHomeVerdict
from lifecycle.store import Store
from lifecycle.store import boot as boot_store
from lifecycle.workflows.provision import WATCH

log = logging.getLogger(__name__)


class StoreBootBackend:
    def __init__(self, store: Store) -> None:
        self.store = store
        self.refused: list[tuple[str, str]] = []  # (node, reason), for status and tests

    def script_for(self, mac: str) -> str | None:
        return boot_store.pending_script(self.store, mac)

    def phone_home(self, report: PhoneHomeReport) -> PhoneHomeVerdict:
        payload = {"node": report.node, "image": report.image, "image_version": report.image_version,
                   "macs": list(report.macs), "remote": report.remote}
        if report.ssh_host_key:
            payload["ssh_host_key"] = report.ssh_host_key
        got = boot_store.redeem(self.store, report.token, report.node, payload)
        if not got.accepted or got.run_id is None or got.attempt is None:
            self.refused.append((report.node, got.reason))
            return PhoneHomeVerdict(False, got.reason)
        WATCH.arrived(got.run_id, got.attempt)  # a run waiting in this process goes on at once
        log.info("node %s phoned home for run %s attempt %s", report.node, got.run_id, got.attempt)
        return PhoneHomeVerdict(True)

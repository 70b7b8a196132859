"""The boot server's backend for tests: the real store-backed token logic, without the workflow engine.

It records what the workflow would be signalled with, and every accepted report.
"""

from __future__ import annotations

from lifecycle.drivers.boot.server import PhoneHomeReport, PhoneHomeVerdict
from lifecycle.store import Store
from lifecycle.store import boot as boot_store


class StoreBackend:
    def __init__(self, store: Store) -> None:
        self.store = store
        self.reports: list[PhoneHomeReport] = []
        self.signalled: list[tuple[str | None, int | None]] = []

    def script_for(self, mac: str) -> str | None:
        return boot_store.pending_script(self.store, mac)

    def phone_home(self, report: PhoneHomeReport) -> PhoneHomeVerdict:
        got = boot_store.redeem(self.store, report.token, report.node,
                                {"image_version": report.image_version, "macs": list(report.macs)})
        if got.accepted:
            self.reports.append(report)
            self.signalled.append((got.run_id, got.attempt))
        return PhoneHomeVerdict(got.accepted, got.reason)

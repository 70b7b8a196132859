"""The erase concern of a BMC: list a system's drives, secure-erase one, and say how it was verified.

It stands apart from ``BmcDriver`` because erase is a capability some BMCs
lack (IPMI has no erase) and a decommission must know before it plans one,
the way ironic composes a hardware type from per-concern interfaces. An
implementation erases through the BMC, follows the BMC's Task to its end and
then *reads the result back*; :class:`DriveErase` carries both the outcome
and the words of that verification, so the erase certificate says exactly
what was checked and by whom. An erase whose read-back does not hold is
``verified=False``: the caller reports it as not done.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field

from lifecycle.drivers.bmc.base import Drive, ProgressCallback


@dataclass(frozen=True)
class DriveErase:
    """One drive's erase: what was asked, what the BMC's task said, and what was read back."""

    drive: Drive
    method: str
    """How it was erased, in the BMC's words (``Drive.SecureErase``, with a SanitizationType if sent)."""
    started_at: str
    ended_at: str
    task_id: str
    task_state: str
    task_messages: tuple[str, ...] = ()
    verified: bool = False
    verification: str = ""
    """What was read back and what it said (the certificate quotes it)."""
    problems: tuple[str, ...] = field(default_factory=tuple)

    @property
    def ok(self) -> bool:
        return self.task_state == "Completed" and self.verified and not self.problems


class EraseInterface(abc.ABC):
    """Secure erase of a system's drives through its BMC."""

    method_name: str = ""
    verifier: str = ""
    """Who verifies: the interface and what it reads (the certificate's ``verifier``)."""

    @abc.abstractmethod
    def drives(self) -> list[Drive]:
        """Every drive the BMC reports under the system's storage."""

    @abc.abstractmethod
    def erase(self, drive_id: str, progress: ProgressCallback | None = None) -> DriveErase:
        """Erase one drive, follow the BMC's task to the end, read the drive back; never raise for a
        failed or unverified erase (it is in the result), only for a BMC that cannot be reached."""

"""The erase part of the Redfish hardware type: ``Drive.SecureErase`` per drive, its Task followed, read back.

Composed into ``RedfishDriver`` like ``redfish_firmware`` and ``redfish_bios``
(the ``EraseInterface`` of ``base.py``), on the shared plumbing of
``redfish_base`` (session, system, actions, the Task follower).

What "verified" means here, honestly: the BMC's own account, read back after
the Task ended — the Task resource re-read from the TaskService says
``Completed`` with TaskStatus OK, and the Drive re-read says Status
``Enabled``/``OK`` with no erase or sanitize still listed in its
``Operations``. Redfish has no standard property for the result of the last
sanitize (NVMe's Sanitize Status log page is not exposed), and the media
itself is not read: sampled reads from a maintenance boot are not done
(docs/limits.md). A read-back that does not hold is an unverified erase.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from lifecycle.drivers.bmc import redfish_inventory as inv
from lifecycle.drivers.bmc import redfish_parse as parse
from lifecycle.drivers.bmc.base import Drive, DriveErase, EraseInterface, ProgressCallback, TaskProgress
from lifecycle.drivers.bmc.redfish_base import RedfishSystem
from lifecycle.drivers.errors import OperationFailed

Json = dict[str, Any]
ERASE_ACTION = "#Drive.SecureErase"
# Drive.Operations entries that mean an erase is still under way (v1_1+ OperationName, v1_16+ Operation).
ERASING = frozenset({"erase", "sanitize", "secureerase"})


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def read_back(drive: Json, task: Json | None) -> tuple[bool, str]:
    """Whether the BMC's own records say the erase finished clean, and the words of what was read."""
    status = drive.get("Status") or {}
    state, health = status.get("State"), status.get("Health")
    pending = [str(op.get("Operation") or op.get("OperationName") or "")
               for op in drive.get("Operations") or [] if isinstance(op, dict)]
    erasing = [p for p in pending if p.replace(" ", "").lower() in ERASING]
    said = [f"Drive {drive.get('@odata.id')}: Status {state}/{health}",
            f"Operations pending: {', '.join(pending) or 'none'}"]
    ok = state == "Enabled" and health == "OK" and not erasing
    if task is not None:
        task_state, task_status = task.get("TaskState"), task.get("TaskStatus")
        said.append(f"Task {task.get('@odata.id')}: {task_state}/{task_status}")
        ok = ok and task_state == "Completed" and task_status in ("OK", None)
    else:
        said.append("Task: the BMC finished the erase without a Task resource to re-read")
    return ok, "; ".join(said)


class RedfishErase(RedfishSystem, EraseInterface):
    """``Drive.SecureErase`` on the system's drives."""

    erase_method = "Drive.SecureErase"
    erase_verifier = ("racklife Redfish driver: the BMC's Task re-read from its TaskService and the Drive "
                      "re-read (Status, Operations) after the Task ended")

    def drives(self) -> list[Drive]:
        return inv.drives(self.reader, self.system())

    def erase_drive(self, drive_id: str, progress: ProgressCallback | None = None) -> DriveErase:
        resource = inv.find_drive(self.reader, self.system(), drive_id)
        drive = parse.drive(resource)
        target, _ = self._action(resource, ERASE_ACTION)
        started = _now()
        reply = self.transport.request("POST", target, {})
        task_path = reply.body.get("@odata.id") if "TaskState" in reply.body else None
        seen: list[TaskProgress] = []

        def note(step: TaskProgress) -> None:
            seen.append(step)
            if progress is not None:
                progress(step)
        try:
            final = self._follow(reply, note)
        except OperationFailed as exc:
            last = seen[-1] if seen else TaskProgress("", "Exception", None)
            return DriveErase(drive, self.erase_method, started, _now(), last.task_id, last.state, last.messages,
                              False, "not read back: the erase task failed", (exc.message,))
        ended = _now()
        task = self.reader.optional(str(task_path)) if task_path else None
        after = self.transport.get(str(resource["@odata.id"]))
        ok, words = read_back(after, task)
        problems = () if ok else (f"the drive reads back without a clean erase: {words}",)
        return DriveErase(drive, self.erase_method, started, ended, final.task_id, final.state, final.messages,
                          ok, words, problems)

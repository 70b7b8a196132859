"""What every part of the Redfish hardware type shares: the session, the system, actions, tasks.

The Redfish driver is composed of per-concern parts (``redfish.py``: power, boot, inventory,
virtual media, erase; ``redfish_firmware.py``; ``redfish_bios.py``), like an ironic hardware
type. Each part needs the same few things: the transport, the chosen ComputerSystem (found
from the service root's links, never assumed to be ``Systems/1``), the vendor quirks, an
action's target and allowed values, and a Task followed to its end. They live here, once.
"""

from __future__ import annotations

import logging
from typing import Any, Literal
from urllib.parse import urlsplit

from lifecycle.drivers.bmc import redfish_inventory as inv
from lifecycle.drivers.bmc import redfish_parse as parse
from lifecycle.drivers.bmc.base import Credentials, ProgressCallback, TaskProgress
from lifecycle.drivers.bmc.call_errors import CallErrorClass, CallFailure, CallObserver
from lifecycle.drivers.bmc.redfish_quirks import GENERIC, TASK_DONE, VendorQuirks, quirks_for
from lifecycle.drivers.bmc.redfish_transport import (
    Clock,
    RedfishTransport,
    Reply,
    SystemClock,
    TaskPolling,
)
from lifecycle.drivers.errors import DriverError, NotSupported, OperationFailed, Unreachable

LOG = logging.getLogger(__name__)
Json = dict[str, Any]


class RedfishSystem:
    """One ComputerSystem behind one Redfish service: the plumbing the parts share."""

    target: str

    def __init__(self, address: str, credentials: Credentials, *, verify_tls: bool = True,
                 system_id: str | None = None, timeout: float = 10.0,
                 auth: Literal["session", "basic"] = "session",
                 tasks: TaskPolling | None = None, clock: Clock | None = None,
                 observer: CallObserver | None = None) -> None:
        self.address = address if "://" in address else f"https://{address}"
        self.system_id = system_id
        parts = urlsplit(self.address)
        shown = parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl()  # no userinfo
        self.target = shown + (f" system {system_id}" if system_id else "")
        self._credentials = credentials
        self._verify_tls = verify_tls
        self._timeout = timeout
        self._auth = auth
        self._tasks = tasks or TaskPolling()
        self._clock = clock or SystemClock()
        self._transport: RedfishTransport | None = None
        self._system_path: str | None = None
        self._quirks: VendorQuirks | None = None
        self._action_infos: dict[str, Json | None] = {}
        self._observer = observer

    def validate(self) -> None:
        parts = urlsplit(self.address)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise OperationFailed(self.target, "address must be http(s)://host[:port]")
        if parts.username or parts.password:
            raise OperationFailed(self.target, "credentials do not belong in the address")
        if self._auth not in ("session", "basic"):
            raise OperationFailed(self.target, f"unknown auth method {self._auth!r}")

    @property
    def transport(self) -> RedfishTransport:
        if self._transport is None:
            self.validate()
            self._transport = RedfishTransport(
                self.address, self._credentials, verify_tls=self._verify_tls,
                timeout=self._timeout, auth=self._auth,
                target=self.target, on_failure=self._call_failed if self._observer else None)
        return self._transport

    @property
    def reader(self) -> inv.Reader:
        return inv.Reader(self.transport, self._quirks)

    def system_path(self) -> str:
        if self._system_path is None:
            systems = parse.link(self.transport.root, "Systems")
            if systems is None:
                raise NotSupported(self.target, "the service root links no Systems")
            paths = parse.members(self.transport.get(systems))
            if self.system_id is not None:
                chosen = [p for p in paths if p == self.system_id
                          or p.rstrip("/").rsplit("/", 1)[-1] == self.system_id]
                if not chosen:
                    raise NotSupported(self.target, f"no system {self.system_id!r}; the BMC "
                                       f"has {', '.join(paths) or 'none'}")
            elif len(paths) != 1:
                raise OperationFailed(self.target, f"the BMC manages {len(paths)} systems "
                                      f"({', '.join(paths)}); choose one with system_id")
            else:
                chosen = paths
            self._system_path = chosen[0]
        return self._system_path

    def system(self) -> Json:
        system = self.transport.get(self.system_path())
        if self._quirks is None:
            self._identify(quirks_for(self.transport.root, system))
        return system

    def quirks(self, system: Json | None = None) -> VendorQuirks:
        if self._quirks is None:
            return self._identify(quirks_for(self.transport.root, system or self.system()))
        return self._quirks

    @property
    def vendor(self) -> str | None:
        """The vendor the service root and system named (the quirks table's name); None before they were read.

        Before the system is read (a login refused), a service root that names its vendor is enough.
        """
        if self._quirks is not None:
            return self._quirks.vendor
        root = self._transport.seen_root if self._transport is not None else None
        named = quirks_for(root, {}) if root is not None else GENERIC
        return named.vendor if named is not GENERIC else None

    def _identify(self, quirks: VendorQuirks) -> VendorQuirks:
        self._quirks = quirks
        if self._observer is not None:
            self._observer.identified("redfish", quirks.vendor)
        return quirks

    def _call_failed(self, kind: CallErrorClass, error: DriverError) -> None:
        if self._observer is not None:
            self._observer.failed(CallFailure(kind, "redfish", self.vendor, error.message))

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()
            self._transport = None

    def _patch(self, path: str, resource: Json, body: Json) -> Reply:
        etag = resource.get("@odata.etag")
        headers = {"If-Match": str(etag)} if etag else None
        return self.transport.request("PATCH", path, body, headers)

    def _action(self, resource: Json, name: str) -> tuple[str, Json]:
        action = (resource.get("Actions") or {}).get(name)
        if not isinstance(action, dict) or not action.get("target"):
            raise NotSupported(self.target, f"{resource.get('@odata.id')} offers no {name}")
        return str(action["target"]), action

    def _allowed(self, action: Json, parameter: str) -> list[str] | None:
        inline = action.get(f"{parameter}@Redfish.AllowableValues")
        if isinstance(inline, list):
            return [str(v) for v in inline]
        info = self._action_info(action.get("@Redfish.ActionInfo"))
        for param in (info or {}).get("Parameters", []):
            if param.get("Name") == parameter and isinstance(param.get("AllowableValues"), list):
                return [str(v) for v in param["AllowableValues"]]
        return None

    def _action_info(self, path: str | None) -> Json | None:
        # ActionInfo describes what an action accepts, not state: read once per driver.
        if not path:
            return None
        if path not in self._action_infos:
            self._action_infos[path] = self.reader.optional(path)
        return self._action_infos[path]

    def _follow(self, reply: Reply, progress: ProgressCallback | None) -> TaskProgress:
        """Poll the TaskMonitor (or the Task) until the task ends; report each step."""
        monitor = reply.headers.get("location")
        task_path = reply.body.get("@odata.id") if "TaskState" in reply.body else None
        if reply.status != 202 and "TaskState" not in reply.body:
            return TaskProgress(task_id="", state="Completed", percent=100)
        poll = monitor or task_path
        if not poll:
            raise OperationFailed(self.target, "the BMC accepted the request but named no task")
        policy = self._tasks
        deadline = self._clock.monotonic() + policy.timeout_s
        body, status, headers = reply.body, reply.status, reply.headers
        while True:
            step = parse.task_progress(body, fallback_id=str(poll).rstrip("/").rsplit("/", 1)[-1])
            if status in (200, 201, 204) and monitor and "TaskState" not in body:
                # The monitor answered with the operation's own result: the task is over.
                if task_path:
                    step = parse.task_progress(self.transport.get(str(task_path)),
                                               fallback_id=step.task_id)
                else:
                    step = TaskProgress(step.task_id, "Completed", 100, step.messages)
            if progress is not None:
                progress(step)
            if step.state in TASK_DONE:
                if TASK_DONE[step.state]:
                    return step
                raise OperationFailed(self.target, f"task {step.task_id} ended {step.state}: "
                                      + "; ".join(step.messages))
            if self._clock.monotonic() > deadline:
                raise Unreachable(self.target, f"task {step.task_id} still {step.state} after "
                                  f"{policy.timeout_s:.0f}s")
            wait = headers.get("retry-after")
            self._clock.sleep(float(wait) if wait and wait.isdigit() else policy.poll_s)
            try:
                next_reply = self.transport.request("GET", str(poll))
            except NotSupported:
                if poll == task_path or not task_path:
                    raise
                poll, monitor = task_path, None  # monitor gone: read the task itself
                next_reply = self.transport.request("GET", str(poll))
            body, status, headers = next_reply.body, next_reply.status, next_reply.headers

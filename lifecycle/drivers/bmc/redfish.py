"""The Redfish implementation of ``BmcDriver``, for every vendor's BMC.

Paths are discovered from the service root and the links of the chosen
ComputerSystem; nothing assumes ``Systems/1``. Each public method reads the
actual state first and sends nothing when the BMC is already where it was
asked to go (power, boot override, BIOS attributes, virtual media). Long
operations (firmware update, secure erase) follow their Task to the end.
I/O, retries and error translation live in ``redfish_transport``; JSON
mapping in ``redfish_parse``; vendor vocabulary in ``redfish_quirks``.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any, Literal
from urllib.parse import urlsplit

from lifecycle.drivers.bmc import redfish_inventory as inv
from lifecycle.drivers.bmc import redfish_parse as parse
from lifecycle.drivers.bmc.base import (
    BmcDriver,
    BootDevice,
    BootMode,
    Credentials,
    HardwareInventory,
    Health,
    LogEntry,
    PowerAction,
    PowerState,
    ProgressCallback,
    SensorReading,
    TaskProgress,
)
from lifecycle.drivers.bmc.redfish_quirks import (
    BOOT_TARGETS,
    POWER_STATES,
    RESET_TYPES,
    TASK_DONE,
    VendorQuirks,
    quirks_for,
)
from lifecycle.drivers.bmc.redfish_transport import (
    Clock,
    RedfishTransport,
    Reply,
    SystemClock,
    TaskPolling,
)
from lifecycle.drivers.errors import NotSupported, OperationFailed, Unreachable

LOG = logging.getLogger(__name__)
Json = dict[str, Any]


class RedfishDriver(BmcDriver):
    """One ComputerSystem behind one Redfish service."""

    def __init__(self, address: str, credentials: Credentials, *, verify_tls: bool = True,
                 system_id: str | None = None, timeout: float = 10.0,
                 auth: Literal["session", "basic"] = "session",
                 tasks: TaskPolling | None = None, clock: Clock | None = None) -> None:
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

    # --- plumbing ---------------------------------------------------------------------------

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
                target=self.target)
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
            self._quirks = quirks_for(self.transport.root, system)
        return system

    def quirks(self, system: Json | None = None) -> VendorQuirks:
        if self._quirks is None:
            self._quirks = quirks_for(self.transport.root, system or self.system())
        return self._quirks

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

    # --- power and boot ---------------------------------------------------------------------

    def power_state(self) -> PowerState:
        return POWER_STATES.get(str(self.system().get("PowerState")), PowerState.UNKNOWN)

    def power(self, action: PowerAction) -> None:
        system = self.system()
        current = POWER_STATES.get(str(system.get("PowerState")), PowerState.UNKNOWN)
        if current is PowerState.UNKNOWN:
            raise OperationFailed(self.target, f"power state {system.get('PowerState')!r} "
                                  "is unknown; refusing to guess")
        wanted = RESET_TYPES[(action, current)]
        if wanted is None:
            LOG.info("%s: already %s; %s needs no request", self.target, current, action)
            return
        target, desc = self._action(system, "#ComputerSystem.Reset")
        allowed = self._allowed(desc, "ResetType")
        choice = next((t for t in wanted if allowed is None or t in allowed), None)
        if choice is None:
            raise NotSupported(self.target, f"{action} needs one of {', '.join(wanted)}; the "
                               f"BMC allows {', '.join(allowed or [])}")
        self.transport.request("POST", target, {"ResetType": choice})

    def set_boot(self, device: BootDevice, *, once: bool = True,
                 mode: BootMode = BootMode.UEFI) -> None:
        system = self.system()
        boot = system.get("Boot") or {}
        allowed = boot.get("BootSourceOverrideTarget@Redfish.AllowableValues")
        target = next((t for t in BOOT_TARGETS[device]
                       if not isinstance(allowed, list) or t in allowed), None)
        if target is None:
            raise NotSupported(self.target, f"boot from {device} is not offered "
                               f"(allowed: {', '.join(allowed or [])})")
        wanted: Json = {"BootSourceOverrideTarget": target,
                        "BootSourceOverrideEnabled": "Once" if once else "Continuous"}
        if "BootSourceOverrideMode" in boot:
            wanted["BootSourceOverrideMode"] = "UEFI" if mode is BootMode.UEFI else "Legacy"
        if all(boot.get(k) == v for k, v in wanted.items()):
            return
        self._patch(self.system_path(), system, {"Boot": wanted})

    # --- inventory, sensors, health -----------------------------------------------------------

    def inventory(self) -> HardwareInventory:
        system = self.system()
        quirks = self.quirks(system)
        return inv.inventory(self.reader, system, quirks)

    def inspect(self) -> HardwareInventory:
        system = self.system()
        quirks = self.quirks(system)
        return inv.inventory(self.reader, system, quirks, drives_and_firmware=False)

    def sensors(self) -> list[SensorReading]:
        return inv.sensors(self.reader, self.system())

    def health(self) -> Health:
        return inv.health(self.reader, self.system())

    # --- event log ----------------------------------------------------------------------------

    def _log_service(self) -> Json:
        system = self.system()
        quirks = self.quirks(system)
        owners = [system]
        for manager in system.get("Links", {}).get("ManagedBy", []) or []:
            res = self.reader.optional(manager.get("@odata.id"))
            if res is not None:
                owners.append(res)
        services: list[Json] = []
        for owner in owners:
            services.extend(self.reader.expand(parse.link(owner, "LogServices")))
        for wanted in quirks.event_logs:
            for service in services:
                if service.get("Id") == wanted:
                    return service
        for service in services:
            if service.get("LogEntryType") in ("SEL", "Event") or "#LogService.ClearLog" in (
                    service.get("Actions") or {}):
                return service
        raise NotSupported(self.target, "no event log service found")

    def event_log(self, since: datetime | None = None) -> list[LogEntry]:
        entries_path = parse.link(self._log_service(), "Entries")
        entries = [parse.log_entry(e) for e in self.reader.expand(entries_path)]
        if since is None:
            return entries
        return [e for e in entries if e.created is not None and e.created >= since]

    def clear_event_log(self) -> None:
        target, _ = self._action(self._log_service(), "#LogService.ClearLog")
        self.transport.request("POST", target, {})

    # --- BIOS -----------------------------------------------------------------------------------

    def _bios(self) -> tuple[str, Json]:
        path = parse.link(self.system(), "Bios")
        if path is None:
            raise NotSupported(self.target, "the system links no Bios")
        return path, self.transport.get(path)

    def bios_attributes(self) -> dict[str, object]:
        _, bios = self._bios()
        attributes = bios.get("Attributes")
        if not isinstance(attributes, dict):
            raise NotSupported(self.target, "the Bios resource has no Attributes")
        return dict(attributes)

    def set_bios_attributes(self, attributes: dict[str, object]) -> None:
        _, bios = self._bios()
        settings_path = parse.link(bios, "@Redfish.Settings", "SettingsObject")
        if settings_path is None:
            raise NotSupported(self.target, "the Bios has no settings object to stage changes")
        current = bios.get("Attributes") or {}
        settings = self.reader.optional(settings_path) or {}
        pending = settings.get("Attributes") or {}
        changes = {k: v for k, v in attributes.items()
                   if pending.get(k, current.get(k, object())) != v}
        if changes:
            self._patch(settings_path, settings, {"Attributes": changes})

    # --- virtual media --------------------------------------------------------------------------

    def _cd(self) -> Json:
        system = self.system()
        owners = [system] + [m for m in (self.reader.optional(x.get("@odata.id")) for x in
                                         system.get("Links", {}).get("ManagedBy", []) or [])
                             if m is not None]
        collections = [parse.link(owner, "VirtualMedia") for owner in owners]
        collections += [f"{self.system_path().rstrip('/')}/{rel}"
                        for rel in self.quirks(system).unlinked_virtual_media]
        for collection in collections:
            for media in self.reader.expand(collection):
                if {"CD", "DVD"} & set(media.get("MediaTypes") or []):
                    return media
        raise NotSupported(self.target, "no virtual CD/DVD drive found")

    def virtual_media_insert(self, url: str) -> None:
        media = self._cd()
        if media.get("Inserted") and media.get("Image") == url:
            return
        if media.get("Inserted"):
            self._eject(media)
            media = self.transport.get(str(media["@odata.id"]))
        if "#VirtualMedia.InsertMedia" in (media.get("Actions") or {}):
            target, _ = self._action(media, "#VirtualMedia.InsertMedia")
            self.transport.request("POST", target, {"Image": url, "Inserted": True,
                                                    "WriteProtected": True})
        else:
            self._patch(str(media["@odata.id"]), media, {"Image": url, "Inserted": True})

    def virtual_media_eject(self) -> None:
        media = self._cd()
        if media.get("Inserted") or media.get("Image"):
            self._eject(media)

    def _eject(self, media: Json) -> None:
        if "#VirtualMedia.EjectMedia" in (media.get("Actions") or {}):
            target, _ = self._action(media, "#VirtualMedia.EjectMedia")
            self.transport.request("POST", target, {})
        else:
            self._patch(str(media["@odata.id"]), media, {"Image": None, "Inserted": False})

    # --- tasks: firmware update and secure erase ---------------------------------------------

    def firmware_update(self, image_url: str, targets: list[str] | None = None,
                        progress: ProgressCallback | None = None) -> TaskProgress:
        update = self.reader.optional(parse.link(self.transport.root, "UpdateService"))
        if update is None:
            raise NotSupported(self.target, "the service root links no UpdateService")
        target, desc = self._action(update, "#UpdateService.SimpleUpdate")
        body: Json = {"ImageURI": image_url}
        protocols = self._allowed(desc, "TransferProtocol")
        scheme = urlsplit(image_url).scheme.upper()
        if protocols is not None and scheme:
            if scheme not in protocols:
                raise NotSupported(self.target, f"the BMC cannot fetch {scheme} images "
                                   f"(allowed: {', '.join(protocols)})")
            body["TransferProtocol"] = scheme
        if targets:
            body["Targets"] = targets
        return self._follow(self.transport.request("POST", target, body), progress)

    def secure_erase(self, drive_id: str,
                     progress: ProgressCallback | None = None) -> TaskProgress:
        drive = inv.find_drive(self.reader, self.system(), drive_id)
        target, _ = self._action(drive, "#Drive.SecureErase")
        result = self._follow(self.transport.request("POST", target, {}), progress)
        after = self.transport.get(str(drive["@odata.id"]))
        status = after.get("Status") or {}
        if status.get("State") not in (None, "Enabled") or status.get("Health") not in (None,
                                                                                        "OK"):
            raise OperationFailed(self.target, f"drive {drive_id} reads back as "
                                  f"{status.get('State')}/{status.get('Health')} after erase")
        return result

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

"""The Redfish hardware type, for every vendor's BMC: every interface racklife has.

``RedfishDriver`` composes the parts, as an ironic hardware type does: power, boot,
inventory (with sensors, health, the event log) and virtual media here; firmware in
``redfish_firmware``; BIOS in ``redfish_bios``; secure erase in ``redfish_erase``; the
session, system discovery, actions and Task following they share in ``redfish_base``.
Each public method reads the actual state first and sends nothing when the BMC is already
where it was asked to go (power, boot override, BIOS attributes, virtual media). I/O,
retries and error translation live in ``redfish_transport``; JSON mapping in
``redfish_parse``; vendor vocabulary in ``redfish_quirks``.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from lifecycle.drivers.bmc import redfish_inventory as inv
from lifecycle.drivers.bmc import redfish_parse as parse
from lifecycle.drivers.bmc.base import (
    BmcDriver,
    BootDevice,
    BootMode,
    HardwareInventory,
    Health,
    LogEntry,
    PowerAction,
    PowerState,
    SensorReading,
    VirtualMediaInterface,
)
from lifecycle.drivers.bmc.redfish_bios import RedfishBios
from lifecycle.drivers.bmc.redfish_erase import RedfishErase
from lifecycle.drivers.bmc.redfish_firmware import RedfishFirmware
from lifecycle.drivers.bmc.redfish_quirks import BOOT_TARGETS, POWER_STATES, RESET_TYPES
from lifecycle.drivers.errors import NotSupported, OperationFailed

LOG = logging.getLogger(__name__)
Json = dict[str, Any]


class RedfishDriver(RedfishFirmware, RedfishBios, RedfishErase, BmcDriver, VirtualMediaInterface):
    """One ComputerSystem behind one Redfish service."""

    hardware_type = "redfish"

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

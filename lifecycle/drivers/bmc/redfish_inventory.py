"""Reading a system's hardware through Redfish links: inventory, sensors, health.

Everything is found by following links from the ComputerSystem (and its
Chassis and the UpdateService), never by building paths. A link the tree
advertises but the BMC does not serve (404) is treated as "not there": partial
trees are common in the field (firmware that lists PCIeDevices it cannot read).
"""

from __future__ import annotations

import logging
from typing import Any

from lifecycle.drivers.bmc import redfish_parse as parse
from lifecycle.drivers.bmc.base import Drive, Firmware, Gpu, HardwareInventory, Health, SensorReading
from lifecycle.drivers.bmc.redfish_quirks import HEALTH_ORDER, VendorQuirks
from lifecycle.drivers.bmc.redfish_transport import RedfishTransport
from lifecycle.drivers.errors import NotSupported

LOG = logging.getLogger(__name__)
Json = dict[str, Any]


class Reader:
    """Follows links on one transport; ``optional`` turns a 404 into None."""

    def __init__(self, transport: RedfishTransport, quirks: VendorQuirks | None = None) -> None:
        self.t = transport
        self.quirks = quirks

    def optional(self, path: str | None) -> Json | None:
        if not path:
            return None
        absent = {404}
        last = path.split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1]
        if self.quirks and last in self.quirks.absent_when_500:
            absent.add(500)
        found = self.t.fetch(path, frozenset(absent))
        if found is None:
            LOG.debug("%s: %s is linked but not served", self.t.target, path)
        return found

    def supports_expand(self) -> bool:
        """``$expand=.`` (one level, no Links) per the service root's ProtocolFeaturesSupported."""
        features = (self.t.root.get("ProtocolFeaturesSupported") or {}).get("ExpandQuery") or {}
        return bool(features.get("ExpandAll") or features.get("NoLinks"))

    def expand(self, collection_path: str | None) -> list[Json]:
        """Members of a collection: inline with ``$expand`` where offered, else one GET each."""
        if collection_path and self.supports_expand():
            collection_path = collection_path + "?$expand=.($levels=1)"
        coll = self.optional(collection_path)
        if coll is None:
            return []
        out: list[Json] = []
        while True:
            for member in coll.get("Members", []):
                if not isinstance(member, dict):
                    continue
                if set(member) - {"@odata.id"}:
                    out.append(member)
                else:
                    res = self.optional(member.get("@odata.id"))
                    if res is not None:
                        out.append(res)
            next_link = coll.get("Members@odata.nextLink")
            coll = self.optional(next_link) if isinstance(next_link, str) else None
            if coll is None:
                return out

    def chassis(self, system: Json) -> Json | None:
        chassis = system.get("Links", {}).get("Chassis") or []
        first = chassis[0].get("@odata.id") if chassis and isinstance(chassis[0], dict) else None
        return self.optional(first)


def gpus(reader: Reader, system: Json, processors: list[Json], quirks: VendorQuirks) -> list[Gpu]:
    """From Processors (ProcessorType GPU), else PCIeDevices, else the vendor's OEM PCI list."""
    found = [parse.gpu_from_processor(p) for p in processors if parse.is_gpu_processor(p)]
    if found:
        return found
    devices: list[Json] = []
    pcie = system.get("PCIeDevices")
    if isinstance(pcie, list):
        for item in pcie:
            res = reader.optional(item.get("@odata.id") if isinstance(item, dict) else None)
            if res is not None:
                devices.append(res)
    else:
        devices = reader.expand(parse.link(system, "PCIeDevices"))
    for device in devices:
        functions = reader.expand(parse.link(device, "PCIeFunctions"))
        if any(parse.is_gpu_function(f) for f in functions):
            found.append(parse.gpu_from_pcie(device))
    if found or quirks.oem_pci_devices is None:
        return found
    oem = [d for d in reader.expand(parse.link(system, *quirks.oem_pci_devices))
           if parse.is_gpu_hpe_pci(d)]
    return [parse.gpu_from_hpe_pci(d) for d in oem]


def drives(reader: Reader, system: Json) -> list[Drive]:
    found: list[Drive] = []
    for storage in reader.expand(parse.link(system, "Storage")):
        for item in storage.get("Drives", []):
            res = reader.optional(item.get("@odata.id") if isinstance(item, dict) else None)
            if res is not None:
                found.append(parse.drive(res))
    for simple in reader.expand(parse.link(system, "SimpleStorage")):
        found.extend(parse.simple_storage_drives(simple))
    return found


def find_drive(reader: Reader, system: Json, drive_id: str) -> Json:
    """The Drive resource whose Id (or @odata.id) is ``drive_id``."""
    for storage in reader.expand(parse.link(system, "Storage")):
        for item in storage.get("Drives", []):
            path = item.get("@odata.id") if isinstance(item, dict) else None
            if path and (path == drive_id or path.rstrip("/").rsplit("/", 1)[-1] == drive_id):
                res = reader.optional(path)
                if res is not None:
                    return res
    raise NotSupported(reader.t.target, f"no drive {drive_id!r} under the system's Storage")


def inventory(reader: Reader, system: Json, quirks: VendorQuirks, *,
              drives_and_firmware: bool = True) -> HardwareInventory:
    """The system's hardware; without drives and firmware (four requests or more) on request."""
    processors = reader.expand(parse.link(system, "Processors"))
    cpus = [parse.cpu(p) for p in processors
            if not parse.is_gpu_processor(p) and parse.text(p.get("ProcessorType")) in ("", "CPU")
            and (p.get("Status") or {}).get("State") != "Absent"]
    memory = (system.get("MemorySummary") or {}).get("TotalSystemMemoryGiB")
    nics = [n for n in (parse.nic(i) for i in reader.expand(parse.link(system,
                                                                        "EthernetInterfaces")))
            if n is not None]
    firmware: list[Firmware] = []
    if drives_and_firmware:
        update = reader.optional(parse.link(reader.t.root, "UpdateService")) or {}
        firmware = [parse.firmware(f) for f in reader.expand(parse.link(update, "FirmwareInventory"))]
    return HardwareInventory(
        system=parse.system_info(system), cpus=cpus,
        memory_gib=float(memory) if isinstance(memory, int | float) else 0.0,
        gpus=gpus(reader, system, processors, quirks), nics=nics,
        drives=drives(reader, system) if drives_and_firmware else [], firmware=firmware)


def sensors(reader: Reader, system: Json) -> list[SensorReading]:
    chassis = reader.chassis(system)
    if chassis is None:
        raise NotSupported(reader.t.target, "the system links no Chassis with sensors")
    thermal = reader.optional(parse.link(chassis, "Thermal"))
    power = reader.optional(parse.link(chassis, "Power"))
    if thermal is not None or power is not None:
        return parse.thermal_readings(thermal or {}) + parse.power_readings(power or {})
    readings = [parse.sensor(s) for s in reader.expand(parse.link(chassis, "Sensors"))]
    if not readings and parse.link(chassis, "Sensors") is None:
        raise NotSupported(reader.t.target, "the Chassis has no Thermal, Power or Sensors")
    return readings


def health(reader: Reader, system: Json) -> Health:
    details: dict[str, str] = {}
    status = system.get("Status") or {}
    for name, value in (("system", status.get("Health")),
                        ("rollup", status.get("HealthRollup")),
                        ("processors", ((system.get("ProcessorSummary") or {}).get("Status")
                                        or {}).get("HealthRollup")),
                        ("memory", ((system.get("MemorySummary") or {}).get("Status")
                                    or {}).get("HealthRollup"))):
        if isinstance(value, str) and value:
            details[name] = value
    chassis = reader.chassis(system)
    chassis_health = ((chassis or {}).get("Status") or {}).get("HealthRollup") or \
        ((chassis or {}).get("Status") or {}).get("Health")
    if isinstance(chassis_health, str):
        details["chassis"] = chassis_health
    known = [v for v in details.values() if v in HEALTH_ORDER]
    overall = max(known, key=HEALTH_ORDER.__getitem__) if known else "Unknown"
    return Health(overall=overall, details=details)

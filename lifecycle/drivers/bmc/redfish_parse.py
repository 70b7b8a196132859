"""Redfish JSON to racklife's BMC result types: pure functions, no I/O.

Each function takes one resource as the BMC sent it and returns a frozen
result from ``base.py``; missing or null properties become ``None`` (or "")
rather than guesses. Kept apart from the driver so tests can feed it captured
JSON straight from ``shared/fixtures/redfish``.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

from lifecycle.drivers.bmc.base import (
    Cpu,
    Drive,
    Firmware,
    Gpu,
    LogEntry,
    NicInfo,
    SensorReading,
    SystemInfo,
    TaskProgress,
)
from lifecycle.drivers.bmc.redfish_quirks import (
    GPU_DEVICE_CLASSES,
    GPU_PCI_VENDORS,
    PCI_CLASS_ACCELERATOR,
    PCI_CLASS_DISPLAY,
    SENSOR_UNITS,
)

Json = dict[str, Any]
_MAC = re.compile(r"^([0-9a-f]{2})[:-]?([0-9a-f]{2})[:-]?([0-9a-f]{2})[:-]?([0-9a-f]{2})[:-]?"
                  r"([0-9a-f]{2})[:-]?([0-9a-f]{2})$")


def text(value: Any) -> str:
    return str(value).strip() if value is not None else ""


def opt_text(value: Any) -> str | None:
    result = text(value)
    return result or None


def opt_int(value: Any) -> int | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | float):
        return int(value)
    try:
        return int(str(value), 0)
    except ValueError:
        return None


def link(resource: Json, *keys: str) -> str | None:
    """``resource[k1][k2]…['@odata.id']`` or None."""
    node: Any = resource
    for key in keys:
        node = node.get(key) if isinstance(node, dict) else None
    if isinstance(node, dict) and isinstance(node.get("@odata.id"), str):
        return str(node["@odata.id"])
    return None


def members(collection: Json) -> list[str]:
    return [str(m["@odata.id"]) for m in collection.get("Members", [])
            if isinstance(m, dict) and "@odata.id" in m]


def mac(value: Any) -> str | None:
    found = _MAC.match(text(value).lower())
    return ":".join(found.groups()) if found else None


def system_info(system: Json) -> SystemInfo:
    return SystemInfo(vendor=text(system.get("Manufacturer")), model=text(system.get("Model")),
                      serial=text(system.get("SerialNumber")), uuid=text(system.get("UUID")).lower(),
                      bios_version=text(system.get("BiosVersion")))


def is_gpu_processor(proc: Json) -> bool:
    return text(proc.get("ProcessorType")) == "GPU"


def cpu(proc: Json) -> Cpu:
    return Cpu(model=text(proc.get("Model")) or text(proc.get("Name")),
               cores=opt_int(proc.get("TotalCores")), threads=opt_int(proc.get("TotalThreads")))


def _location_label(resource: Json) -> str | None:
    for node in (resource.get("Location"), (resource.get("Slot") or {}).get("Location")):
        if isinstance(node, dict):
            label = (node.get("PartLocation") or {}).get("ServiceLabel")
            if label:
                return text(label)
    return opt_text(resource.get("Socket"))


def gpu_from_processor(proc: Json) -> Gpu:
    return Gpu(model=text(proc.get("Model")) or text(proc.get("Name")),
               serial=opt_text(proc.get("SerialNumber")), pcie_slot=_location_label(proc))


def is_gpu_function(function: Json) -> bool:
    vendor = opt_int(function.get("VendorId"))
    return text(function.get("DeviceClass")) in GPU_DEVICE_CLASSES and vendor in GPU_PCI_VENDORS


def gpu_from_pcie(device: Json) -> Gpu:
    return Gpu(model=text(device.get("Model")) or text(device.get("Name")),
               serial=opt_text(device.get("SerialNumber")), pcie_slot=_location_label(device))


def is_gpu_hpe_pci(device: Json) -> bool:
    """HpeServerPciDevice: integer ClassCode/VendorID (PCI base class 0x03 display, 0x12 accel)."""
    return (opt_int(device.get("ClassCode")) in (PCI_CLASS_DISPLAY, PCI_CLASS_ACCELERATOR)
            and opt_int(device.get("VendorID")) in GPU_PCI_VENDORS)


def gpu_from_hpe_pci(device: Json) -> Gpu:
    return Gpu(model=text(device.get("Name")), serial=None,
               pcie_slot=opt_text(device.get("LocationString")))


def nic(interface: Json) -> NicInfo | None:
    # The MAC in use (what DHCP sees) first; the burned-in one when the BMC gives only that.
    address = mac(interface.get("MACAddress")) or mac(interface.get("PermanentMACAddress"))
    if address is None:
        return None
    link_status = interface.get("LinkStatus")
    link_up = None if link_status is None else link_status == "LinkUp"
    return NicInfo(name=text(interface.get("Id")) or text(interface.get("Name")), mac=address,
                   speed_mbps=opt_int(interface.get("SpeedMbps")), link_up=link_up)


def drive(resource: Json) -> Drive:
    return Drive(id=text(resource.get("Id")), model=text(resource.get("Model")),
                 serial=opt_text(resource.get("SerialNumber")),
                 capacity_bytes=opt_int(resource.get("CapacityBytes")),
                 protocol=opt_text(resource.get("Protocol")))


def simple_storage_drives(storage: Json) -> list[Drive]:
    """SimpleStorage.Devices: inline, no Ids or serials; absent bays are skipped."""
    found = []
    for device in storage.get("Devices", []):
        if not isinstance(device, dict) or (device.get("Status") or {}).get("State") == "Absent":
            continue
        found.append(Drive(id=text(device.get("Name")), model=text(device.get("Model")),
                           serial=None, capacity_bytes=opt_int(device.get("CapacityBytes")),
                           protocol=None))
    return found


def firmware(resource: Json) -> Firmware:
    updateable = resource.get("Updateable")
    return Firmware(name=text(resource.get("Name")) or text(resource.get("Id")),
                    version=text(resource.get("Version")),
                    updateable=updateable if isinstance(updateable, bool) else None,
                    id=opt_text(resource.get("@odata.id")))


def _reading(name: str, kind: str, value: Any, unit: str, status: Any) -> SensorReading:
    health = (status or {}).get("Health") if isinstance(status, dict) else None
    number = float(value) if isinstance(value, int | float) and not isinstance(value,
                                                                                bool) else None
    return SensorReading(name=name, kind=kind, value=number, unit=unit, health=opt_text(health))


def thermal_readings(thermal: Json) -> list[SensorReading]:
    out = [_reading(text(t.get("Name")), "temperature", t.get("ReadingCelsius"), "C",
                    t.get("Status")) for t in thermal.get("Temperatures", [])]
    for fan in thermal.get("Fans", []):
        unit = text(fan.get("ReadingUnits")) or "RPM"
        out.append(_reading(text(fan.get("Name") or fan.get("FanName")), "fan",
                            fan.get("Reading"), "%" if unit == "Percent" else unit,
                            fan.get("Status")))
    return out


def power_readings(power: Json) -> list[SensorReading]:
    out = [_reading(text(v.get("Name")), "voltage", v.get("ReadingVolts"), "V", v.get("Status"))
           for v in power.get("Voltages", [])]
    out += [_reading(text(p.get("Name")), "power", p.get("PowerConsumedWatts"), "W",
                     p.get("Status")) for p in power.get("PowerControl", [])]
    return out


_SENSOR_KIND = {"Temperature": "temperature", "Rotational": "fan", "Voltage": "voltage",
                "Power": "power"}


def sensor(resource: Json) -> SensorReading:
    reading_type = text(resource.get("ReadingType"))
    unit = text(resource.get("ReadingUnits"))
    return _reading(text(resource.get("Name")), _SENSOR_KIND.get(reading_type, "other"),
                    resource.get("Reading"), SENSOR_UNITS.get(unit, unit), resource.get("Status"))


def timestamp(value: Any) -> datetime | None:
    raw = text(value)
    if not raw:
        return None
    try:
        parsed = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def log_entry(entry: Json) -> LogEntry:
    return LogEntry(id=text(entry.get("Id")), created=timestamp(entry.get("Created")),
                    severity=opt_text(entry.get("Severity")), message=text(entry.get("Message")))


def task_progress(task: Json, fallback_id: str) -> TaskProgress:
    messages = tuple(text(m.get("Message")) for m in task.get("Messages", [])
                     if isinstance(m, dict) and m.get("Message"))
    return TaskProgress(task_id=text(task.get("Id")) or fallback_id,
                        state=text(task.get("TaskState")) or "Unknown",
                        percent=opt_int(task.get("PercentComplete")), messages=messages)

"""GPUs and NVMe drives added to a captured tree, for BMCs of emulated GPU nodes.

None of the captured trees in ``shared/fixtures/redfish`` carries a data-centre
GPU or a Drive resource (the HGX/GB300 captures are partial and not shared), but
the lab's nodes are 8-GPU servers and the lifecycle needs ``secure_erase``. So a
BMC may be given extra hardware, shaped after the DMTF schemas the way OpenBMC
(HGX) publishes it: GPUs either as ``Processors`` with ``ProcessorType: GPU`` or
as ``PCIeDevices`` with a display-class ``PCIeFunction`` (vendor 0x10de), and
NVMe drives under one ``Storage`` with a ``#Drive.SecureErase`` action. These
resources are synthetic and say so in their ``Description``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from lifecycle.lab.redfish_emulator.tree import Resource

SYNTHETIC = "Synthetic resource added by the racklife Redfish emulator"


@dataclass(frozen=True)
class ExtraHardware:
    gpus: int = 0
    gpu_source: Literal["processors", "pcie"] = "processors"
    gpu_model: str = "NVIDIA H100 80GB HBM3"
    drives: int = 0
    drive_model: str = "SAMSUNG MZQL23T8HCLS-00A07"
    drive_capacity_bytes: int = 3_840_755_982_336
    serial_prefix: str = "EMU"
    system_serial: str | None = None
    """The lab's identity for this system: its serial number, as the inventory records it."""
    nic_macs: tuple[str, ...] = ()
    """The system's NICs (replacing the tree's), so the BMC reports the MACs the node really has."""


def _link(path: str) -> dict[str, str]:
    return {"@odata.id": path}


def _collection(path: str, odata_type: str, name: str, members: list[str]) -> Resource:
    return {
        "@odata.id": path,
        "@odata.type": f"#{odata_type}.{odata_type}",
        "Name": name,
        "Members": [_link(m) for m in members],
        "Members@odata.count": len(members),
    }


def _existing_members(collection: Resource | None) -> list[str]:
    return [str(m["@odata.id"]) for m in (collection or {}).get("Members", [])
            if isinstance(m, dict) and "@odata.id" in m]


def _gpu_processor(path: str, index: int, hw: ExtraHardware) -> Resource:
    return {
        "@odata.id": path,
        "@odata.type": "#Processor.v1_17_0.Processor",
        "Id": path.rsplit("/", 1)[-1],
        "Name": f"GPU {index}",
        "Description": SYNTHETIC,
        "ProcessorType": "GPU",
        "Manufacturer": "NVIDIA",
        "Model": hw.gpu_model,
        "SerialNumber": f"{hw.serial_prefix}GPU{index:04d}",
        "Location": {"PartLocation": {"ServiceLabel": f"SXM{index + 1}",
                                      "LocationType": "Slot", "LocationOrdinalValue": index}},
        "Status": {"State": "Enabled", "Health": "OK"},
    }


def _gpu_pcie(path: str, index: int, hw: ExtraHardware) -> dict[str, Resource]:
    functions = f"{path}/PCIeFunctions"
    function = f"{functions}/0"
    return {
        path: {
            "@odata.id": path,
            "@odata.type": "#PCIeDevice.v1_11_0.PCIeDevice",
            "Id": path.rsplit("/", 1)[-1],
            "Name": f"GPU {index}",
            "Description": SYNTHETIC,
            "Manufacturer": "NVIDIA",
            "Model": hw.gpu_model,
            "SerialNumber": f"{hw.serial_prefix}GPU{index:04d}",
            "DeviceType": "SingleFunction",
            "Slot": {"Location": {"PartLocation": {"ServiceLabel": f"PCIe Slot {index + 1}",
                                                   "LocationType": "Slot"}}},
            "PCIeFunctions": _link(functions),
            "Status": {"State": "Enabled", "Health": "OK"},
        },
        functions: _collection(functions, "PCIeFunctionCollection", "PCIe Functions", [function]),
        function: {
            "@odata.id": function,
            "@odata.type": "#PCIeFunction.v1_5_0.PCIeFunction",
            "Id": "0",
            "Name": "GPU function 0",
            "DeviceClass": "DisplayController",
            "FunctionType": "Physical",
            "VendorId": "0x10de",
            "DeviceId": "0x2330",
            "Status": {"State": "Enabled", "Health": "OK"},
        },
    }


def drive_serial(hw: ExtraHardware, index: int) -> str:
    """The serial number of drive ``index`` (what the Drive resource says, and the lab's node sees)."""
    return f"{hw.serial_prefix}NVME{index:04d}"


def _drive(path: str, index: int, hw: ExtraHardware) -> Resource:
    return {
        "@odata.id": path,
        "@odata.type": "#Drive.v1_17_0.Drive",
        "Id": path.rsplit("/", 1)[-1],
        "Name": f"NVMe drive {index}",
        "Description": SYNTHETIC,
        "Manufacturer": "Samsung",
        "Model": hw.drive_model,
        "SerialNumber": drive_serial(hw, index),
        "CapacityBytes": hw.drive_capacity_bytes,
        "Protocol": "NVMe",
        "MediaType": "SSD",
        "Status": {"State": "Enabled", "Health": "OK"},
        "Operations": [],
        "Actions": {"#Drive.SecureErase": {"target": f"{path}/Actions/Drive.SecureErase"}},
    }


def extra_resources(system: Resource, hw: ExtraHardware,
                    existing: Callable[[str], Resource | None]) -> tuple[dict[str, Resource],
                                                                         dict[str, Any]]:
    """Resources to add under ``system`` and the properties to set on the system itself.

    ``existing(path)`` returns the tree's resource at ``path``: new members are appended
    to collections the tree already has.
    """
    sys_path = str(system["@odata.id"]).rstrip("/")
    added: dict[str, Resource] = {}
    system_patch: dict[str, Any] = {}
    if hw.gpus:
        if hw.gpu_source == "processors":
            coll = str(system.get("Processors", {}).get("@odata.id", f"{sys_path}/Processors"))
            members = [f"{coll}/GPU{i}" for i in range(hw.gpus)]
            for i, path in enumerate(members):
                added[path] = _gpu_processor(path, i, hw)
            added[coll] = _collection(coll, "ProcessorCollection", "Processors",
                                      _existing_members(existing(coll)) + members)
            system_patch["Processors"] = _link(coll)
        else:
            # ComputerSystem.PCIeDevices is an array of links (bmcweb also serves a collection).
            coll = f"{sys_path}/PCIeDevices"
            members = [f"{coll}/GPU{i}" for i in range(hw.gpus)]
            for i, path in enumerate(members):
                added.update(_gpu_pcie(path, i, hw))
            added[coll] = _collection(coll, "PCIeDeviceCollection", "PCIe Devices", members)
            system_patch["PCIeDevices"] = [_link(m) for m in members]
            system_patch["PCIeDevices@odata.count"] = len(members)
    if hw.system_serial:
        system_patch["SerialNumber"] = hw.system_serial
    if hw.nic_macs:
        coll = f"{sys_path}/EthernetInterfaces"
        members = [f"{coll}/NIC{i}" for i in range(len(hw.nic_macs))]
        for i, (path, mac) in enumerate(zip(members, hw.nic_macs, strict=True)):
            added[path] = {
                "@odata.id": path, "@odata.type": "#EthernetInterface.v1_6_0.EthernetInterface",
                "Id": f"NIC{i}", "Name": f"NIC {i}", "Description": SYNTHETIC,
                "MACAddress": mac.upper(), "PermanentMACAddress": mac.upper(), "SpeedMbps": 100000,
                "LinkStatus": "LinkUp", "InterfaceEnabled": True, "Status": {"State": "Enabled", "Health": "OK"},
            }
        added[coll] = _collection(coll, "EthernetInterfaceCollection", "Ethernet Interfaces", members)
        system_patch["EthernetInterfaces"] = _link(coll)
    if hw.drives:
        storage_coll = f"{sys_path}/Storage"
        storage = f"{storage_coll}/NVMe"
        drives = [f"{storage}/Drives/{i}" for i in range(hw.drives)]
        for i, path in enumerate(drives):
            added[path] = _drive(path, i, hw)
        added[storage] = {
            "@odata.id": storage,
            "@odata.type": "#Storage.v1_9_0.Storage",
            "Id": "NVMe",
            "Name": "NVMe storage",
            "Description": SYNTHETIC,
            "Drives": [_link(d) for d in drives],
            "Drives@odata.count": len(drives),
            "Status": {"State": "Enabled", "Health": "OK"},
        }
        added[storage_coll] = _collection(storage_coll, "StorageCollection", "Storage", [storage])
        system_patch["Storage"] = _link(storage_coll)
    return added, system_patch

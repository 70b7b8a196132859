"""Vendor quirks of Redfish services: one table per vendor, each backed by captured data.

Most differences between BMCs are discoverable from the tree itself (where
VirtualMedia lives, which ResetTypes and boot targets are allowed, whether a
Bios has a settings object) and the driver reads them from there. What is left
is vocabulary a client cannot discover and lives here, not in ``if``s across the
driver. Every entry names the captured file under ``shared/fixtures/redfish``
that shows it; tests load those files.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lifecycle.drivers.bmc.base import BootDevice, PowerAction, PowerState


@dataclass(frozen=True)
class VendorQuirks:
    vendor: str
    # LogService Ids that hold the hardware event log (SEL), in order of preference.
    event_logs: tuple[str, ...] = ()
    # JSON path (from the ComputerSystem) to an OEM collection of PCI devices, used for
    # GPUs when neither Processors nor PCIeDevices list them.
    oem_pci_devices: tuple[str, ...] | None = None
    # Paths (relative to the ComputerSystem) of VirtualMedia collections the BMC serves
    # without linking them from the system.
    unlinked_virtual_media: tuple[str, ...] = ()
    # Collections (last path segment) the service links but answers with 500 when it has
    # nothing behind them; read as absent instead of failing the whole inventory.
    absent_when_500: tuple[str, ...] = ()
    evidence: tuple[str, ...] = ()


GENERIC = VendorQuirks("generic")

DELL = VendorQuirks(
    "Dell",
    # iDRAC keeps the SEL on the Manager, not the System.
    event_logs=("Sel",),
    # iDRAC 6+ serves VirtualMedia under the System (bmclib's fixtures) while the System
    # resource of the same capture does not link it.
    unlinked_virtual_media=("VirtualMedia",),
    evidence=("dell-idrac-bmclib/redfish/v1/Managers/iDRAC.Embedded.1/LogServices/Sel/index.json",
              "dell-idrac-bmclib/redfish/v1/Systems/System.Embedded.1/VirtualMedia/index.json"),
)

HPE = VendorQuirks(
    "HPE",
    # iLO: the Integrated Management Log is the hardware event log; IEL is iLO's own.
    event_logs=("IML", "IEL"),
    # iLO 5 lists PCI devices only under Oem.Hpe.Links.PCIDevices (HpeServerPciDevice:
    # integer ClassCode and VendorID), not as standard PCIeDevices.
    oem_pci_devices=("Oem", "Hpe", "Links", "PCIDevices"),
    evidence=("hpe-ilo5-dl325/redfish/v1/Systems/1/LogServices/index.json",
              "hpe-ilo5-dl325/redfish/v1/Systems/1/PCIDevices/2/index.json"),
)

OPENBMC = VendorQuirks(
    "OpenBMC",
    # bmcweb: EventLog on the System; the Manager's Journal is the BMC's syslog.
    event_logs=("EventLog",),
    evidence=("openbmc-stock/redfish/v1/Systems/system/LogServices/EventLog/index.json",),
)

SUSHY_TOOLS = VendorQuirks(
    "sushy-tools",
    # OpenStack's emulator with its fake driver links Storage but cannot read it (HTTP 500
    # Base.1.0.GeneralError). No capture: shown live by tests/bmc/test_redfish_sushy.py.
    absent_when_500=("Storage",),
)

# How a service says who made it: ServiceRoot.Vendor, its Oem key, or the system's Manufacturer.
_BY_NAME: dict[str, VendorQuirks] = {
    "dell": DELL, "dell inc.": DELL,
    "hpe": HPE, "hp": HPE,
    "openbmc": OPENBMC,
    "sushy emulator": SUSHY_TOOLS,
}


def quirks_for(root: dict[str, Any], system: dict[str, Any]) -> VendorQuirks:
    candidates = [str(root.get("Vendor") or ""), *(root.get("Oem") or {}).keys(),
                  str(system.get("Manufacturer") or "")]
    for name in candidates:
        found = _BY_NAME.get(name.strip().lower())
        if found is not None:
            return found
    links = root.get("Links", {}).get("ManagerProvidingService", {}).get("@odata.id", "")
    if str(links).rstrip("/").endswith("/Managers/bmc"):  # bmcweb's fixed manager name
        return OPENBMC
    return GENERIC


# --- vocabularies (Redfish <-> racklife), the same for every vendor --------------------------

POWER_STATES: dict[str, PowerState] = {
    "On": PowerState.ON,
    "Off": PowerState.OFF,
    "PoweringOn": PowerState.POWERING_ON,
    "PoweringOff": PowerState.POWERING_OFF,
    "Paused": PowerState.ON,
}

# For each action and current state: None = already there (no request), else the
# ResetTypes to try, first one the BMC allows wins.
_ON_TYPES = ("On", "ForceOn", "PushPowerButton")
RESET_TYPES: dict[tuple[PowerAction, PowerState], tuple[str, ...] | None] = {
    (PowerAction.ON, PowerState.ON): None,
    (PowerAction.ON, PowerState.POWERING_ON): None,
    (PowerAction.ON, PowerState.OFF): _ON_TYPES,
    (PowerAction.ON, PowerState.POWERING_OFF): _ON_TYPES,
    (PowerAction.OFF, PowerState.OFF): None,
    (PowerAction.OFF, PowerState.POWERING_OFF): None,
    (PowerAction.OFF, PowerState.ON): ("ForceOff",),
    (PowerAction.OFF, PowerState.POWERING_ON): ("ForceOff",),
    (PowerAction.GRACEFUL_OFF, PowerState.OFF): None,
    (PowerAction.GRACEFUL_OFF, PowerState.POWERING_OFF): None,
    (PowerAction.GRACEFUL_OFF, PowerState.ON): ("GracefulShutdown",),
    (PowerAction.GRACEFUL_OFF, PowerState.POWERING_ON): ("GracefulShutdown",),
    (PowerAction.CYCLE, PowerState.OFF): _ON_TYPES,
    (PowerAction.CYCLE, PowerState.ON): ("PowerCycle", "ForceRestart"),
    (PowerAction.CYCLE, PowerState.POWERING_ON): ("PowerCycle", "ForceRestart"),
    (PowerAction.CYCLE, PowerState.POWERING_OFF): _ON_TYPES,
    (PowerAction.RESET, PowerState.OFF): _ON_TYPES,
    (PowerAction.RESET, PowerState.ON): ("ForceRestart", "PowerCycle"),
    (PowerAction.RESET, PowerState.POWERING_ON): ("ForceRestart", "PowerCycle"),
    (PowerAction.RESET, PowerState.POWERING_OFF): _ON_TYPES,
}

BOOT_TARGETS: dict[BootDevice, tuple[str, ...]] = {
    BootDevice.PXE: ("Pxe",),
    BootDevice.HTTP: ("UefiHttp",),
    BootDevice.DISK: ("Hdd",),
    BootDevice.CD: ("Cd",),
}

# PCI vendor IDs of data-centre GPU makers (PCIeFunction.VendorId, HPE's integer VendorID).
GPU_PCI_VENDORS = {0x10DE: "NVIDIA", 0x1002: "AMD"}
GPU_DEVICE_CLASSES = {"DisplayController", "ProcessingAccelerators"}
PCI_CLASS_DISPLAY = 0x03
PCI_CLASS_ACCELERATOR = 0x12

SENSOR_UNITS = {"Cel": "C", "RPM": "RPM", "V": "V", "W": "W", "A": "A", "%": "%", "Hz": "Hz"}
HEALTH_ORDER = {"OK": 0, "Warning": 1, "Critical": 2}
TASK_DONE = {"Completed": True, "Exception": False, "Killed": False, "Cancelled": False,
             "Interrupted": False}

"""What the emulator changes in each captured tree so that it serves conformant Redfish.

One table per tree under ``shared/fixtures/redfish`` (keyed by its directory name);
``normalise.py`` applies them at load time and adds the generic rules (captured
error bodies are not resources; links to resources nobody serves are pruned).
Every entry says what the capture had and why it changes; the failures quoted
are those DMTF's ``redfish-service-validator`` 3.1.8 reports against the tree as
captured, with the schemas in ``shared/redfish-schemas``.

What is *not* changed: anything the driver's vendor quirks
(``lifecycle/drivers/bmc/redfish_quirks.py``) or the inventory tests read — the
Dell SEL on the Manager and the unlinked VirtualMedia, the iLO ``IML``/``IEL``
logs, ``Oem.Hpe.Links.PCIDevices`` with integer class codes, the iLO's lowercase
Bios settings object (the emulator answers paths case-insensitively, as iLO
does), serials, MACs, link speeds, firmware versions.
"""

from __future__ import annotations

from typing import Any

from lifecycle.lab.redfish_emulator.normalise import (
    Convert,
    CopyFrom,
    Default,
    Drop,
    Entry,
    Fix,
    Relocate,
    Rename,
    Set,
)


def _hex(digits: int) -> Convert:
    def convert(value: Any) -> Any:
        text = str(value)
        return text if text.lower().startswith("0x") else f"0x{int(text):0{digits}x}"
    return Convert(convert, f"decimal -> 0x{'h' * digits}")


def _class_code(value: Any) -> Any:
    text = str(value)
    return text if text.lower().startswith("0x") else f"0x{int(text):02x}0000"


def _json_pointer(value: Any) -> Any:
    base, sep, fragment = str(value).partition("#")
    return f"{base}#/{fragment}" if sep and not fragment.startswith("/") else value


def _with_seconds(value: Any) -> Any:
    text = str(value)  # 2012-03-07T14:44+06:00 -> 2012-03-07T14:44:00+06:00
    return text[:16] + ":00" + text[16:] if len(text) == 22 and text[13] == ":" else text


def _with_utc(value: Any) -> Any:
    text = str(value)
    return text if text.endswith("Z") or text[-6] in "+-" else text + "Z"


# Bay1/Metrics names sensors that Chassis/1U/Sensors holds under other Ids.
_PS1_SENSORS = {"PS1_3VOutput": "PS1Out3V", "PS1_5VOutput": "PS1Out5V",
                "PS1_12VOutput": "PS1Out12V", "PS1_3VCurrent": "PS1Out3VCurrent",
                "PS1_5VCurrent": "PS1Out5VCurrent", "PS1_12Current": "PS1Out12VCurrent",
                "PS1InputFrequency": "PS1Frequency"}


def _ps1_sensor(value: Any) -> Any:
    base, _, name = str(value).rpartition("/")
    return f"{base}/{_PS1_SENSORS.get(name, name)}"


DELL_IDRAC_BMCLIB: tuple[Entry, ...] = (
    Fix("/redfish/v1/Systems/System.Embedded.1", "Oem/Dell/DellSystem/@odata.id", Drop(),
        captured="the embedded Oem.Dell.DellSystem object carries the @odata.id of a resource "
                 "(.../Oem/Dell/DellSystem/System.Embedded.1) the capture does not hold",
        why="with an @odata.id, clients follow it and get 404; the embedded data stays"),
    Fix("/redfish/v1/Managers/iDRAC.Embedded.1/LogServices/Sel", "DateTimeLocalOffset",
        Set("+00:00"),
        captured='"00:00" (no sign)',
        why="the schema's pattern is ^[-+]hh:mm$; the same resource's DateTime ends -00:00"),
    Fix("/redfish/v1/Managers/iDRAC.Embedded.1/LogServices/Sel/Entries/2", "Id", Set("2"),
        captured='Id "1" at Entries/2 (bmclib copied entry 1 and changed only @odata.id)',
        why="an Id must be the last segment of its URI; the driver reads only Message/Created"),
    Fix("/redfish/v1/UpdateService", "Actions/Oem/DellUpdateService.v1_1_0#DellUpdateService.Install",
        Rename("#DellUpdateService.Install"),
        captured='OEM action key "DellUpdateService.v1_1_0#DellUpdateService.Install"',
        why="OEM action names are '#Namespace.Action' (DSP0266 6.6); the driver uses "
            "SimpleUpdate, not this action"),
)

DMTF_PUBLIC_RACKMOUNT1: tuple[Entry, ...] = (
    Fix("/redfish/v1/Chassis/1U/Sensors/CPU1Temp", "Id", Set("CPU1Temp"),
        captured='Id "CPUTemp1" at Sensors/CPU1Temp', why="an Id is its URI's last segment"),
    Fix("/redfish/v1/Systems/437XR1138R2/Processors/FPGA1/ProcessorMetrics",
        "CoreMetrics/*/CStateResidency/*/Residency", Rename("ResidencyPercent"),
        captured='"Residency" (not in any ProcessorMetrics version; the five values sum to 100)',
        why="the schema's property is ResidencyPercent"),
    Fix("/redfish/v1/AccountService/Roles/*", "RoleId", CopyFrom("Id"),
        captured="RoleId null on the three predefined roles", why="RoleId is required; the "
        "predefined roles' RoleId is their Id (Administrator, Operator, ReadOnly)"),
    Fix("/redfish/v1/Systems/437XR1138R2/USBControllers/USB1", "Links/PCIeDevice", Drop(),
        captured='"PCIeDevice": {} (a link without @odata.id)',
        why="a navigation property must carry @odata.id; the tree names no PCIe device"),
    Fix("/redfish/v1/Systems/437XR1138R2/Certificates/contoso-root", "@odata.id",
        Set("/redfish/v1/Systems/437XR1138R2/Certificates/contoso-root"),
        captured="@odata.id null", why="@odata.id is required: the URI the tree serves it at"),
    Fix("/redfish/v1/Systems/437XR1138R2/Certificates/contoso-subca", "Id", Set("contoso-subca"),
        captured='Id "SScert"', why="an Id is its URI's last segment"),
    Fix("/redfish/v1/Chassis/1U/ThermalSubsystem/Heaters/CPU1Heater/Metrics",
        "Actions/#HeaterMetrics.ResetMetrics/target",
        Set("/redfish/v1/Chassis/1U/ThermalSubsystem/Heaters/CPU1Heater/Metrics/Actions/"
            "HeaterMetrics.ResetMetrics"),
        captured="target without the /Actions/ segment",
        why="action targets are <resource>/Actions/<Schema>.<Action> (DSP0266)"),
    Fix("/redfish/v1/Chassis/1U/PowerSubsystem/PowerSupplies/Bay1", "Actions/#PowerSupply.Reset/target",
        Set("/redfish/v1/Chassis/1U/PowerSubsystem/PowerSupplies/Bay1/Actions/PowerSupply.Reset"),
        captured="target without the /Actions/ segment",
        why="action targets are <resource>/Actions/<Schema>.<Action>"),
    Fix("/redfish/v1/Chassis/1U/PowerSubsystem/PowerSupplies/Bay1/Metrics",
        "Actions/#PowerSupplyMetrics.ResetMetrics/target",
        Set("/redfish/v1/Chassis/1U/PowerSubsystem/PowerSupplies/Bay1/Metrics/Actions/"
            "PowerSupplyMetrics.ResetMetrics"),
        captured="target without the /Actions/ segment",
        why="action targets are <resource>/Actions/<Schema>.<Action>"),
    Fix("/redfish/v1/UpdateService", "Actions/#UpdateService.SimpleUpdate/target",
        Set("/redfish/v1/UpdateService/Actions/UpdateService.SimpleUpdate"),
        captured="/redfish/v1/UpdateService/Actions/SimpleUpdate",
        why="action targets are <resource>/Actions/<Schema>.<Action>; the driver reads the "
            "target from the tree, so firmware_update follows"),
    Fix("/redfish/v1/Chassis/1U/EnvironmentMetrics", "Id", Set("EnvironmentMetrics"),
        captured="Id null", why="Id is required: its URI's last segment"),
    Fix("/redfish/v1/Chassis/1U/TrustedComponents/*", "Name", CopyFrom("Id"),
        captured="Name null (AC-RoT0, iRoT0, TPM)", why="Name is required; the Id is the name "
        "the tree uses for it"),
    Fix("/redfish/v1/ComponentIntegrity/*", "SPDM/MeasurementSet/Measurements/*/MeasurmentType",
        Rename("MeasurementType"),
        captured='typo "MeasurmentType"', why="the schema's property is MeasurementType"),
    Fix("/redfish/v1/ComponentIntegrity/USB-Integrity", "@odata.id",
        Set("/redfish/v1/ComponentIntegrity/USB-Integrity"),
        captured="no @odata.id", why="@odata.id is required: the URI the tree serves it at"),
    Fix("/redfish/v1/ComponentIntegrity/USB-Integrity", "ComponentIntegrityTypeVersion",
        Default("1.1.0"),
        captured="no ComponentIntegrityTypeVersion (SPDM, disabled)",
        why="required; 1.1.0 is the SPDM version the tree's other SPDM responders report"),
    Fix("/redfish/v1/ComponentIntegrity/*", "Name", CopyFrom("Id"),
        captured="Name null or absent on all four", why="Name is required; the Id names it"),
    Fix("/redfish/v1/Managers/BMC/DedicatedNetworkPorts/1", "Id", Set("1"),
        captured="Id null", why="Id is required: its URI's last segment"),
    Fix("/redfish/v1/Managers/BMC/DedicatedNetworkPorts/1", "Name", Set("Dedicated Network Port 1"),
        captured="Name null", why="Name is required; the collection calls these dedicated "
        "network ports"),
    Fix("/redfish/v1/Managers/BMC/SecurityPolicy", "Name", CopyFrom("Id"),
        captured='Name null (Id "Manager\'s Global Security Policy")',
        why="Name is required; the Id is a name"),
    Fix("/redfish/v1/TaskService/Tasks/545", "StartTime", Convert(_with_seconds, "add :00"),
        captured="2012-03-07T14:44+06:00 (no seconds)",
        why="Edm.DateTimeOffset needs seconds"),
    Fix("/redfish/v1/TaskService/Tasks/545", "EndTime", Convert(_with_seconds, "add :00"),
        captured="2012-03-07T14:45+06:00 (no seconds)",
        why="Edm.DateTimeOffset needs seconds"),
    *(Fix(f"/redfish/v1/EventService/Subscriptions/{sid}", "SubscriptionType", Set(kind),
          captured=f"no SubscriptionType (Protocol {protocol})",
          why=f"required; {kind} is the type for {protocol}" + (
              " (the schema has no e-mail type)" if kind == "OEM" else ""))
      for sid, protocol, kind in (("1", "Redfish", "RedfishEvent"), ("3", "SMTP", "OEM"),
                                  ("4", "SyslogTCP", "Syslog"))),
    Fix("/redfish/v1/UpdateService/FirmwareInventory/*", "ReleaseDate", Convert(_with_utc, "add Z"),
        captured="2017-08-22T12:00:00 (no offset) on BMC, SS and BIOS",
        why="Edm.DateTimeOffset needs an offset; none given, so UTC"),
    *(Fix("/redfish/v1/Chassis/1U/PowerSubsystem/PowerSupplies/Bay1/Metrics", prop,
          Convert(_ps1_sensor, "sensor Id the tree uses"),
          captured="DataSourceUri .../Sensors/PS1_3VOutput, PS1_12Current, PS1InputFrequency, "
                   "… (no such sensors)",
          why="Sensors holds the same readings as PS1Out3V, PS1Out12VCurrent, PS1Frequency, …; "
              "the excerpts without any sensor (PS1Temp, PS1Fan, the rail powers) lose "
              "their DataSourceUri by the generic link rule")
      for prop in ("*/DataSourceUri", "*/*/DataSourceUri")),
)

HPE_ILO5_DL325: tuple[Entry, ...] = (
    Relocate("/redfish/v1/systems/1/bios", "/redfish/v1/Systems/1/Bios",
             captured="Systems/1 links /redfish/v1/systems/1/bios, the Bios calls itself "
                      "/redfish/v1/systems/1/bios/",
             why="Redfish.Uris are case-sensitive (/redfish/v1/Systems/{id}/Bios). Only the "
                 "Bios moves: its lowercase SettingsObject link stays, so clients still meet "
                 "iLO's case-insensitive paths"),
    Fix("/redfish/v1/systems/1/bios", "Actions/#Bios.ChangePassword/target",
        Set("/redfish/v1/Systems/1/Bios/Actions/Bios.ChangePassword"),
        captured="/redfish/v1/systems/1/bios/settings/Actions/Bios.ChangePasswords/",
        why="an action's target is under the resource that has it, spelled as the action"),
    Fix("/redfish/v1/systems/1/bios", "Actions/#Bios.ResetBios/target",
        Set("/redfish/v1/Systems/1/Bios/Actions/Bios.ResetBios"),
        captured="/redfish/v1/systems/1/bios/settings/Actions/Bios.ResetBios/",
        why="an action's target is under the resource that has it"),
    Fix("/redfish/v1/Systems/1/EthernetInterfaces/*", "IPv4Addresses",
        Convert(lambda v: [a for a in v if a.get("Address") != "N/A"], "drop N/A addresses"),
        captured='IPv4Addresses [{"Address": "N/A"}] on interfaces 1 and 3',
        why="an address must be dotted-quad; interfaces 2 and 4 show no address as []"),
    Relocate("/redfish/v1/Managers/1/SerialInterface", "/redfish/v1/Managers/1/SerialInterfaces",
             subtree=True,
             captured="the SerialInterfaceCollection and its member at .../SerialInterface",
             why="the schema allows /redfish/v1/Managers/{id}/SerialInterfaces only"),
    Fix("/redfish/v1/Managers/1/RemoteSupportService", "ServiceEventLogs", Drop(),
        captured="an OEM link to an empty LogEntryCollection at .../RemoteSupportService/"
                 "ServiceEventLogs",
        why="a LogEntryCollection may only live under a LogService's Entries; the Hpe OEM "
            "schema is not in shared/redfish-schemas, so there is nothing to move it to"),
    Fix("/redfish/v1/Chassis/1/PCIeDevices/*/PCIeFunctions/*", "ClassCode",
        Convert(_class_code, "base class -> 0xCC0000"),
        captured='ClassCode "3" / "2" (the PCI base class, decimal)',
        why="the schema wants 0xCCSSPP; sub-class and prog-if are not given, so 00"),
    *(Fix("/redfish/v1/Chassis/1/PCIeDevices/*/PCIeFunctions/*", prop, _hex(4),
          captured=f"{prop} in decimal (VendorId 4139 is Matrox 0x102b, 4215 QLogic 0x1077)",
          why="the schema wants 0xhhhh")
      for prop in ("DeviceId", "VendorId", "SubsystemId", "SubsystemVendorId")),
    Fix("/redfish/v1/Chassis/1/PCIeDevices/*/PCIeFunctions/*", "RevisionId", Drop(),
        captured='RevisionId "2.5" / "08.50.78" (firmware versions, not PCI revision ids)',
        why="the schema wants 0xhh and the tree has no revision id to give"),
    *(Fix(f"/redfish/v1/Chassis/1/{resource}", f"{array}/*/@odata.id",
          Convert(_json_pointer, "#x -> #/x"),
          captured=f'member ids like "/redfish/v1/Chassis/1/{resource}#{array}/0"',
          why="a member's @odata.id fragment is an RFC 6901 JSON pointer (#/…)")
      for resource, array in (("Power", "PowerControl"), ("Power", "PowerSupplies"),
                              ("Power", "Redundancy"), ("Thermal", "Fans"),
                              ("Thermal", "Temperatures"))),
)

OPENBMC_STOCK: tuple[Entry, ...] = ()

TABLES: dict[str, tuple[Entry, ...]] = {
    "dell-idrac-bmclib": DELL_IDRAC_BMCLIB,
    "dmtf-public-rackmount1": DMTF_PUBLIC_RACKMOUNT1,
    "hpe-ilo5-dl325": HPE_ILO5_DL325,
    "openbmc-stock": OPENBMC_STOCK,
}

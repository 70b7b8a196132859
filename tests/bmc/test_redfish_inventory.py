"""Inventory from each captured vendor tree equals what the JSON says (values read by hand)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from lifecycle.drivers.bmc import redfish_parse as parse
from lifecycle.drivers.bmc.base import Cpu, Drive, Firmware, Gpu, NicInfo, SystemInfo
from lifecycle.drivers.bmc.redfish import RedfishDriver
from lifecycle.drivers.bmc.redfish_quirks import DELL, GENERIC, HPE, OPENBMC, quirks_for
from lifecycle.lab.redfish_emulator import RedfishEmulator

MakeDriver = Callable[..., RedfishDriver]


def test_dell_idrac_inventory(emulator: RedfishEmulator, make_driver: MakeDriver) -> None:
    inv = make_driver(emulator.urls["dell-idrac-bmclib"]).inventory()
    assert inv.system == SystemInfo(vendor="Dell Inc.", model="PowerEdge R6515",
                                    serial="CNCMU0005400IJ",
                                    uuid="4c4c4544-004c-4410-8058-c6c04f443533",
                                    bios_version="2.2.4")
    assert inv.memory_gib == 64.0
    # The capture links 32 PCIeDevices, Processors, EthernetInterfaces and Storage but holds none
    # of them; the emulator prunes those links (see test_emulator_normalise), and the as-captured
    # tree's dangling links also read as empty, not as an error.
    assert inv.cpus == [] and inv.gpus == [] and inv.nics == [] and inv.drives == []
    # Nor a FirmwareInventory: the emulator serves a synthetic one (update_service.py).
    assert inv.firmware == [Firmware("BMC firmware", "1.20.50.52", True),
                            Firmware("System BIOS", "2.2.4", True)]


def test_dmtf_rackmount_inventory(emulator: RedfishEmulator, make_driver: MakeDriver) -> None:
    inv = make_driver(emulator.urls["dmtf-public-rackmount1"]).inventory()
    assert inv.system == SystemInfo(vendor="Contoso", model="3500", serial="437XR1138R2",
                                    uuid="38947555-7742-3448-3784-823347823834",
                                    bios_version="P79 v1.45 (12/06/2017)")
    # CPU2 is Absent and FPGA1 is not a CPU; GraphicsControllers/GPU1 is a display adapter.
    assert inv.cpus == [Cpu("Multi-Core Intel(R) Xeon(R) processor 7xxx Series", 8, 16)]
    assert inv.gpus == []
    assert inv.memory_gib == 96.0
    assert inv.nics == [
        NicInfo("12446A3B0411", "12:44:6a:3b:04:11", 1000, True),
        NicInfo("12446A3B8890", "aa:bb:cc:dd:ee:00", 1000, True),  # MACAddress, not Permanent
        NicInfo("VLAN1", "12:44:6a:3b:04:11", 1000, True),
        NicInfo("ToManager", "aa:bb:cc:dd:ee:fe", 100, None),
    ]
    assert inv.drives == [Drive("SATA Bay 1", "3000GT8", None, 8_000_000_000_000, None),
                          Drive("SATA Bay 2", "3000GT7", None, 4_000_000_000_000, None)]
    assert inv.firmware == [Firmware("Contoso BMC Firmware", "1.45.455b66-rev4", True),
                            Firmware("Contoso Simple Storage Firmware", "2.50", True),
                            Firmware("Contoso BIOS Firmware", "P79 v1.45", True)]


def test_hpe_ilo5_inventory(emulator: RedfishEmulator, make_driver: MakeDriver) -> None:
    inv = make_driver(emulator.urls["hpe-ilo5-dl325"]).inventory()
    assert inv.system == SystemInfo(vendor="HPE", model="ProLiant DL325 Gen10 Plus",
                                    serial="MXQ019020B",
                                    uuid="36383150-3630-584d-5130-313930323042",
                                    bios_version="A43 v2.52 (10/29/2021)")
    # iLO pads the model with spaces; cores and threads from Processors/1.
    assert inv.cpus == [Cpu("AMD EPYC 7302P 16-Core Processor", 16, 32)]
    assert inv.memory_gib == 64.0
    # The only display-class device in Oem.Hpe PCIDevices is the embedded Matrox (0x102b).
    assert inv.gpus == []
    assert [(n.name, n.mac, n.speed_mbps, n.link_up) for n in inv.nics] == [
        ("1", "94:40:c9:5c:86:bc", 25000, True), ("2", "94:40:c9:5c:86:bd", None, False),
        ("3", "14:02:ec:d9:3a:a0", 25000, True), ("4", "14:02:ec:d9:3a:a1", None, False)]
    assert inv.drives == []
    assert len(inv.firmware) == 12
    assert Firmware("iLO 5", "2.46 May 11 2021", None) in inv.firmware
    assert Firmware("System ROM", "A43 v2.52 (10/29/2021)", None) in inv.firmware


def test_openbmc_inventory(emulator: RedfishEmulator, make_driver: MakeDriver) -> None:
    inv = make_driver(emulator.urls["openbmc-stock"]).inventory()
    # Stock bmcweb on QEMU: no Manufacturer, Model, SerialNumber or UUID.
    assert inv.system == SystemInfo("", "", "", "", "")
    assert inv.cpus == [] and inv.gpus == [] and inv.nics == [] and inv.drives == []
    assert inv.memory_gib == 0.0
    assert inv.firmware == [Firmware("Software Inventory", "2.15.0-dev-686-g100c36de90", True)]


def test_gpus_from_processors(gpu_emulator: RedfishEmulator, make_driver: MakeDriver) -> None:
    inv = make_driver(gpu_emulator.urls["hgx-processors"]).inventory()
    assert len(inv.gpus) == 8
    assert inv.gpus[0] == Gpu("NVIDIA H100 80GB HBM3", "EMUGPU0000", "SXM1")
    assert inv.gpus[7] == Gpu("NVIDIA H100 80GB HBM3", "EMUGPU0007", "SXM8")
    assert [d.serial for d in inv.drives] == ["EMUNVME0000", "EMUNVME0001"]
    assert inv.drives[0].protocol == "NVMe" and inv.drives[0].capacity_bytes == 3_840_755_982_336


def test_gpus_from_pcie_devices(gpu_emulator: RedfishEmulator, make_driver: MakeDriver) -> None:
    inv = make_driver(gpu_emulator.urls["hgx-pcie"]).inventory()
    assert [g.pcie_slot for g in inv.gpus] == [f"PCIe Slot {i}" for i in range(1, 9)]
    assert {g.serial for g in inv.gpus} == {f"EMUGPU{i:04d}" for i in range(8)}
    # The captured CPUs are still there next to the added GPUs.
    assert inv.cpus == [Cpu("Multi-Core Intel(R) Xeon(R) processor 7xxx Series", 8, 16)]


def _load(redfish_dir: Path, rel: str) -> dict[str, object]:
    data = json.loads((redfish_dir / rel).read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def test_hpe_oem_pci_device_rules_on_captured_json(redfish_dir: Path) -> None:
    video = _load(redfish_dir, "hpe-ilo5-dl325/redfish/v1/Systems/1/PCIDevices/2/index.json")
    assert video["ClassCode"] == 3 and video["VendorID"] == 4139  # Matrox, display class
    assert not parse.is_gpu_hpe_pci(video)
    nvidia = {**video, "VendorID": 0x10DE, "Name": "NVIDIA H100"}
    assert parse.is_gpu_hpe_pci(nvidia)
    assert parse.gpu_from_hpe_pci(nvidia) == Gpu("NVIDIA H100", None, "Embedded Video Controller")


def test_quirks_table_matches_captured_services(redfish_dir: Path) -> None:
    def detect(tree: str, system: str) -> object:
        root = _load(redfish_dir, f"{tree}/redfish/v1/index.json")
        return quirks_for(root, _load(redfish_dir, f"{tree}/redfish/v1/Systems/{system}/index.json"))

    assert detect("dell-idrac-bmclib", "System.Embedded.1") is DELL
    assert detect("hpe-ilo5-dl325", "1") is HPE
    assert detect("openbmc-stock", "system") is OPENBMC
    assert detect("dmtf-public-rackmount1", "437XR1138R2") is GENERIC
    for quirks in (DELL, HPE, OPENBMC):
        for rel in quirks.evidence:
            assert (redfish_dir / rel).is_file(), f"{quirks.vendor} quirk lacks its evidence {rel}"


def test_mac_normalisation() -> None:
    assert parse.mac("12:44:6A:3B:04:11") == "12:44:6a:3b:04:11"
    assert parse.mac("12-44-6A-3B-04-11") == "12:44:6a:3b:04:11"
    assert parse.mac("12446A3B0411") == "12:44:6a:3b:04:11"
    assert parse.mac("N/A") is None

"""`nvidia-smi` for a simulated node: the summary table, `-L`, `-q`, `-q -x` and `--query-gpu`.

Formats follow driver 565 (`fixtures/nvidia-smi/thamada_H100SXMx8_*`) for the
text views and DTD nvsmi_device_v12 (`telegraf_a100-sxm4-v12_nvidia-smi-q-x.xml`)
for XML. `-q` text and XML are rendered from one tree so they cannot disagree.
A GPU that has fallen off the bus makes every call fail the way the real tool
does (NVML_ERROR_GPU_IS_LOST, exit status 15).
"""

from __future__ import annotations

import argparse
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable, Sequence

from lifecycle.lab.gputools.state import Gpu, NodeState

GPU_IS_LOST = 15
INVALID_ARGUMENT = 2

# (text label, XML tag, value): value is a string, a (text, xml) pair, or children.
Entry = tuple[str, str, "str | tuple[str, str] | list[Entry]"]


def _gpu_tree(g: Gpu, s: NodeState) -> list[Entry]:
    m = g.model
    yes_no = {True: "Yes", False: "No"}
    used = 1
    reserved = 454
    ecc = [
        ("SRAM Correctable", "sram_correctable", "0"),
        ("SRAM Uncorrectable Parity", "sram_uncorrectable_parity", "0"),
        ("SRAM Uncorrectable SEC-DED", "sram_uncorrectable_secded", "0"),
        ("DRAM Correctable", "dram_correctable", "0"),
        ("DRAM Uncorrectable", "dram_uncorrectable", str(g.dram_uncorrectable)),
    ]
    banks = 2560
    return [
        ("Product Name", "product_name", g.name),
        ("Product Brand", "product_brand", "NVIDIA"),
        ("Product Architecture", "product_architecture", m.architecture),
        ("Display Mode", "display_mode", "Enabled"),
        ("Display Active", "display_active", "Disabled"),
        ("Persistence Mode", "persistence_mode", "Enabled"),
        ("Addressing Mode", "addressing_mode", "None"),
        ("MIG Mode", "mig_mode", [("Current", "current_mig", "Disabled"), ("Pending", "pending_mig", "Disabled")]),
        ("Accounting Mode", "accounting_mode", "Disabled"),
        ("Serial Number", "serial", g.serial),
        ("GPU UUID", "uuid", g.uuid),
        ("Minor Number", "minor_number", str(g.index)),
        ("VBIOS Version", "vbios_version", m.vbios),
        ("MultiGPU Board", "multigpu_board", "No"),
        ("Board ID", "board_id", f"0x{g.bus:x}00"),
        ("Board Part Number", "board_part_number", m.board_part),
        ("GPU Reset Status", "gpu_reset_status", [
            ("Reset Required", "reset_required", yes_no[g.reset_required]),
            ("Drain and Reset Recommended", "drain_and_reset_recommended", yes_no[g.reset_required]),
        ]),
        ("GPU Recovery Action", "gpu_recovery_action", "Reset" if g.reset_required else "None"),
        ("GSP Firmware Version", "gsp_firmware_version", s.driver_version),
        ("PCI", "pci", [
            ("Bus", "pci_bus", (f"0x{g.bus:02X}", f"{g.bus:02X}")),
            ("Device", "pci_device", ("0x00", "00")),
            ("Domain", "pci_domain", ("0x0000", "0000")),
            ("Device Id", "pci_device_id", (m.device_id, m.device_id[2:])),
            ("Bus Id", "pci_bus_id", g.bus_id),
            ("Sub System Id", "pci_sub_system_id", (m.subsystem_id, m.subsystem_id[2:])),
            ("GPU Link Info", "pci_gpu_link_info", [
                ("PCIe Generation", "pcie_gen", [
                    ("Max", "max_link_gen", str(g.pcie_gen_max)),
                    ("Current", "current_link_gen", str(g.pcie_gen)),
                    ("Device Current", "device_current_link_gen", str(g.pcie_gen)),
                    ("Device Max", "max_device_link_gen", str(g.pcie_gen_max)),
                    ("Host Max", "max_host_link_gen", str(g.pcie_gen_max)),
                ]),
                ("Link Width", "link_widths", [
                    ("Max", "max_link_width", "16x"),
                    ("Current", "current_link_width", f"{g.pcie_width}x"),
                ]),
            ]),
            ("Replays Since Reset", "replay_counter", "0"),
            ("Replay Number Rollovers", "replay_rollover_counter", "0"),
            ("Tx Throughput", "tx_util", "567 KB/s"),
            ("Rx Throughput", "rx_util", "559 KB/s"),
        ]),
        ("Fan Speed", "fan_speed", "N/A"),
        ("Performance State", "performance_state", "P0"),
        ("FB Memory Usage", "fb_memory_usage", [
            ("Total", "total", f"{m.memory_mib} MiB"),
            ("Reserved", "reserved", f"{reserved} MiB"),
            ("Used", "used", f"{used} MiB"),
            ("Free", "free", f"{m.memory_mib - reserved - used} MiB"),
        ]),
        ("Compute Mode", "compute_mode", "Default"),
        ("Utilization", "utilization", [
            ("Gpu", "gpu_util", "0 %"),
            ("Memory", "memory_util", "0 %"),
            ("Encoder", "encoder_util", "0 %"),
            ("Decoder", "decoder_util", "0 %"),
        ]),
        ("ECC Mode", "ecc_mode", [("Current", "current_ecc", "Enabled"), ("Pending", "pending_ecc", "Enabled")]),
        ("ECC Errors", "ecc_errors", [
            ("Volatile", "volatile", list(ecc)),
            ("Aggregate", "aggregate", [*ecc, ("SRAM Threshold Exceeded", "sram_threshold_exceeded", "No")]),
        ]),
        ("Retired Pages", "retired_pages", [
            ("Single Bit ECC", "multiple_single_bit_retirement", "N/A"),
            ("Double Bit ECC", "double_bit_retirement", "N/A"),
            ("Pending Page Blacklist", "pending_blacklist", "N/A"),
        ]),
        ("Remapped Rows", "remapped_rows", [
            ("Correctable Error", "remapped_row_corr", "0"),
            ("Uncorrectable Error", "remapped_row_unc", str(g.remap_uncorrectable)),
            ("Pending", "remapped_row_pending", "No"),
            ("Remapping Failure Occurred", "remapped_row_failure", yes_no[g.remap_failure]),
            ("Bank Remap Availability Histogram", "row_remapper_histogram", [
                ("Max", "row_remapper_histogram_max", f"{banks - g.remap_uncorrectable} bank(s)"),
                ("High", "row_remapper_histogram_high", "0 bank(s)"),
                ("Partial", "row_remapper_histogram_partial", "0 bank(s)"),
                ("Low", "row_remapper_histogram_low", "0 bank(s)"),
                ("None", "row_remapper_histogram_none", f"{g.remap_uncorrectable} bank(s)"),
            ]),
        ]),
        ("Temperature", "temperature", [
            ("GPU Current Temp", "gpu_temp", f"{g.temperature_c} C"),
            ("GPU T.Limit Temp", "gpu_temp_tlimit", f"{87 - g.temperature_c} C"),
            ("Memory Current Temp", "memory_temp", f"{g.temperature_c + 6} C"),
        ]),
        ("GPU Power Readings", "gpu_power_readings", [
            ("Power Draw", "power_draw", f"{g.power_w:.2f} W"),
            ("Current Power Limit", "current_power_limit", f"{m.power_limit_w:.2f} W"),
            ("Requested Power Limit", "requested_power_limit", f"{m.power_limit_w:.2f} W"),
            ("Default Power Limit", "default_power_limit", f"{m.power_limit_w:.2f} W"),
            ("Min Power Limit", "min_power_limit", f"{m.min_power_limit_w:.2f} W"),
            ("Max Power Limit", "max_power_limit", f"{m.power_limit_w:.2f} W"),
        ]),
        ("Clocks", "clocks", [
            ("Graphics", "graphics_clock", "345 MHz"),
            ("SM", "sm_clock", "345 MHz"),
            ("Memory", "mem_clock", f"{m.mem_mhz} MHz"),
            ("Video", "video_clock", "765 MHz"),
        ]),
        ("Max Clocks", "max_clocks", [
            ("Graphics", "graphics_clock", f"{m.max_sm_mhz} MHz"),
            ("SM", "sm_clock", f"{m.max_sm_mhz} MHz"),
            ("Memory", "mem_clock", f"{m.mem_mhz} MHz"),
            ("Video", "video_clock", "1545 MHz"),
        ]),
        ("Fabric", "fabric", [("State", "state", "Completed"), ("Status", "status", "Success")]),
        ("Processes", "processes", "None"),
    ]


def _text_lines(entries: list[Entry], indent: int) -> list[str]:
    out: list[str] = []
    for label, _tag, value in entries:
        head = " " * indent + label
        if isinstance(value, list):
            out.append(head)
            out += _text_lines(value, indent + 4)
        else:
            text = value[0] if isinstance(value, tuple) else value
            out.append(f"{head:<42}: {text}")
    return out


def _xml_fill(parent: ET.Element, entries: list[Entry]) -> None:
    for _label, tag, value in entries:
        child = ET.SubElement(parent, tag)
        if isinstance(value, list):
            _xml_fill(child, value)
        else:
            child.text = value[1] if isinstance(value, tuple) else value


def _stamp() -> str:
    return time.strftime("%a %b %d %H:%M:%S %Y")


def query_text(s: NodeState, gpus: Sequence[Gpu]) -> str:
    lines = [
        "==============NVSMI LOG==============", "",
        f"{'Timestamp':<42}: {_stamp()}",
        f"{'Driver Version':<42}: {s.driver_version}",
        f"{'CUDA Version':<42}: {s.cuda_version}", "",
        f"{'Attached GPUs':<42}: {len(s.gpus)}",
    ]
    for g in gpus:
        lines.append(f"GPU {g.bus_id}")
        lines += _text_lines(_gpu_tree(g, s), 4)
        lines.append("")
    return "\n".join(lines) + "\n"


def query_xml(s: NodeState, gpus: Sequence[Gpu]) -> str:
    root = ET.Element("nvidia_smi_log")
    for tag, text in (("timestamp", _stamp()), ("driver_version", s.driver_version),
                      ("cuda_version", s.cuda_version), ("attached_gpus", str(len(s.gpus)))):
        ET.SubElement(root, tag).text = text
    for g in gpus:
        _xml_fill(ET.SubElement(root, "gpu", id=g.bus_id), _gpu_tree(g, s))
    ET.indent(root, space="    ")
    body = ET.tostring(root, encoding="unicode")
    return ('<?xml version="1.0" encoding="UTF-8"?>\n'
            '<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v12.dtd">\n' + body + "\n")


def summary(s: NodeState, gpus: Sequence[Gpu]) -> str:
    bar = "+-----------------------------------------+------------------------+----------------------+"
    out = [
        "+-----------------------------------------------------------------------------------------+",
        f"| NVIDIA-SMI {s.driver_version:<23}Driver Version: {s.driver_version:<15}"
        f"CUDA Version: {s.cuda_version:<9}|",
        "|-----------------------------------------+------------------------+----------------------+",
        "| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |",
        "| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |",
        "|                                         |                        |               MIG M. |",
        "|=========================================+========================+======================|",
    ]
    for g in gpus:
        name = g.name if len(g.name) <= 29 else g.name[:26] + "..."
        out += [
            f"| {g.index:>3}  {name:<31}On  |   {g.bus_id} Off |{g.dram_uncorrectable:>21} |",
            f"| N/A {g.temperature_c:>4}C    P0 {round(g.power_w):>14}W / {g.model.power_limit_w:>4}W |"
            f" {1:>7}MiB / {g.model.memory_mib:>6}MiB |{0:>7}%{'Default':>13} |",
            f"|                                         |                        |{'Disabled':>21} |",
            bar,
        ]
    out += [
        " " * 89,
        "+-----------------------------------------------------------------------------------------+",
        "| Processes:                                                                              |",
        "|  GPU   GI   CI        PID   Type   Process name                              GPU Memory |",
        "|        ID   ID                                                               Usage      |",
        "|=========================================================================================|",
        "|  No running processes found                                                             |",
        "+-----------------------------------------------------------------------------------------+",
    ]
    return "\n".join(out) + "\n"


def listing(gpus: Sequence[Gpu]) -> str:
    return "".join(f"GPU {g.index}: {g.name} (UUID: {g.uuid})\n" for g in gpus)


# --query-gpu fields: name -> (unit or "", value of one GPU).
_yn = {True: "Yes", False: "No"}
FIELDS: dict[str, tuple[str, Callable[[Gpu, NodeState], str]]] = {
    "timestamp": ("", lambda g, s: time.strftime("%Y/%m/%d %H:%M:%S.000")),
    "driver_version": ("", lambda g, s: s.driver_version),
    "count": ("", lambda g, s: str(len(s.gpus))),
    "name": ("", lambda g, s: g.name),
    "serial": ("", lambda g, s: g.serial),
    "uuid": ("", lambda g, s: g.uuid),
    "pci.bus_id": ("", lambda g, s: g.bus_id),
    "index": ("", lambda g, s: str(g.index)),
    "vbios_version": ("", lambda g, s: g.model.vbios),
    "persistence_mode": ("", lambda g, s: "Enabled"),
    "pstate": ("", lambda g, s: "P0"),
    "pcie.link.gen.max": ("", lambda g, s: str(g.pcie_gen_max)),
    "pcie.link.gen.current": ("", lambda g, s: str(g.pcie_gen)),
    "pcie.link.gen.gpucurrent": ("", lambda g, s: str(g.pcie_gen)),
    "pcie.link.gen.gpumax": ("", lambda g, s: str(g.pcie_gen_max)),
    "pcie.link.width.max": ("", lambda g, s: "16"),
    "pcie.link.width.current": ("", lambda g, s: str(g.pcie_width)),
    "temperature.gpu": ("", lambda g, s: str(g.temperature_c)),
    "temperature.memory": ("", lambda g, s: str(g.temperature_c + 6)),
    "utilization.gpu": ("%", lambda g, s: "0"),
    "utilization.memory": ("%", lambda g, s: "0"),
    "memory.total": ("MiB", lambda g, s: str(g.model.memory_mib)),
    "memory.used": ("MiB", lambda g, s: "1"),
    "memory.free": ("MiB", lambda g, s: str(g.model.memory_mib - 455)),
    "power.draw": ("W", lambda g, s: f"{g.power_w:.2f}"),
    "power.draw.average": ("W", lambda g, s: f"{g.power_w:.2f}"),
    "power.draw.instant": ("W", lambda g, s: f"{g.power_w:.2f}"),
    "power.limit": ("W", lambda g, s: f"{g.model.power_limit_w:.2f}"),
    "enforced.power.limit": ("W", lambda g, s: f"{g.model.power_limit_w:.2f}"),
    "power.max_limit": ("W", lambda g, s: f"{g.model.power_limit_w:.2f}"),
    "clocks.sm": ("MHz", lambda g, s: "345"),
    "clocks.max.sm": ("MHz", lambda g, s: str(g.model.max_sm_mhz)),
    "clocks.mem": ("MHz", lambda g, s: str(g.model.mem_mhz)),
    "ecc.mode.current": ("", lambda g, s: "Enabled"),
    "ecc.errors.corrected.volatile.total": ("", lambda g, s: "0"),
    "ecc.errors.corrected.aggregate.total": ("", lambda g, s: "0"),
    "ecc.errors.uncorrected.volatile.dram": ("", lambda g, s: str(g.dram_uncorrectable)),
    "ecc.errors.uncorrected.volatile.total": ("", lambda g, s: str(g.dram_uncorrectable)),
    "ecc.errors.uncorrected.aggregate.dram": ("", lambda g, s: str(g.dram_uncorrectable)),
    "ecc.errors.uncorrected.aggregate.total": ("", lambda g, s: str(g.dram_uncorrectable)),
    "remapped_rows.correctable": ("", lambda g, s: "0"),
    "remapped_rows.uncorrectable": ("", lambda g, s: str(g.remap_uncorrectable)),
    "remapped_rows.pending": ("", lambda g, s: "No"),
    "remapped_rows.failure": ("", lambda g, s: _yn[g.remap_failure]),
}
ALIASES = {"gpu_name": "name", "gpu_serial": "serial", "gpu_uuid": "uuid", "gpu_bus_id": "pci.bus_id",
           "clocks.current.sm": "clocks.sm", "clocks.current.memory": "clocks.mem"}


def query_csv(s: NodeState, gpus: Sequence[Gpu], fields: list[str], fmt: str) -> tuple[str, int]:
    opts = {o.strip() for o in fmt.split(",")}
    if "csv" not in opts:
        return f'"{fmt}" is not a valid format.\n', INVALID_ARGUMENT
    names = [f.strip() for f in fields if f.strip()]
    for f in names:
        if ALIASES.get(f, f) not in FIELDS:
            return f'Field "{f}" is not a valid field to query.\n\n', INVALID_ARGUMENT
    lines = []
    if "noheader" not in opts:
        lines.append(", ".join(
            f"{f} [{FIELDS[ALIASES.get(f, f)][0]}]" if FIELDS[ALIASES.get(f, f)][0] else f for f in names
        ))
    for g in gpus:
        row = []
        for f in names:
            unit, get = FIELDS[ALIASES.get(f, f)]
            value = get(g, s)
            row.append(value if not unit or "nounits" in opts else f"{value} {unit}")
        lines.append(", ".join(row))
    return "\n".join(lines) + "\n", 0


def main(argv: list[str], s: NodeState) -> tuple[str, int]:
    p = argparse.ArgumentParser(prog="nvidia-smi", add_help=False)
    p.add_argument("-q", "--query", action="store_true")
    p.add_argument("-x", "--xml-format", action="store_true")
    p.add_argument("-L", "--list-gpus", action="store_true")
    p.add_argument("-i", "--id")
    p.add_argument("-d", "--display")
    p.add_argument("--query-gpu")
    p.add_argument("--format", default="csv")
    args, rest = p.parse_known_args(argv)
    if rest:
        return f"Invalid combination of input arguments: {' '.join(rest)}\n", INVALID_ARGUMENT
    lost = s.lost_gpu
    if lost is not None:
        return (f"Unable to determine the device handle for GPU{lost.bus_id[4:]}: GPU is lost.  "
                "Reboot the system to recover this GPU\n", GPU_IS_LOST)
    gpus: Sequence[Gpu] = s.gpus
    if args.id is not None:
        gpus = [g for g in s.gpus if args.id in (str(g.index), g.uuid, g.bus_id, g.serial)]
        if not gpus:
            return "No devices were found\n", 6
    if args.query_gpu:
        return query_csv(s, gpus, args.query_gpu.split(","), args.format)
    if args.query:
        return (query_xml(s, gpus) if args.xml_format else query_text(s, gpus)), 0
    if args.list_gpus:
        return listing(gpus), 0
    return summary(s, gpus), 0

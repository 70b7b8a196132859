"""Parse ``nvidia-smi -q`` (text), ``nvidia-smi -q -x`` (XML) and the plain ``nvidia-smi`` table.

Used where NVML cannot be loaded, and as evidence beside NVML's numbers. The ``-q``
text is an indented tree; it is read as a tree and queried by path, because the same
leaf name (``Current``, ``Max``) appears under many sections. Fields the output says
are ``N/A`` become ``None``; a file that announces more GPUs than it holds is truncated
and raises. nvidia-smi reports a GPU NVML cannot reach ("Unable to determine the device
handle for GPU…") on a line of its own and goes on to print the others as if the node
had one GPU fewer: any such failure line makes the whole output an error quoting it.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from typing import Literal

from burnin.parsers import ParseError

Format = Literal["text", "xml", "table"]


@dataclass
class SmiGpu:
    index: int
    name: str | None
    serial: str | None
    pci_bus_id: str | None
    pcie_gen_current: int | None
    pcie_gen_max: int | None
    pcie_width_current: int | None
    pcie_width_max: int | None
    ecc_uncorrected_volatile: int | None
    remapped_rows_failure: bool | None
    uuid: str | None = None
    ecc_mode: str | None = None
    ecc_uncorrected_aggregate: int | None = None
    remapped_rows_pending: bool | None = None
    retired_pages_pending: bool | None = None
    temperature_c: float | None = None
    power_limit_w: float | None = None
    power_default_limit_w: float | None = None
    throttle_reasons: list[str] = field(default_factory=list)


@dataclass
class SmiReport:
    format: Format
    driver_version: str | None
    cuda_version: str | None
    gpus: list[SmiGpu]


def _na(value: str | None) -> str | None:
    if value is None:
        return None
    v = value.strip()
    return None if v in ("", "N/A", "[N/A]", "Not Supported", "[Not Supported]") else v


def _int(value: str | None) -> int | None:
    v = _na(value)
    if v is None:
        return None
    m = re.match(r"^(-?\d+)", v)
    if not m:
        raise ParseError(f"expected a number, got {v!r}")
    return int(m.group(1))


def _float(value: str | None) -> float | None:
    v = _na(value)
    if v is None:
        return None
    m = re.match(r"^(-?\d+(?:\.\d+)?)", v)
    if not m:
        raise ParseError(f"expected a number, got {v!r}")
    return float(m.group(1))


def _yes_no(value: str | None) -> bool | None:
    v = _na(value)
    if v is None:
        return None
    if v.lower() in ("yes", "no"):
        return v.lower() == "yes"
    raise ParseError(f"expected Yes/No, got {v!r}")


def _sum(values: list[int | None]) -> int | None:
    present = [v for v in values if v is not None]
    return sum(present) if present else None


# Clock-event ("throttle") reasons that mean the hardware is protecting itself.
_THROTTLE_TEXT = {
    "HW Slowdown": "hw_slowdown",
    "HW Thermal Slowdown": "hw_thermal_slowdown",
    "HW Power Brake Slowdown": "hw_power_brake_slowdown",
    "SW Thermal Slowdown": "sw_thermal_slowdown",
    "SW Power Cap": "sw_power_cap",
}
_THROTTLE_XML = {
    "hw_slowdown": "hw_slowdown",
    "hw_thermal_slowdown": "hw_thermal_slowdown",
    "hw_power_brake_slowdown": "hw_power_brake_slowdown",
    "sw_thermal_slowdown": "sw_thermal_slowdown",
    "sw_power_cap": "sw_power_cap",
}


# --------------------------------------------------------------------------- -q text


class _Node:
    __slots__ = ("children", "value")

    def __init__(self, value: str | None = None) -> None:
        self.value = value
        self.children: dict[str, _Node] = {}

    def get(self, *path: str) -> str | None:
        node: _Node | None = self
        for key in path:
            node = node.children.get(key) if node is not None else None
        return node.value if node is not None else None

    def has(self, *path: str) -> bool:
        node: _Node | None = self
        for key in path:
            node = node.children.get(key) if node is not None else None
        return node is not None


_LINE = re.compile(r"^(?P<indent> *)(?P<key>\S.*?)\s*(?::\s?(?P<value>.*?))?\s*$")


def _tree(lines: list[str]) -> _Node:
    root = _Node()
    stack: list[tuple[int, _Node]] = [(-1, root)]
    for line in lines:
        if not line.strip():
            continue
        m = _LINE.match(line)
        if not m:
            continue
        indent = len(m.group("indent"))
        while stack[-1][0] >= indent:
            stack.pop()
        node = _Node(m.group("value"))
        parent = stack[-1][1]
        parent.children.setdefault(m.group("key"), node)
        stack.append((indent, node))
    return root


def _text_gpu(index: int, g: _Node) -> SmiGpu:
    link = ("PCI", "GPU Link Info")
    vol = ("ECC Errors", "Volatile")
    agg = ("ECC Errors", "Aggregate")

    def uncorrectable(section: tuple[str, ...]) -> int | None:
        if g.has(*section, "DRAM Uncorrectable"):  # driver ≥ 530 layout
            return _sum(
                [
                    _int(g.get(*section, "SRAM Uncorrectable Parity")),
                    _int(g.get(*section, "SRAM Uncorrectable SEC-DED")),
                    _int(g.get(*section, "SRAM Uncorrectable")),
                    _int(g.get(*section, "DRAM Uncorrectable")),
                ]
            )
        return _int(g.get(*section, "Double Bit", "Total"))

    reasons_node = "Clocks Event Reasons" if g.has("Clocks Event Reasons") else "Clocks Throttle Reasons"
    throttle = [
        ours
        for text, ours in _THROTTLE_TEXT.items()
        if (g.get(reasons_node, text) or g.get(reasons_node, "HW Slowdown", text) or "").strip()
        == "Active"
    ]
    power = "GPU Power Readings" if g.has("GPU Power Readings") else "Power Readings"
    return SmiGpu(
        index=index,
        name=_na(g.get("Product Name")),
        serial=_na(g.get("Serial Number")),
        pci_bus_id=_na(g.get("PCI", "Bus Id")),
        pcie_gen_current=_int(g.get(*link, "PCIe Generation", "Current")),
        pcie_gen_max=_int(g.get(*link, "PCIe Generation", "Max")),
        pcie_width_current=_int(g.get(*link, "Link Width", "Current")),
        pcie_width_max=_int(g.get(*link, "Link Width", "Max")),
        ecc_uncorrected_volatile=uncorrectable(vol),
        remapped_rows_failure=_yes_no(g.get("Remapped Rows", "Remapping Failure Occurred")),
        uuid=_na(g.get("GPU UUID")),
        ecc_mode=_na(g.get("ECC Mode", "Current")),
        ecc_uncorrected_aggregate=uncorrectable(agg),
        remapped_rows_pending=_yes_no(g.get("Remapped Rows", "Pending")),
        retired_pages_pending=_yes_no(
            g.get("Retired Pages", "Pending Page Blacklist") or g.get("Retired Pages", "Pending")
        ),
        temperature_c=_float(g.get("Temperature", "GPU Current Temp")),
        power_limit_w=_float(g.get(power, "Current Power Limit") or g.get(power, "Power Limit")),
        power_default_limit_w=_float(g.get(power, "Default Power Limit")),
        throttle_reasons=throttle,
    )


def _parse_text(text: str) -> SmiReport:
    lines = text.splitlines()
    header: list[str] = []
    sections: list[list[str]] = []
    for line in lines:
        if re.match(r"^GPU [0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.\d\s*$", line):
            sections.append([])
            continue
        (sections[-1] if sections else header).append(line)
    top = _tree(header)
    announced = _int(top.get("Attached GPUs"))
    if not sections:
        raise ParseError("nvidia-smi -q output lists no GPU sections")
    if announced is not None and announced != len(sections):
        raise ParseError(
            f"nvidia-smi -q announces {announced} GPUs but holds {len(sections)} (truncated?)"
        )
    gpus = []
    for i, sec in enumerate(sections):
        tree = _tree(sec)
        if tree.get("Product Name") is None:
            raise ParseError(f"GPU section {i} has no Product Name (truncated?)")
        if not tree.has("Processes") and not any(re.match(r"^\s+Processes\b", ln) for ln in sec):
            # every full -q GPU section has it (only -d display filters leave it out)
            raise ParseError(f"GPU section {i} has no Processes entry: the output was cut off")
        gpus.append(_text_gpu(i, tree))
    return SmiReport(
        "text", _na(top.get("Driver Version")), _na(top.get("CUDA Version")), gpus
    )


# --------------------------------------------------------------------------- -q -x XML


def _x(el: ET.Element, path: str) -> str | None:
    found = el.find(path)
    return found.text if found is not None and found.text is not None else None


def _parse_xml(text: str) -> SmiReport:
    # Local tool output. Python's expat (≥ 2.4.1) refuses entity-expansion bombs and
    # ElementTree never fetches the external DTD named in the DOCTYPE.
    try:
        root = ET.fromstring(text)  # noqa: S314
    except ET.ParseError as exc:
        raise ParseError(f"nvidia-smi XML is malformed or truncated: {exc}") from exc
    if root.tag != "nvidia_smi_log":
        raise ParseError(f"not an nvidia-smi log (root element <{root.tag}>)")
    gpus = []
    for i, g in enumerate(root.findall("gpu")):
        vol = [_int(_x(g, f"ecc_errors/volatile/{k}")) for k in ("sram_uncorrectable", "dram_uncorrectable")]
        agg = [_int(_x(g, f"ecc_errors/aggregate/{k}")) for k in ("sram_uncorrectable", "dram_uncorrectable")]
        if all(v is None for v in vol):
            vol = [_int(_x(g, "ecc_errors/volatile/double_bit/total"))]
            agg = [_int(_x(g, "ecc_errors/aggregate/double_bit/total"))]
        reasons = g.find("clocks_event_reasons") or g.find("clocks_throttle_reasons")
        throttle: list[str] = []
        if reasons is not None:
            for child in reasons:
                key = re.sub(r"^clocks_(?:event|throttle)_reason_", "", child.tag)
                if key in _THROTTLE_XML and (child.text or "").strip() == "Active":
                    throttle.append(_THROTTLE_XML[key])
        power = "gpu_power_readings" if g.find("gpu_power_readings") is not None else "power_readings"
        gpus.append(
            SmiGpu(
                index=i,
                name=_na(_x(g, "product_name")),
                serial=_na(_x(g, "serial")),
                pci_bus_id=_na(_x(g, "pci/pci_bus_id")) or g.get("id"),
                pcie_gen_current=_int(_x(g, "pci/pci_gpu_link_info/pcie_gen/current_link_gen")),
                pcie_gen_max=_int(_x(g, "pci/pci_gpu_link_info/pcie_gen/max_link_gen")),
                pcie_width_current=_int(_x(g, "pci/pci_gpu_link_info/link_widths/current_link_width")),
                pcie_width_max=_int(_x(g, "pci/pci_gpu_link_info/link_widths/max_link_width")),
                ecc_uncorrected_volatile=_sum(vol),
                remapped_rows_failure=_yes_no(_x(g, "remapped_rows/remapped_row_failure")),
                uuid=_na(_x(g, "uuid")),
                ecc_mode=_na(_x(g, "ecc_mode/current_ecc")),
                ecc_uncorrected_aggregate=_sum(agg),
                remapped_rows_pending=_yes_no(_x(g, "remapped_rows/remapped_row_pending")),
                retired_pages_pending=_yes_no(_x(g, "retired_pages/pending_retirement")),
                temperature_c=_float(_x(g, "temperature/gpu_temp")),
                power_limit_w=_float(
                    _x(g, f"{power}/current_power_limit") or _x(g, f"{power}/power_limit")
                ),
                power_default_limit_w=_float(_x(g, f"{power}/default_power_limit")),
                throttle_reasons=throttle,
            )
        )
    if not gpus:
        raise ParseError("nvidia-smi XML lists no <gpu> elements")
    return SmiReport(
        "xml", _na(_x(root, "driver_version")), _na(_x(root, "cuda_version")), gpus
    )


# --------------------------------------------------------------------------- summary table

_TABLE_HEAD = re.compile(
    r"Driver Version:\s*(?P<driver>[\d.]+)\s+CUDA Version:\s*(?P<cuda>[\d.]+|N/A)"
)
_TABLE_GPU = re.compile(
    r"^\|\s+(?P<index>\d+)\s+(?P<name>.+?)\s+(?:On|Off)\s+\|\s+(?P<bus>[0-9A-Fa-f]{8}:[0-9A-Fa-f]{2}:"
    r"[0-9A-Fa-f]{2}\.\d)\s+\S+\s+\|\s+(?P<ecc>\S+)\s+\|"
)


def _parse_table(text: str) -> SmiReport:
    head = _TABLE_HEAD.search(text)
    if not head:
        raise ParseError("not nvidia-smi output: no 'Driver Version' header")
    gpus = []
    for line in text.splitlines():
        if m := _TABLE_GPU.match(line):
            gpus.append(
                SmiGpu(
                    index=int(m.group("index")),
                    name=m.group("name").strip(),
                    serial=None,
                    pci_bus_id=m.group("bus"),
                    pcie_gen_current=None,
                    pcie_gen_max=None,
                    pcie_width_current=None,
                    pcie_width_max=None,
                    ecc_uncorrected_volatile=_int(m.group("ecc")),
                    remapped_rows_failure=None,
                )
            )
    if not gpus:
        raise ParseError("nvidia-smi table lists no GPUs")
    return SmiReport("table", head.group("driver"), _na(head.group("cuda")), gpus)


# --------------------------------------------------------------------------- nvlink --status

_NVL_GPU = re.compile(r"^GPU (?P<index>\d+): (?P<name>.+?) \(UUID: (?P<uuid>[^)]+)\)\s*$")
_NVL_LINK = re.compile(r"^\s+Link (?P<link>\d+): (?P<value>.+?)\s*$")


def parse_nvlink_status(text: str) -> dict[int, list[bool]]:
    """``nvidia-smi nvlink --status``: per GPU index, one entry per link, True when active.

    A link prints its speed when up and ``<inactive>`` when down; a GPU whose links are
    all down prints "Unable to retrieve NVLink information as all links are inactive".
    """
    out: dict[int, list[bool]] = {}
    current: int | None = None
    for line in text.splitlines():
        if m := _NVL_GPU.match(line):
            current = int(m.group("index"))
            out[current] = []
        elif current is not None and (m := _NVL_LINK.match(line)):
            value = m.group("value")
            if not re.match(r"^(?:\d+(?:\.\d+)?\s*GB/s|<inactive>)$", value):
                raise ParseError(f"unreadable NVLink state {value!r} for GPU {current}")
            out[current].append(value != "<inactive>")
        elif current is not None and "all links are inactive" in line:
            out[current] = []
    if not out:
        raise ParseError("no GPU in nvidia-smi nvlink --status output")
    return out


# nvidia-smi's and NVML's own failure sentences (NVIDIA driver docs and issue threads, see
# tests/fixtures/SOURCES.md); matched at the start of a line.
_TOOL_FAILURE = re.compile(
    r"^\s*(?:Unable to determine the device handle for"
    r"|NVIDIA-SMI has failed"
    r"|Failed to initialize NVML"
    r"|No devices were found"
    r"|Unable to determine the number of GPUs"
    r"|GPU access blocked by the operating system"
    r"|Driver/library version mismatch"
    r"|Unable to (?:query|retrieve|get) .*: (?:Unknown Error|GPU is lost))",
    re.IGNORECASE,
)


def parse(text: str) -> SmiReport:
    """Read nvidia-smi output: ``-q -x`` XML, ``-q`` text, or the default table."""
    for line in text.splitlines():
        if _TOOL_FAILURE.match(line):
            raise ParseError(f"nvidia-smi reported: {line.strip()[:300]}")
    stripped = text.lstrip()
    if stripped.startswith("<"):
        return _parse_xml(stripped)
    if "NVSMI LOG" in text or re.search(r"^Attached GPUs\s*:", text, re.M):
        return _parse_text(text)
    return _parse_table(text)

"""What a simulated node's GPUs and HCAs look like right now.

Every tool renders the same facts, so they are derived here once: the node's
SKU (from ``node.json``) gives the GPU model and count and the HCAs; the fault
profile (from ``fault.json``) changes exactly the values the real fault
changes. Identifiers (serials, UUIDs, GUIDs) are derived from the node name so
that repeated calls, and every tool, agree.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from dataclasses import dataclass
from pathlib import Path

from lifecycle.lab.faults import FAULT_FILE, Fault, logged_faults, read_fault

NODE_FILE = "node.json"


@dataclass(frozen=True)
class GpuModel:
    architecture: str
    memory_mib: int
    power_limit_w: int
    min_power_limit_w: int
    device_id: str
    subsystem_id: str
    pcie_gen: int
    vbios: str
    board_part: str
    max_sm_mhz: int
    mem_mhz: int
    busbw_gbps: float
    """Single-node all_reduce bus bandwidth at large sizes (8 GPUs, healthy)."""
    pcie_gbps: float
    """Host-to-device bandwidth as DCGM's PCIe test reports it at full link."""


# Facts per product name as `nvidia-smi` prints it. Bandwidths: see
# fixtures/SOURCES.md section 8 (H100 ~476 GB/s NVLS, A100 ~228 GB/s).
MODELS: dict[str, GpuModel] = {
    "NVIDIA H100 80GB HBM3": GpuModel(
        "Hopper", 81559, 700, 200, "0x233010DE", "0x16C110DE", 5, "96.00.74.00.01",
        "692-2G520-0200-000", 1980, 2619, 478.0, 55.0,
    ),
    "NVIDIA H200": GpuModel(
        "Hopper", 143771, 700, 200, "0x233510DE", "0x18BE10DE", 5, "96.00.A5.00.01",
        "692-2G520-0280-000", 1980, 3201, 480.0, 55.0,
    ),
    "NVIDIA A100-SXM4-80GB": GpuModel(
        "Ampere", 81920, 400, 100, "0x20B210DE", "0x147F10DE", 4, "92.00.36.00.02",
        "692-2G506-0212-002", 1410, 1593, 230.0, 24.0,
    ),
    "NVIDIA B200": GpuModel(
        "Blackwell", 183359, 1000, 200, "0x290110DE", "0x199910DE", 5, "97.00.0B.00.01",
        "692-2G525-0200-000", 1965, 3996, 800.0, 55.0,
    ),
    "NVIDIA GB200": GpuModel(
        "Blackwell", 189471, 1200, 200, "0x294110DE", "0x20CA10DE", 5, "97.00.1E.00.01",
        "699-2G548-1200-000", 2062, 3996, 780.0, 55.0,
    ),
}

# PCI buses of an HGX H100 board (fixtures/nvidia-smi/thamada_H100SXMx8_nvidia-smi.txt).
BUSES = (0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB)
HCA_BUSES = (0x1A, 0x3C, 0x4D, 0x5E, 0x9C, 0xBC, 0xCC, 0xDC)
RAIL_EFFICIENCY = 0.97
LOSSY_LINK_HEALTH = 0.25


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str
    model: GpuModel
    bus: int
    serial: str
    uuid: str
    lost: bool
    pcie_gen_max: int
    pcie_gen: int
    pcie_width: int
    dram_uncorrectable: int
    remap_uncorrectable: int
    remap_failure: bool
    temperature_c: int
    power_w: float

    @property
    def bus_id(self) -> str:
        return f"00000000:{self.bus:02X}:00.0"

    @property
    def reset_required(self) -> bool:
        return self.remap_failure


@dataclass(frozen=True)
class Hca:
    index: int
    ca_type: str
    vendor_part: int
    firmware: str
    rate: int
    node_guid: int
    lid: int
    up: bool
    health: float = 1.0
    """Share of the link's rate that traffic really gets (below 1: a lossy cable that still trains)."""

    @property
    def name(self) -> str:
        return f"mlx5_{self.index}"

    @property
    def data_gbytes_s(self) -> float:
        """What one rail carries for NCCL: ~97 % of the signalling rate (48.5 GB/s at NDR 400G,
        in the 46-48 GB/s per NIC that nccl-tests #290 and #319 report), times its health."""
        return self.rate / 8 * RAIL_EFFICIENCY * self.health if self.up else 0.0


@dataclass(frozen=True)
class NodeState:
    name: str
    gpu_model: str
    driver_version: str
    cuda_version: str
    booted_at: float
    fault: Fault
    gpus: tuple[Gpu, ...]
    hcas: tuple[Hca, ...]
    serial: str | None = None  # the system serial its firmware states (the inventory's), for dmidecode
    fault_at: float | None = None  # when the fault was set (its file's mtime): when the kernel logged it
    logged: tuple[tuple[float, Gpu], ...] = ()
    """GPUs as a fault a reset has since cleared left them, with when the kernel logged it: their Xid lines
    stay in the kernel log until the next boot, as a real log's do."""

    @property
    def model(self) -> GpuModel:
        return MODELS[self.gpu_model]

    @property
    def lost_gpu(self) -> Gpu | None:
        return next((g for g in self.gpus if g.lost), None)

    def busbw_factor(self) -> float:
        return 0.32 if self.fault.profile == "slow-nvlink" else 1.0


def _digest(*parts: object) -> bytes:
    return hashlib.sha256("/".join(str(p) for p in parts).encode()).digest()


def _gpu(name: str, index: int, model_name: str, fault: Fault) -> Gpu:
    model = MODELS[model_name]
    hit = fault.gpu == index
    degraded = hit and fault.profile == "pcie-degraded"
    ecc = hit and fault.profile == "ecc"
    d = _digest(name, "gpu", index)
    return Gpu(
        index=index,
        name=model_name,
        model=model,
        bus=BUSES[index % len(BUSES)] + index // len(BUSES),
        serial=str(1650000000000 + int.from_bytes(d[:4]) % 9999999),
        uuid="GPU-" + str(uuid.UUID(bytes=d[:16], version=4)),
        lost=hit and fault.profile == "xid79",
        pcie_gen_max=model.pcie_gen,
        pcie_gen=model.pcie_gen - 1 if degraded else model.pcie_gen,
        pcie_width=8 if degraded else 16,
        dram_uncorrectable=2 if ecc else 0,
        remap_uncorrectable=1 if ecc else 0,
        remap_failure=ecc,
        temperature_c=28 + d[4] % 5,
        power_w=round(model.power_limit_w * 0.11 + d[5] % 20 + d[6] / 100, 2),
    )


def _hca(name: str, index: int, rate: int, fault: Fault, ports: int) -> Hca:
    d = _digest(name, "hca", index)
    ndr = rate >= 400
    return Hca(
        index=index,
        ca_type="MT4129" if ndr else "MT4123",
        vendor_part=4129 if ndr else 4123,
        firmware="28.39.1002" if ndr else "20.39.1002",
        rate=rate,
        node_guid=(0x946DAE0300 << 24) | int.from_bytes(d[:3]),
        lid=1 + int.from_bytes(d[3:5]) % 4000,
        up=not (fault.profile == "ib-down" and fault.gpu % max(ports, 1) == index),
        health=LOSSY_LINK_HEALTH if fault.profile == "ib-slow" and fault.gpu % max(ports, 1) == index else 1.0,
    )


def load(node_dir: Path) -> NodeState:
    """The node's state as the tools see it now."""
    facts = json.loads((node_dir / NODE_FILE).read_text(encoding="utf-8"))
    fault = read_fault(node_dir)
    name = str(facts["name"])
    model_name = str(facts["gpu_model"])
    if model_name not in MODELS:
        raise SystemExit(f"gputools: unknown GPU model {model_name!r} in {node_dir / NODE_FILE}")
    ports = int(facts["ib_ports"])
    booted_at = float(facts.get("booted_at") or 0.0)
    logged = tuple((e.at, _gpu(name, e.fault.gpu, model_name, e.fault)) for e in logged_faults(node_dir)
                   if e.fault.gpu < int(facts["gpu_count"]))
    return NodeState(
        name=name,
        gpu_model=model_name,
        driver_version=str(facts.get("driver_version", "550.127.08")),
        cuda_version=str(facts.get("cuda_version", "12.4")),
        booted_at=booted_at,
        fault=fault,
        gpus=tuple(_gpu(name, i, model_name, fault) for i in range(int(facts["gpu_count"]))),
        hcas=tuple(_hca(name, i, int(facts["ib_rate_gbps"]), fault, ports) for i in range(ports)),
        serial=str(facts["serial"]) if facts.get("serial") else None,
        fault_at=_mtime(node_dir / FAULT_FILE),
        logged=logged,
    )


def _mtime(path: Path) -> float | None:
    try:
        return path.stat().st_mtime
    except FileNotFoundError:
        return None

"""The GPU-health interface the ``gpu`` and ``xid_events`` checks use, and a fake of it.

The real implementation (:mod:`burnin.nvml_pynvml`) is the only module that imports
``pynvml``; tests and the lab use :class:`FakeNvml`, whose faults are injected as
data. Every reading is optional: NVML answers "not supported" for fields a GPU
generation lacks (retired pages on Hopper, row remapping before Ampere), and the judge
decides whether a missing reading matters; the reader never invents one.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Protocol


class NvmlUnavailable(RuntimeError):
    """NVML could not be loaded or initialised (no driver, no library, no pynvml)."""


@dataclass
class GpuHealth:
    index: int
    name: str | None = None
    serial: str | None = None
    uuid: str | None = None
    pci_bus_id: str | None = None
    architecture: str | None = None
    ecc_enabled: bool | None = None
    ecc_uncorrected_volatile: int | None = None
    ecc_uncorrected_aggregate: int | None = None
    retired_pages_pending: bool | None = None
    retired_pages_dbe: int | None = None
    row_remap_pending: bool | None = None
    row_remap_failure: bool | None = None
    row_remap_uncorrectable: int | None = None
    pcie_gen_current: int | None = None
    pcie_gen_max: int | None = None
    pcie_width_current: int | None = None
    pcie_width_max: int | None = None
    throttle_reasons: list[str] | None = None
    temperature_c: float | None = None
    temperature_slowdown_c: float | None = None
    power_limit_w: float | None = None
    power_default_limit_w: float | None = None
    nvlink_active: list[bool] | None = None  # one entry per link NVML knows; None: no NVLink
    notes: list[str] = field(default_factory=list)  # fields NVML refused, with its reason


@dataclass
class GpuInventory:
    source: str  # "nvml" | "nvidia-smi"
    driver_version: str | None
    cuda_version: str | None
    library_version: str | None
    gpus: list[GpuHealth]


@dataclass(frozen=True)
class NvmlXid:
    xid: int
    pci_bus_id: str | None
    gpu_index: int | None


class XidWatch(Protocol):
    def stop(self) -> list[NvmlXid]:
        """End the watch and return every Xid seen since it began."""
        ...


class Nvml(Protocol):
    def inventory(self) -> GpuInventory:
        """Read every GPU's health once; raises NvmlUnavailable when NVML cannot be used."""
        ...

    def watch_xids(self) -> XidWatch:
        """Start collecting Xid events through NVML's event API."""
        ...


class _FakeWatch:
    def __init__(self, events: list[NvmlXid], during: threading.Event | None) -> None:
        self._events = events
        self._stopped = during

    def stop(self) -> list[NvmlXid]:
        if self._stopped is not None:
            self._stopped.set()
        return list(self._events)


@dataclass
class FakeNvml:
    """NVML as data: an inventory to return, Xids to report, or a reason it is unavailable."""

    inventory_: GpuInventory | None = None
    xids: list[NvmlXid] = field(default_factory=list)
    unavailable: str | None = None
    watch_unavailable: str | None = None

    def inventory(self) -> GpuInventory:
        if self.unavailable is not None or self.inventory_ is None:
            raise NvmlUnavailable(self.unavailable or "no inventory configured")
        return self.inventory_

    def watch_xids(self) -> XidWatch:
        if self.unavailable is not None:
            raise NvmlUnavailable(self.unavailable)
        if self.watch_unavailable is not None:
            raise NvmlUnavailable(self.watch_unavailable)
        return _FakeWatch(self.xids, None)


def healthy_gpu(index: int, model: str, *, links: int = 18, pcie_gen: int = 5) -> GpuHealth:
    """A GPU that passes a profile of that model: the starting point for fault injection."""
    return GpuHealth(
        index=index,
        name=model,
        serial=f"16501240{index:05d}",
        uuid=f"GPU-00000000-0000-0000-0000-{index:012d}",
        pci_bus_id=f"00000000:{0x18 + 0x10 * index:02X}:00.0",
        architecture="hopper",
        ecc_enabled=True,
        ecc_uncorrected_volatile=0,
        ecc_uncorrected_aggregate=0,
        row_remap_pending=False,
        row_remap_failure=False,
        row_remap_uncorrectable=0,
        pcie_gen_current=pcie_gen,
        pcie_gen_max=pcie_gen,
        pcie_width_current=16,
        pcie_width_max=16,
        throttle_reasons=[],
        temperature_c=32.0,
        temperature_slowdown_c=87.0,
        power_limit_w=700.0,
        power_default_limit_w=700.0,
        nvlink_active=[True] * links,
    )

"""A stand-in for the ``pynvml`` module: NVML's Python API shape, GPUs as data.

It exercises :mod:`burnin.nvml_pynvml` (error translation, bit decoding, unit
conversion, the event thread) where no GPU and no libnvidia-ml exist. Constants and
call signatures are those of nvidia-ml-py 13.x (checked against the installed package
in ``test_nvml.py``); values come from the saved H100 ``nvidia-smi -q`` fixture.
"""

from __future__ import annotations

import queue
from dataclasses import dataclass, field
from typing import Any


class NVMLError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value

    def __str__(self) -> str:
        return {3: "Not Supported", 10: "Timeout", 12: "NVML Shared Library Not Found"}.get(
            self.value, f"NVML error {self.value}"
        )


class NVMLError_Timeout(NVMLError):
    def __init__(self) -> None:
        super().__init__(10)


NOT_SUPPORTED = 3


@dataclass
class FakeGpu:
    name: str = "NVIDIA H100 80GB HBM3"
    serial: str = "1654423001593"
    bus: str = "00000000:18:00.0"
    arch: int = 9
    ecc: tuple[int, int] = (1, 1)
    ecc_volatile: int = 0
    ecc_aggregate: int = 0
    remapped: tuple[int, int, int, int] | None = (0, 0, 0, 0)
    pcie: tuple[int, int, int, int] = (5, 5, 16, 16)
    reasons: int = 0x1  # idle
    temp: int = 30
    slowdown: int | None = 87
    power_mw: int = 700000
    links: int = 18


@dataclass
class _Pci:
    busId: str


@dataclass
class _EventData:
    device: Any
    eventData: int
    eventType: int = 0x8


@dataclass
class FakePynvml:
    gpus: list[FakeGpu] = field(default_factory=list)
    fail_init: bool = False
    driver: str = "565.57.01"
    cuda: int = 12070
    events: queue.Queue[tuple[int, int]] = field(default_factory=queue.Queue)
    init_count: int = 0

    NVMLError = NVMLError
    NVMLError_Timeout = NVMLError_Timeout
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
    NVML_VOLATILE_ECC = 0
    NVML_AGGREGATE_ECC = 1
    NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR = 1
    NVML_TEMPERATURE_GPU = 0
    NVML_TEMPERATURE_THRESHOLD_SLOWDOWN = 1

    def nvmlInit(self) -> None:
        if self.fail_init:
            raise NVMLError(12)
        self.init_count += 1

    def nvmlShutdown(self) -> None:
        self.init_count -= 1

    def nvmlSystemGetDriverVersion(self) -> str:
        return self.driver

    def nvmlSystemGetCudaDriverVersion_v2(self) -> int:
        return self.cuda

    def nvmlSystemGetNVMLVersion(self) -> str:
        return "12." + self.driver

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> FakeGpu:
        return self.gpus[i]

    def nvmlDeviceGetIndex(self, h: FakeGpu) -> int:
        return self.gpus.index(h)

    def nvmlDeviceGetName(self, h: FakeGpu) -> bytes:
        return h.name.encode()  # older pynvml returned bytes; the adapter must cope

    def nvmlDeviceGetSerial(self, h: FakeGpu) -> str:
        return h.serial

    def nvmlDeviceGetUUID(self, h: FakeGpu) -> str:
        return "GPU-" + h.serial

    def nvmlDeviceGetPciInfo(self, h: FakeGpu) -> _Pci:
        return _Pci(h.bus)

    def nvmlDeviceGetArchitecture(self, h: FakeGpu) -> int:
        return h.arch

    def nvmlDeviceGetEccMode(self, h: FakeGpu) -> tuple[int, int]:
        return h.ecc

    def nvmlDeviceGetTotalEccErrors(self, h: FakeGpu, kind: int, counter: int) -> int:
        return h.ecc_volatile if counter == self.NVML_VOLATILE_ECC else h.ecc_aggregate

    def nvmlDeviceGetRetiredPagesPendingStatus(self, h: FakeGpu) -> int:
        if h.arch >= 9:
            raise NVMLError(NOT_SUPPORTED)  # Hopper reports row remapping instead
        return 0

    def nvmlDeviceGetRetiredPages(self, h: FakeGpu, cause: int) -> list[int]:
        if h.arch >= 9:
            raise NVMLError(NOT_SUPPORTED)
        return []

    def nvmlDeviceGetRemappedRows(self, h: FakeGpu) -> tuple[int, int, int, int]:
        if h.remapped is None:
            raise NVMLError(NOT_SUPPORTED)
        return h.remapped

    def nvmlDeviceGetCurrPcieLinkGeneration(self, h: FakeGpu) -> int:
        return h.pcie[0]

    def nvmlDeviceGetMaxPcieLinkGeneration(self, h: FakeGpu) -> int:
        return h.pcie[1]

    def nvmlDeviceGetCurrPcieLinkWidth(self, h: FakeGpu) -> int:
        return h.pcie[2]

    def nvmlDeviceGetMaxPcieLinkWidth(self, h: FakeGpu) -> int:
        return h.pcie[3]

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: FakeGpu) -> int:
        return h.reasons

    def nvmlDeviceGetTemperature(self, h: FakeGpu, sensor: int) -> int:
        return h.temp

    def nvmlDeviceGetTemperatureThreshold(self, h: FakeGpu, kind: int) -> int:
        if h.slowdown is None:
            raise NVMLError(NOT_SUPPORTED)
        return h.slowdown

    def nvmlDeviceGetEnforcedPowerLimit(self, h: FakeGpu) -> int:
        return h.power_mw

    def nvmlDeviceGetPowerManagementDefaultLimit(self, h: FakeGpu) -> int:
        return 700000

    def nvmlDeviceGetNvLinkState(self, h: FakeGpu, link: int) -> int:
        if h.links == 0 or link >= 18:
            raise NVMLError(NOT_SUPPORTED)
        return 1 if link < h.links else 0

    def nvmlEventSetCreate(self) -> object:
        return object()

    def nvmlDeviceRegisterEvents(self, h: FakeGpu, mask: int, event_set: object) -> None:
        return None

    def nvmlEventSetWait_v2(self, event_set: object, timeout_ms: int) -> _EventData:
        try:
            index, xid = self.events.get(timeout=timeout_ms / 1000.0 / 50)
        except queue.Empty:
            raise NVMLError_Timeout() from None
        return _EventData(self.gpus[index], xid)

    def nvmlEventSetFree(self, event_set: object) -> None:
        return None

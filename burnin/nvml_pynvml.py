"""The real :class:`burnin.nvml.Nvml`, over ``pynvml`` (package ``nvidia-ml-py``).

This is the only module that imports pynvml. NVML errors are translated here, once:
"not supported" for a field becomes ``None`` (with a note saying why), and a failure to
load or initialise the library becomes :class:`NvmlUnavailable`, which the check turns
into an ``error`` verdict.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar

from burnin.nvml import GpuHealth, GpuInventory, NvmlUnavailable, NvmlXid

T = TypeVar("T")

# nvmlClocksEventReason* bits (nvml.h); names follow nvidia-smi's "Clocks Event Reasons".
_THROTTLE_BITS = {
    0x0000000000000004: "sw_power_cap",
    0x0000000000000008: "hw_slowdown",
    0x0000000000000020: "sw_thermal_slowdown",
    0x0000000000000040: "hw_thermal_slowdown",
    0x0000000000000080: "hw_power_brake_slowdown",
}
# nvmlDeviceArchitecture_t values (nvml.h).
_ARCH = {2: "kepler", 3: "maxwell", 4: "pascal", 5: "volta", 6: "turing", 7: "ampere",
         8: "ada", 9: "hopper", 10: "blackwell"}
_XID_EVENT = 0x0000000000000008  # nvmlEventTypeXidCriticalError
_MAX_LINKS = 18  # NVML_NVLINK_MAX_LINKS


def _load() -> Any:
    try:
        import pynvml
    except ImportError as exc:
        raise NvmlUnavailable("pynvml (nvidia-ml-py) is not installed") from exc
    return pynvml


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class PynvmlNvml:
    def __init__(self, module: Any = None) -> None:
        self._nv = module if module is not None else _load()

    def _init(self) -> None:
        try:
            self._nv.nvmlInit()
        except self._nv.NVMLError as exc:
            raise NvmlUnavailable(f"nvmlInit failed: {exc}") from exc

    def _read(self, notes: list[str], what: str, fn: Callable[[], T]) -> T | None:
        try:
            return fn()
        except self._nv.NVMLError as exc:
            notes.append(f"{what}: {exc}")
            return None

    def inventory(self) -> GpuInventory:
        nv = self._nv
        self._init()
        try:
            notes: list[str] = []
            driver = self._read(notes, "driver", lambda: _text(nv.nvmlSystemGetDriverVersion()))
            cuda_int = self._read(notes, "cuda", nv.nvmlSystemGetCudaDriverVersion_v2)
            cuda = f"{cuda_int // 1000}.{cuda_int % 1000 // 10}" if cuda_int else None
            lib = self._read(notes, "nvml", lambda: _text(nv.nvmlSystemGetNVMLVersion()))
            try:
                count = nv.nvmlDeviceGetCount()
            except nv.NVMLError as exc:
                raise NvmlUnavailable(f"nvmlDeviceGetCount failed: {exc}") from exc
            gpus = [self._gpu(i) for i in range(count)]
            return GpuInventory("nvml", driver, cuda, lib, gpus)
        finally:
            nv.nvmlShutdown()

    def _gpu(self, index: int) -> GpuHealth:
        nv = self._nv
        g = GpuHealth(index=index)
        try:
            h = nv.nvmlDeviceGetHandleByIndex(index)
        except nv.NVMLError as exc:
            g.notes.append(f"handle: {exc}")
            return g
        r = g.notes
        g.name = self._read(r, "name", lambda: _text(nv.nvmlDeviceGetName(h)))
        g.serial = self._read(r, "serial", lambda: _text(nv.nvmlDeviceGetSerial(h)))
        g.uuid = self._read(r, "uuid", lambda: _text(nv.nvmlDeviceGetUUID(h)))
        g.pci_bus_id = self._read(r, "pci", lambda: _text(nv.nvmlDeviceGetPciInfo(h).busId))
        arch = self._read(r, "architecture", lambda: nv.nvmlDeviceGetArchitecture(h))
        g.architecture = _ARCH.get(arch) if arch is not None else None
        ecc = self._read(r, "ecc mode", lambda: nv.nvmlDeviceGetEccMode(h))
        g.ecc_enabled = bool(ecc[0]) if ecc is not None else None
        unc = nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
        g.ecc_uncorrected_volatile = self._read(
            r, "ecc volatile", lambda: int(nv.nvmlDeviceGetTotalEccErrors(h, unc, nv.NVML_VOLATILE_ECC))
        )
        g.ecc_uncorrected_aggregate = self._read(
            r, "ecc aggregate", lambda: int(nv.nvmlDeviceGetTotalEccErrors(h, unc, nv.NVML_AGGREGATE_ECC))
        )
        pending = self._read(r, "retired pages", lambda: nv.nvmlDeviceGetRetiredPagesPendingStatus(h))
        g.retired_pages_pending = bool(pending) if pending is not None else None
        dbe = self._read(
            r,
            "retired pages dbe",
            lambda: nv.nvmlDeviceGetRetiredPages(h, nv.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR),
        )
        g.retired_pages_dbe = len(dbe) if dbe is not None else None
        remap = self._read(r, "row remapping", lambda: nv.nvmlDeviceGetRemappedRows(h))
        if remap is not None:
            g.row_remap_uncorrectable = int(remap[1])
            g.row_remap_pending = bool(remap[2])
            g.row_remap_failure = bool(remap[3])
        g.pcie_gen_current = self._read(r, "pcie gen", lambda: int(nv.nvmlDeviceGetCurrPcieLinkGeneration(h)))
        g.pcie_gen_max = self._read(r, "pcie gen max", lambda: int(nv.nvmlDeviceGetMaxPcieLinkGeneration(h)))
        g.pcie_width_current = self._read(r, "pcie width", lambda: int(nv.nvmlDeviceGetCurrPcieLinkWidth(h)))
        g.pcie_width_max = self._read(r, "pcie width max", lambda: int(nv.nvmlDeviceGetMaxPcieLinkWidth(h)))
        reasons_fn = (
            getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None)
            or nv.nvmlDeviceGetCurrentClocksThrottleReasons
        )
        mask = self._read(r, "clock event reasons", lambda: int(reasons_fn(h)))
        g.throttle_reasons = (
            [name for bit, name in _THROTTLE_BITS.items() if mask & bit] if mask is not None else None
        )
        g.temperature_c = self._read(
            r, "temperature", lambda: float(nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU))
        )
        g.temperature_slowdown_c = self._read(
            r,
            "slowdown threshold",
            lambda: float(
                nv.nvmlDeviceGetTemperatureThreshold(h, nv.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN)
            ),
        )
        g.power_limit_w = self._read(r, "power limit", lambda: nv.nvmlDeviceGetEnforcedPowerLimit(h) / 1000.0)
        g.power_default_limit_w = self._read(
            r, "default power limit", lambda: nv.nvmlDeviceGetPowerManagementDefaultLimit(h) / 1000.0
        )
        g.nvlink_active = self._links(h, r)
        return g

    def _links(self, h: object, notes: list[str]) -> list[bool] | None:
        nv = self._nv
        links: list[bool] = []
        for link in range(_MAX_LINKS):
            try:
                links.append(bool(nv.nvmlDeviceGetNvLinkState(h, link)))
            except nv.NVMLError as exc:
                if not links:
                    notes.append(f"nvlink: {exc}")
                    return None
                break  # past the last link this GPU has
        return links

    def watch_xids(self) -> _PynvmlWatch:
        self._init()
        return _PynvmlWatch(self._nv)


class _PynvmlWatch:
    """Collect Xid events on a thread until stopped (nvmlEventSetWait with a short timeout)."""

    def __init__(self, nv: Any) -> None:
        self._nv = nv
        self._events: list[NvmlXid] = []
        self._stop = threading.Event()
        self._set = nv.nvmlEventSetCreate()
        registered = 0
        for i in range(nv.nvmlDeviceGetCount()):
            h = nv.nvmlDeviceGetHandleByIndex(i)
            try:
                nv.nvmlDeviceRegisterEvents(h, _XID_EVENT, self._set)
                registered += 1
            except nv.NVMLError:
                continue
        if registered == 0:
            nv.nvmlEventSetFree(self._set)
            nv.nvmlShutdown()
            raise NvmlUnavailable("no GPU accepts Xid event registration")
        self._thread = threading.Thread(target=self._loop, name="burnin-xid-watch", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        nv = self._nv
        wait = getattr(nv, "nvmlEventSetWait_v2", None) or nv.nvmlEventSetWait
        while not self._stop.is_set():
            try:
                data = wait(self._set, 500)
            except nv.NVMLError:
                continue  # timeout (the common case) or a transient wait error
            try:
                bus: str | None = _text(nv.nvmlDeviceGetPciInfo(data.device).busId)
                index: int | None = int(nv.nvmlDeviceGetIndex(data.device))
            except nv.NVMLError:
                bus, index = None, None
            self._events.append(NvmlXid(int(data.eventData), bus, index))

    def stop(self) -> list[NvmlXid]:
        self._stop.set()
        self._thread.join(timeout=5)
        try:
            self._nv.nvmlEventSetFree(self._set)
        finally:
            self._nv.nvmlShutdown()
        return list(self._events)

"""GPU stress and bandwidth check whose results are *verified*, not just timed.

gpu-burn's known flaw is exiting 0 when the GPU computed wrong answers; DCGM may not
be installed on a fresh node. This check measures host↔device copy bandwidth (pinned
memory), device-memory (HBM) copy bandwidth and bf16 GEMM throughput, and it proves
the numbers came from correct work:

* every copy is compared bit for bit with its source;
* the first GEMM is checked against a float64 CPU reference on sampled rows, so a GPU
  that is consistently wrong fails too;
* every soak iteration is compared on the device with the first result (cuBLAS is
  bitwise reproducible for the same shapes on the same GPU), counting mismatches
  without a host round-trip per iteration.

torch is imported only when the check runs; without torch or a CUDA device the check
raises :class:`StressUnavailable` and the runner records an ``error`` verdict.
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any


class StressUnavailable(RuntimeError):
    """torch is not installed, or it sees no GPU."""


@dataclass
class GpuStressResult:
    index: int
    name: str
    h2d_gbps: float | None = None
    d2h_gbps: float | None = None
    hbm_gbps: float | None = None
    copy_verified: bool = False
    gemm_tflops: float | None = None
    gemm_iterations: int = 0
    gemm_mismatches: int = 0
    gemm_reference_ok: bool = False
    gemm_reference_max_rel_error: float | None = None
    soak_seconds: float = 0.0
    errors: list[str] = field(default_factory=list)


@dataclass
class StressReport:
    torch_version: str | None
    cuda_version: str | None
    device_type: str
    dtype: str
    gemm_size: int
    copy_bytes: int
    gpus: list[GpuStressResult]


def import_torch() -> Any:
    try:
        with warnings.catch_warnings():
            # CPU wheels warn at import when NumPy is absent; irrelevant here.
            warnings.simplefilter("ignore")
            import torch
    except ImportError as exc:
        raise StressUnavailable("torch is not installed") from exc
    return torch


class _Timer:
    """CUDA events on a GPU, the wall clock on the CPU (tests)."""

    def __init__(self, torch: Any, device: Any) -> None:
        self.torch, self.device = torch, device
        self.cuda = device.type == "cuda"

    def sync(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize(self.device)

    def time(self, fn: Callable[[], None], reps: int) -> float:
        """Best seconds per call over ``reps`` calls."""
        best = math.inf
        for _ in range(reps):
            if self.cuda:
                start = self.torch.cuda.Event(enable_timing=True)
                end = self.torch.cuda.Event(enable_timing=True)
                start.record()
                fn()
                end.record()
                end.synchronize()
                best = min(best, start.elapsed_time(end) / 1000.0)
            else:
                t0 = time.perf_counter()
                fn()
                best = min(best, time.perf_counter() - t0)
        return max(best, 1e-9)


def _copies(torch: Any, dev: Any, timer: _Timer, nbytes: int, r: GpuStressResult) -> None:
    n = nbytes // 4
    pin = dev.type == "cuda"
    src = torch.arange(n, dtype=torch.int32)
    src = src.pin_memory() if pin else src
    back = torch.empty_like(src).pin_memory() if pin else torch.empty_like(src)
    on_dev = torch.empty(n, dtype=torch.int32, device=dev)
    on_dev2 = torch.empty_like(on_dev)
    on_dev.copy_(src)  # warm-up
    timer.sync()
    r.h2d_gbps = nbytes / timer.time(lambda: on_dev.copy_(src, non_blocking=True), 5) / 1e9
    r.d2h_gbps = nbytes / timer.time(lambda: back.copy_(on_dev, non_blocking=True), 5) / 1e9
    # A device copy reads and writes every byte: count both, as nvbandwidth does.
    r.hbm_gbps = 2 * nbytes / timer.time(lambda: on_dev2.copy_(on_dev), 10) / 1e9
    timer.sync()
    r.copy_verified = bool(torch.equal(back, src)) and bool(torch.equal(on_dev2, on_dev))


def reference_check(torch: Any, a: Any, b: Any, c: Any, rows: list[int]) -> tuple[bool, float]:
    """Compare sampled rows of a bf16 GEMM with a float64 CPU product of the same inputs.

    bf16 inputs are exact in float64 and the GPU accumulates in fp32, so the
    difference is bf16 rounding of the output (2^-8 relative) plus accumulation
    error; a tolerance of 1e-2 relative plus 2e-2 of the rows' RMS catches corruption
    (a flipped exponent bit, a wrong tile) without tripping on rounding.
    """
    a64 = a[rows].to("cpu", torch.float64)
    ref = a64 @ b.to("cpu", torch.float64)
    got = c[rows].to("cpu", torch.float64)
    if not bool(torch.isfinite(got).all()):
        return False, math.inf
    rms = float(ref.pow(2).mean().sqrt()) or 1.0
    diff = (got - ref).abs()
    ok = bool((diff <= 1e-2 * ref.abs() + 2e-2 * rms).all())
    return ok, float(diff.max()) / rms


def _gemm(
    torch: Any,
    dev: Any,
    timer: _Timer,
    n: int,
    seconds: float,
    r: GpuStressResult,
    matmul: Callable[[Any, Any, Any], Any],
    clock: Callable[[], float],
) -> None:
    gen = torch.Generator(device="cpu").manual_seed(20240601 + r.index)
    a = torch.randn(n, n, generator=gen).to(torch.bfloat16)
    b = torch.randn(n, n, generator=gen).to(torch.bfloat16)
    a_dev, b_dev = a.to(dev), b.to(dev)
    first = torch.empty(n, n, dtype=torch.bfloat16, device=dev)
    out = torch.empty_like(first)
    matmul(a_dev, b_dev, first)
    timer.sync()
    rows = sorted({0, n // 3, n // 2, n - 1})
    r.gemm_reference_ok, r.gemm_reference_max_rel_error = reference_check(torch, a, b, first, rows)
    per_call = timer.time(lambda: matmul(a_dev, b_dev, out), 10)
    r.gemm_tflops = 2 * n**3 / per_call / 1e12
    bad = torch.zeros((), dtype=torch.int64, device=dev)
    t0 = clock()
    iterations = 0
    while True:
        matmul(a_dev, b_dev, out)
        bad += (out != first).any()
        iterations += 1
        if iterations % 16 == 0 or clock() - t0 >= seconds:
            timer.sync()
            if clock() - t0 >= seconds:
                break
    r.gemm_iterations = iterations
    r.gemm_mismatches = int(bad.item())
    r.soak_seconds = clock() - t0


def _one(
    torch: Any, dev: Any, index: int, seconds: float, n: int, nbytes: int,
    matmul: Callable[[Any, Any, Any], Any], clock: Callable[[], float],
) -> GpuStressResult:
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"
    r = GpuStressResult(index=index, name=name)
    timer = _Timer(torch, dev)
    steps: list[Callable[[], None]] = [
        lambda: _copies(torch, dev, timer, nbytes, r),
        lambda: _gemm(torch, dev, timer, n, seconds, r, matmul, clock),
    ]
    for step in steps:
        try:
            step()
        except RuntimeError as exc:  # CUDA errors, OOM: torch raises RuntimeError subclasses
            r.errors.append(f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}")
    return r


def run(
    seconds: float,
    gemm_size: int,
    *,
    copy_bytes: int = 1 << 30,
    device_type: str = "cuda",
    torch_module: Any = None,
    matmul: Callable[[Any, Any, Any], Any] | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> StressReport:
    """Stress every visible GPU at once (one thread each) for ``seconds`` of GEMM soak."""
    torch = torch_module if torch_module is not None else import_torch()
    if device_type == "cuda":
        if not torch.cuda.is_available():
            raise StressUnavailable("torch sees no CUDA device")
        devices = [torch.device("cuda", i) for i in range(torch.cuda.device_count())]
    else:
        devices = [torch.device(device_type)]
    mm = matmul or (lambda a, b, out: torch.matmul(a, b, out=out))
    with ThreadPoolExecutor(max_workers=len(devices)) as pool:
        futures = [
            pool.submit(_one, torch, dev, i, seconds, gemm_size, copy_bytes, mm, clock)
            for i, dev in enumerate(devices)
        ]
        gpus: list[GpuStressResult] = [f.result() for f in futures]
    return StressReport(
        torch_version=str(torch.__version__),
        cuda_version=getattr(torch.version, "cuda", None),
        device_type=device_type,
        dtype="bfloat16",
        gemm_size=gemm_size,
        copy_bytes=copy_bytes,
        gpus=gpus,
    )

"""The pynvml adapter (against a pynvml-shaped fake and the real package) and the GPU stress check.

The stress check runs here on torch's CPU build, small: what is tested is the
verification (copies compared bit for bit, GEMM against a float64 reference and
against its first result), not speed.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from fake_pynvml import FakeGpu, FakePynvml

from burnin import gpu_stress
from burnin.nvml import NvmlUnavailable
from burnin.nvml_pynvml import PynvmlNvml


def test_pynvml_fake_mirrors_the_real_package() -> None:
    import pynvml

    fake = FakePynvml()
    for name in dir(fake):
        if name.startswith(("nvml", "NVML_")):
            assert hasattr(pynvml, name), name
            if name.startswith("NVML_"):
                assert getattr(pynvml, name) == getattr(fake, name), name


def test_real_pynvml_without_a_driver_is_unavailable() -> None:
    # No libnvidia-ml on this machine: the adapter must say so, not crash.
    with pytest.raises(NvmlUnavailable, match="nvmlInit failed"):
        PynvmlNvml().inventory()
    with pytest.raises(NvmlUnavailable):
        PynvmlNvml().watch_xids()


def test_adapter_reads_every_field() -> None:
    nv = FakePynvml(gpus=[FakeGpu(), FakeGpu(serial="1654223054577", bus="00000000:2A:00.0",
                                             reasons=0x8 | 0x80, links=16, remapped=(0, 1, 1, 0),
                                             slowdown=None, power_mw=500000)])
    inv = PynvmlNvml(nv).inventory()
    assert (inv.source, inv.driver_version, inv.cuda_version, len(inv.gpus)) == ("nvml", "565.57.01", "12.7", 2)
    a, b = inv.gpus
    assert (a.name, a.serial, a.architecture, a.ecc_enabled) == ("NVIDIA H100 80GB HBM3", "1654423001593", "hopper", True)
    assert (a.pcie_gen_current, a.pcie_gen_max, a.pcie_width_current, a.pcie_width_max) == (5, 5, 16, 16)
    assert a.throttle_reasons == [] and a.nvlink_active == [True] * 18
    assert (a.retired_pages_pending, a.row_remap_pending, a.row_remap_failure) == (None, False, False)
    assert any(n.startswith("retired pages: Not Supported") for n in a.notes)
    assert b.throttle_reasons == ["hw_slowdown", "hw_power_brake_slowdown"]
    assert (b.row_remap_pending, b.row_remap_uncorrectable) == (True, 1)
    assert b.nvlink_active == [True] * 16 + [False] * 2
    assert (b.temperature_slowdown_c, b.power_limit_w) == (None, 500.0)
    assert nv.init_count == 0  # every nvmlInit was matched by nvmlShutdown


def test_adapter_without_nvlink_and_failed_init() -> None:
    inv = PynvmlNvml(FakePynvml(gpus=[FakeGpu(links=0, arch=7, remapped=None)])).inventory()
    g = inv.gpus[0]
    assert g.nvlink_active is None and g.architecture == "ampere"
    assert (g.retired_pages_pending, g.retired_pages_dbe, g.row_remap_pending) == (False, 0, None)
    with pytest.raises(NvmlUnavailable, match="Shared Library Not Found"):
        PynvmlNvml(FakePynvml(fail_init=True)).inventory()


def test_xid_event_watch() -> None:
    nv = FakePynvml(gpus=[FakeGpu(), FakeGpu(bus="00000000:2A:00.0")])
    watch = PynvmlNvml(nv).watch_xids()
    nv.events.put((1, 79))
    nv.events.put((0, 13))
    deadline = time.monotonic() + 10
    while not nv.events.empty() and time.monotonic() < deadline:
        time.sleep(0.01)
    events = watch.stop()
    assert [(e.xid, e.pci_bus_id, e.gpu_index) for e in events] == [(79, "00000000:2A:00.0", 1),
                                                                    (13, "00000000:18:00.0", 0)]
    assert nv.init_count == 0


# --------------------------------------------------------------------------- GPU stress (torch CPU)


def _cpu(**kw: object) -> gpu_stress.GpuStressResult:
    report = gpu_stress.run(0.05, 64, copy_bytes=1 << 16, device_type="cpu", **kw)  # type: ignore[arg-type]
    assert report.device_type == "cpu" and report.dtype == "bfloat16"
    (g,) = report.gpus
    return g


def test_stress_verifies_a_correct_device() -> None:
    g = _cpu()
    assert g.copy_verified and g.gemm_reference_ok and g.gemm_mismatches == 0 and g.errors == []
    assert g.gemm_iterations > 0 and g.gemm_tflops and g.h2d_gbps and g.hbm_gbps
    assert g.gemm_reference_max_rel_error is not None and g.gemm_reference_max_rel_error < 0.02


def test_stress_catches_one_corrupted_soak_iteration() -> None:
    torch = gpu_stress.import_torch()
    calls = [0]

    def flaky(a: object, b: object, out: object) -> None:
        torch.matmul(a, b, out=out)
        calls[0] += 1
        if calls[0] == 14:  # after the reference (1) and the timed calls (2-11)
            out[5, 5] += 1  # type: ignore[index]

    ticks = iter(range(10_000))
    g = _cpu(matmul=flaky, clock=lambda: next(ticks) * 0.001)
    assert g.gemm_mismatches == 1 and g.gemm_reference_ok


def test_stress_catches_a_consistently_wrong_device() -> None:
    torch = gpu_stress.import_torch()
    g = _cpu(matmul=lambda a, b, out: torch.matmul(a * 1.02, b, out=out))
    assert not g.gemm_reference_ok and g.gemm_mismatches == 0  # self-consistent, but wrong
    g = _cpu(matmul=lambda a, b, out: out.copy_(torch.full_like(out, float("nan"))))
    assert not g.gemm_reference_ok and g.gemm_reference_max_rel_error == float("inf")


def test_stress_without_cuda_or_torch_is_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(gpu_stress.StressUnavailable, match="no CUDA device"):
        gpu_stress.run(1, 64)  # CPU-only torch here

    def no_torch() -> object:
        raise gpu_stress.StressUnavailable("torch is not installed")

    monkeypatch.setattr(gpu_stress, "import_torch", no_torch)
    with pytest.raises(gpu_stress.StressUnavailable, match="not installed"):
        gpu_stress.run(1, 64)


def test_device_script_is_prepared(repo_dir: Path) -> None:
    script = (repo_dir / "scripts" / "device-burnin.sh").read_text()
    assert "-m burnin run --profile h200-sxm-8 --level quick" in script
    assert "$OUT" in script

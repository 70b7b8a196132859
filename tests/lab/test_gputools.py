"""Each fault profile makes the fake tools say what the real tools say for that fault.

Assertions are on values parsed by the burn-in parsers (the code that reads
real nodes' output), never on string equality.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Callable

import pytest

from burnin.parsers import ParseError, dcgm, infiniband, nccl, nvidia_smi, xid
from lifecycle.lab.faults import Fault, clear_faults
from lifecycle.lab.gputools.cli import run
from lifecycle.lab.gputools.state import BUSES
from lifecycle.lab.node import SimNode
from lifecycle.model.procs import pid_start

MakeNode = Callable[..., SimNode]

HIT = 2  # the GPU (or IB port) the fault hits in these tests


def tool(node: SimNode, name: str, *args: str) -> tuple[str, int]:
    return run(name, list(args), node.dir)


def smi_all(node: SimNode) -> list[nvidia_smi.SmiReport]:
    """The same facts through -q, -q -x and the summary table."""
    out = []
    for args in (("-q",), ("-q", "-x"), ()):
        text, rc = tool(node, "nvidia-smi", *args)
        assert rc == 0, text
        out.append(nvidia_smi.parse(text))
    return out


def csv_rows(node: SimNode, fields: str) -> list[dict[str, str]]:
    text, rc = tool(node, "nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader,nounits")
    assert rc == 0, text
    names = fields.split(",")
    return [dict(zip(names, (v.strip() for v in line.split(",")), strict=True))
            for line in text.splitlines() if line.strip()]


def allreduce(node: SimNode) -> nccl.NcclReport:
    text, rc = tool(node, "all_reduce_perf", "-b", "8", "-e", "8G", "-f", "2", "-g", "8")
    assert rc == 0, text
    return nccl.parse(text, "all_reduce")


def diag(node: SimNode, level: int) -> tuple[dcgm.DcgmReport, int]:
    text, rc = tool(node, "dcgmi", "diag", "-r", str(level), "-j")
    return dcgm.parse(text), rc


def failing_tests(report: dcgm.DcgmReport) -> dict[str, list[int]]:
    return {t.name: sorted(int(g) for g, r in t.gpus.items() if r == "fail") for t in report.tests
            if t.result == "fail"}


def test_healthy_node_passes_everything(make_node: MakeNode) -> None:
    node = make_node()
    for report in smi_all(node):
        assert len(report.gpus) == 8
        assert {g.name for g in report.gpus} == {"NVIDIA H100 80GB HBM3"}
        assert all(g.ecc_uncorrected_volatile == 0 for g in report.gpus)
        assert len({g.pci_bus_id for g in report.gpus}) == 8
    q = smi_all(node)[0]
    assert all((g.pcie_gen_current, g.pcie_width_current) == (5, 16) for g in q.gpus)
    assert all(g.remapped_rows_failure is False for g in q.gpus)
    assert {g.uuid for g in q.gpus} == {g.uuid for g in smi_all(node)[1].gpus}
    rows = csv_rows(node, "index,name,memory.total,pcie.link.gen.current")
    assert [int(r["index"]) for r in rows] == list(range(8))
    assert all(int(r["memory.total"]) == 81559 for r in rows)
    for level in (1, 2, 3):
        verdict, rc = diag(node, level)
        assert verdict.passed and rc == 0
        assert verdict.failed_gpus == []
    assert any(t.name == "Targeted Power" for t in diag(node, 3)[0].tests)
    assert not any(t.name == "Targeted Power" for t in diag(node, 2)[0].tests)
    ar = allreduce(node)
    assert ar.complete and ar.ranks == 8 and ar.wrong_results == 0
    assert 450 <= ar.peak_busbw <= 500  # H100 NVLS: ~476 GB/s (fixtures/SOURCES.md section 8)
    big = next(r for r in ar.rows if r.size_bytes == 128 * 1024**2)
    assert 350 <= big.busbw_oop <= 430  # the capture shows 383 GB/s at 128 MiB
    ib = infiniband.parse(tool(node, "ibstat")[0])
    assert len(ib.cas) == 8
    assert all(p.state == "Active" and p.rate_gbps == 400 for ca in ib.cas for p in ca.ports)
    assert xid.parse(tool(node, "dmesg", "-T")[0]).events == []


def test_xid79_gpu_has_fallen_off_the_bus(make_node: MakeNode) -> None:
    node = make_node(fault=Fault("xid79", HIT))
    for args in (("-q",), ("-q", "-x"), (), ("--query-gpu=index", "--format=csv")):
        text, rc = tool(node, "nvidia-smi", *args)
        assert rc == 15
        with pytest.raises(ParseError):
            nvidia_smi.parse(text)
    events = xid.parse(tool(node, "dmesg")[0]).events
    assert [e.xid for e in events] == [79]
    assert events[0].bucket == "RESTART_BM"
    assert events[0].pci.endswith(f"{BUSES[HIT]:02x}:00")  # the kernel names the lost GPU's bus
    report, rc = diag(node, 3)
    assert not report.passed and rc != 0
    assert report.failed_gpus == [HIT]
    text, rc = tool(node, "all_reduce_perf", "-b", "8", "-e", "1M", "-f", "2", "-g", "8")
    assert rc != 0
    with pytest.raises(ParseError, match="CUDA failure"):
        nccl.parse(text)


def test_ecc_uncorrectable_and_row_remap_failure(make_node: MakeNode) -> None:
    node = make_node(fault=Fault("ecc", HIT))
    for report in smi_all(node):
        bad = [g.index for g in report.gpus if g.ecc_uncorrected_volatile]
        assert bad == [HIT]
    for report in smi_all(node)[:2]:
        assert [g.index for g in report.gpus if g.remapped_rows_failure] == [HIT]
        assert report.gpus[HIT].ecc_uncorrected_aggregate
    rows = csv_rows(node, "index,ecc.errors.uncorrected.volatile.total,remapped_rows.failure")
    assert [int(r["index"]) for r in rows if r["remapped_rows.failure"] == "Yes"] == [HIT]
    assert int(rows[HIT]["ecc.errors.uncorrected.volatile.total"]) > 0
    codes = [e.xid for e in xid.parse(tool(node, "dmesg", "--time-format", "iso")[0]).events]
    assert codes == [48, 64]
    r1, _ = diag(node, 1)
    assert "Page Retirement/Row Remap" in failing_tests(r1)
    r2, rc = diag(node, 2)
    assert failing_tests(r2)["GPU Memory"] == [HIT] and rc != 0
    text, rc = tool(node, "all_reduce_perf", "-g", "8")
    assert rc != 0 and "ECC" in text


def test_pcie_degraded_gen5_x16_to_gen4_x8(make_node: MakeNode) -> None:
    node = make_node(fault=Fault("pcie-degraded", HIT))
    for report in smi_all(node)[:2]:
        links = {g.index: (g.pcie_gen_current, g.pcie_width_current) for g in report.gpus}
        assert links.pop(HIT) == (4, 8)
        assert set(links.values()) == {(5, 16)}
        assert report.gpus[HIT].pcie_gen_max == 5 and report.gpus[HIT].pcie_width_max == 16
    rows = csv_rows(node, "pcie.link.gen.current,pcie.link.width.current,pcie.link.gen.max")
    assert (int(rows[HIT]["pcie.link.gen.current"]), int(rows[HIT]["pcie.link.width.current"])) == (4, 8)
    r2, _ = diag(node, 2)
    assert failing_tests(r2) == {"PCIe": [HIT]}
    kernel = tool(node, "dmesg")[0]
    limited = re.findall(r"limited by (\d+\.\d) GT/s PCIe x(\d+) link", kernel)
    assert limited == [("16.0", "8")]
    assert allreduce(node).peak_busbw > 450  # NVLink traffic does not cross PCIe


def test_slow_nvlink_lowers_busbw_only(make_node: MakeNode) -> None:
    healthy = allreduce(make_node())
    slow = allreduce(make_node(fault=Fault("slow-nvlink")))
    assert slow.complete and slow.wrong_results == 0
    assert slow.peak_busbw < 0.4 * healthy.peak_busbw
    assert slow.avg_busbw is not None and healthy.avg_busbw is not None
    assert slow.avg_busbw < 0.4 * healthy.avg_busbw
    node = make_node(fault=Fault("slow-nvlink"))
    assert diag(node, 3)[0].passed
    for name in ("all_gather_perf", "reduce_scatter_perf", "alltoall_perf"):
        text, rc = tool(node, name, "-b", "1G", "-e", "1G", "-g", "8")
        assert rc == 0
        assert nccl.parse(text, name).peak_busbw < 200


def test_ib_port_down(make_node: MakeNode) -> None:
    node = make_node(fault=Fault("ib-down", HIT))
    for name, args in (("ibstat", ()), ("ibv_devinfo", ("-v",))):
        report = infiniband.parse(tool(node, name, *args)[0])
        states = {ca.name: (ca.ports[0].state, ca.ports[0].physical_state) for ca in report.cas}
        assert states.pop(f"mlx5_{HIT}") == ("Down", "Disabled"), name
        assert set(states.values()) == {("Active", "LinkUp")}, name
    assert smi_all(node)[0].gpus[HIT].pcie_width_current == 16


def test_dcgm_targeted_power_failure(make_node: MakeNode) -> None:
    node = make_node(fault=Fault("dcgm-power", HIT))
    assert diag(node, 1)[0].passed and diag(node, 2)[0].passed
    r3, rc = diag(node, 3)
    assert not r3.passed and rc != 0
    assert failing_tests(r3) == {"Targeted Power": [HIT]}
    power = next(t for t in r3.tests if t.name == "Targeted Power")
    achieved, minimum = map(float, re.findall(r"Max power of ([\d.]+) did not reach .*? of ([\d.]+)",
                                              power.details)[0])
    assert achieved < minimum == pytest.approx(0.75 * 699, abs=0.1)  # target = TDP - 1 W
    text, _ = tool(node, "dcgmi", "diag", "-r", "3")
    table = dcgm.parse(text)
    assert table.format == "text" and table.failed_gpus == [HIT]


@pytest.mark.parametrize(("sku", "model", "count", "gen"), [
    ("a100-sxm-8", "NVIDIA A100-SXM4-80GB", 8, 4),
    ("h200-sxm-8", "NVIDIA H200", 8, 5),
    ("gb200-nvl72-tray", "NVIDIA GB200", 4, 5),
])
def test_sku_sets_gpu_model_and_count(make_node: MakeNode, sku: str, model: str, count: int, gen: int) -> None:
    node = make_node(sku=sku, fault=Fault("pcie-degraded", 1))
    report = nvidia_smi.parse(tool(node, "nvidia-smi", "-q", "-x")[0])
    assert [g.name for g in report.gpus] == [model] * count
    assert report.gpus[1].pcie_gen_current == gen - 1 and report.gpus[0].pcie_gen_current == gen
    text, rc = tool(node, "all_reduce_perf", "-g", str(count + 1))
    assert rc != 0 and "invalid device ordinal" in text


def test_fault_injected_into_running_node_shows_on_next_call(make_node: MakeNode) -> None:
    node = make_node()
    assert infiniband.parse(tool(node, "ibstat")[0]).cas[0].ports[0].state == "Active"
    node.inject(Fault("ib-down", 0))
    assert infiniband.parse(tool(node, "ibstat")[0]).cas[0].ports[0].state == "Down"
    node.inject(Fault("healthy"))
    assert infiniband.parse(tool(node, "ibstat")[0]).cas[0].ports[0].state == "Active"


def test_tools_run_as_programs_from_the_node_bin(make_node: MakeNode) -> None:
    node = make_node(fault=Fault("ecc", 5))
    bin_dir = node.dir / "bin"
    proc = subprocess.run([str(bin_dir / "nvidia-smi"), "-q"], capture_output=True, text=True, check=False)
    assert proc.returncode == 0
    assert nvidia_smi.parse(proc.stdout).gpus[5].remapped_rows_failure is True
    proc = subprocess.run([str(bin_dir / "dmesg")], capture_output=True, text=True, check=False)
    assert {e.xid for e in xid.parse(proc.stdout).events} == {48, 64}
    proc = subprocess.run([str(bin_dir / "nvidia-smi"), "--query-gpu=nonsense", "--format=csv"],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 2 and "not a valid field" in proc.stdout


def test_gpu_reset_clears_what_a_reset_clears_and_takes_its_time(make_node: MakeNode) -> None:
    node = make_node(fault=Fault("ecc", HIT))
    waited: list[float] = []
    (node.dir.parent / "tool-time.json").write_text('{"scale": 0.5}')
    text, rc = run("nvidia-smi", ["-r", "-i", str(HIT)], node.dir, env={}, sleep=waited.append)
    assert rc == 0 and text == f"GPU 00000000:{BUSES[HIT]:02X}:00.0 was successfully reset.\n"
    assert waited == [10.0]  # half of the 20 s an 8-GPU reset is taken to last
    q = nvidia_smi.parse(tool(node, "nvidia-smi", "-q")[0])
    assert q.gpus[HIT].remapped_rows_failure is False
    # A reset of another GPU leaves a fault on this one where it is.
    node.inject(Fault("ecc", HIT))
    assert tool(node, "nvidia-smi", "--gpu-reset", "-i", "0")[1] == 0
    assert {e.xid for e in xid.parse(tool(node, "dmesg")[0]).events} == {48, 64}


def test_a_gpu_reset_clears_the_fault_but_not_the_kernel_log(make_node: MakeNode) -> None:
    """A real kernel log keeps the Xid lines after `nvidia-smi -r`, at their time; only a boot clears them."""
    node = make_node(fault=Fault("ecc", HIT))
    before = [(e.xid, e.timestamp) for e in xid.parse(tool(node, "dmesg", "--time-format", "iso")[0]).events]
    assert [x for x, _ in before] == [48, 64]
    assert tool(node, "nvidia-smi", "-r")[1] == 0
    assert nvidia_smi.parse(tool(node, "nvidia-smi", "-q")[0]).gpus[HIT].remapped_rows_failure is False
    after = [(e.xid, e.timestamp) for e in xid.parse(tool(node, "dmesg", "--time-format", "iso")[0]).events]
    assert after == before  # the same lines, the same times: the reset did not rewrite history
    node.inject(Fault("ecc", HIT))  # the fault again, later: both its lines and the old ones are in the log
    assert tool(node, "nvidia-smi", "-r")[1] == 0
    assert sorted(e.xid for e in xid.parse(tool(node, "dmesg")[0]).events) == [48, 48, 64, 64]
    clear_faults(node.dir, "reboot")
    assert xid.parse(tool(node, "dmesg")[0]).events == []


def test_gpu_reset_fails_on_a_lost_gpu_and_while_the_gpus_are_in_use(make_node: MakeNode) -> None:
    lost = make_node(fault=Fault("xid79", HIT))
    text, rc = tool(lost, "nvidia-smi", "-r")
    assert rc == 15 and "GPU is lost" in text
    assert [e.xid for e in xid.parse(tool(lost, "dmesg")[0]).events] == [79]  # only a reboot brings it back
    held = make_node(fault=Fault("gpu-held", HIT))
    text, rc = tool(held, "nvidia-smi", "-r")
    assert rc == 255 and f"GPU 00000000:{BUSES[HIT]:02X}:00.0 is currently in use by another process" in text
    assert tool(held, "nvidia-smi", "-r", "-i", "0")[1] == 0  # the held GPU is not among those reset
    busy = make_node()
    proc = subprocess.Popen([str(busy.dir / "bin" / "dcgmi"), "diag", "-r", "1"],  # 6 s at this scale
                            env={**os.environ, "RACKLIFE_LAB_TOOL_TIME_SCALE": "0.2"}, stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while not list((busy.dir / "gpu-users").glob("*")) and time.monotonic() < deadline:
            time.sleep(0.05)
        text, rc = tool(busy, "nvidia-smi", "-r")
        assert rc == 255 and "in use by another process" in text
    finally:
        proc.kill()
        proc.wait()
    assert tool(busy, "nvidia-smi", "-r")[1] == 0  # the user is gone: its stale mark does not hold the GPUs
    # A killed tool's mark whose PID the kernel has given to another process: that process started later.
    users = busy.dir / "gpu-users"
    (users / str(os.getpid())).write_text("dcgmi\n1\n", encoding="utf-8")
    assert tool(busy, "nvidia-smi", "-r")[1] == 0 and not list(users.iterdir())
    (users / str(os.getpid())).write_text(f"dcgmi\n{pid_start(os.getpid())}\n", encoding="utf-8")  # its own
    assert tool(busy, "nvidia-smi", "-r")[1] == 255
    (users / str(os.getpid())).unlink()
    text, rc = tool(busy, "nvidia-smi", "-r", "-q")
    assert rc == 2 and "Invalid combination" in text


def test_a_power_cycle_clears_a_lost_gpu_not_a_hardware_fault(make_node: MakeNode) -> None:
    from lifecycle.lab.faults import clear_faults, read_fault

    lost = make_node(fault=Fault("xid79", HIT))
    assert clear_faults(lost.dir, "reboot") == Fault("healthy")
    assert tool(lost, "nvidia-smi")[1] == 0
    slow = make_node(fault=Fault("slow-nvlink", 0))
    assert clear_faults(slow.dir, "reboot") == Fault("slow-nvlink", 0) == read_fault(slow.dir)

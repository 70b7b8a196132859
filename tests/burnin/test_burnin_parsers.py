"""Every burn-in parser against every relevant captured file, plus truncated/garbled variants."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from burnin.parsers import ParseError, dcgm, infiniband, nccl, nvidia_smi, strip_rank_prefix, xid

Fx = Callable[[str], Path]


# --------------------------------------------------------------------------- DCGM


def test_dcgm_text_h200_persistence_mode_fail(fx: Fx) -> None:
    r = dcgm.parse(fx("dcgm/h200x8_dcgmi-diag-r1_dcgm-3.1.8_persistence-mode-FAIL.txt").read_text())
    assert r.format == "text"
    assert r.level == 1 and not r.level_inferred
    assert r.passed is False
    assert [t.name for t in r.tests if t.result == "fail"] == ["Persistence Mode"]
    assert len(r.tests) == 9 and all(t.category == "Deployment" for t in r.tests)
    assert r.dcgm_version == "3.1.8" and r.driver_version == "550.127.08"
    # DCGM cut its own message after GPU 5: exactly the GPUs it named.
    assert r.failed_gpus == [0, 1, 2, 3, 4, 5]
    pm = next(t for t in r.tests if t.name == "Persistence Mode")
    assert pm.details.startswith("Persistence mode for GPU 0 is currently disabled. The DCGM")
    assert "currently disabled" in pm.details and "disab  led" not in pm.details


@pytest.mark.parametrize(
    ("name", "level", "count", "skips"),
    [
        ("DCGMIDiag_r1_results.json", 1, 9, []),
        ("DCGMIDiag_r2_results.json", 2, 11, []),
        ("DCGMIDiag_r3_results.json", 3, 16, ["EUD Test"]),
    ],
)
def test_dcgm3_json_virtualclient(fx: Fx, name: str, level: int, count: int, skips: list[str]) -> None:
    r = dcgm.parse(fx(f"dcgm/virtualclient/{name}").read_text())
    assert r.format == "dcgm3-json"
    assert r.level == level and r.level_inferred
    assert len(r.tests) == count
    assert r.passed is True and r.failed_gpus == []
    assert [t.name for t in r.tests if t.result == "skip"] == skips


def test_dcgm3_json_per_gpu_results_and_info(fx: Fx) -> None:
    r = dcgm.parse(fx("dcgm/virtualclient/DCGMIDiag_r3_results.json").read_text())
    pcie = next(t for t in r.tests if t.name == "PCIe")
    assert pcie.category == "Integration" and pcie.gpus == {"0": "pass"}
    assert "13.15 GB/s" in pcie.details
    stress = next(t for t in r.tests if t.name == "Targeted Power")
    assert stress.category == "Stress" and "70 W" in stress.details


@pytest.mark.parametrize(
    "name", ["DCGMIIncorrectresults.json", "DCGMIHealthCheckResults.json"]
)
def test_dcgm_json_without_test_categories_is_an_error(fx: Fx, name: str) -> None:
    # IncorrectResults: upstream removed "test_categories" to exercise this path.
    with pytest.raises(ParseError, match="test_categories"):
        dcgm.parse(fx(f"dcgm/virtualclient/{name}").read_text())


DCGM4_NESTED = """Successfully ran diagnostic for group.
{"DCGM Diagnostic": {"test_categories": [{"category": "Deployment", "tests": [
  {"name": "software", "results": [
     {"entity_group": "GPU", "entity_group_id": 1, "entity_id": 0, "status": "Pass"},
     {"entity_group": "GPU", "entity_group_id": 1, "entity_id": 1, "status": "Fail",
      "warnings": [{"error_id": 29, "warning": "Persistence mode for GPU 1 is disabled."}]}],
   "test_summary": {"status": "Fail"}}]}]},
 "metadata": {"Driver Version Detected": "580.82.09", "version": "4.2.3"}}"""

DCGM4_TOP = """{"version": "4.2.3", "driver_version": "580.82.09", "tests": [
 {"name": "software", "results": [{"entity_group": "GPU", "entity_id": 0, "status": "pass"}]},
 {"name": "memory", "results": [{"entity_group": "GPU", "entity_id": 0, "status": "pass"},
   {"entity_group": "GPU", "entity_id": 1, "status": "fail",
    "warnings": [{"warning": "Uncorrectable ECC error detected on GPU 1"}]}]},
 {"name": "pcie", "results": [{"entity_group": "GPU", "entity_id": 0, "status": "skip"},
   {"entity_group": "GPU", "entity_id": 1, "status": "pass"}]}]}"""


def test_dcgm4_json_nested_per_entity() -> None:
    # Shape of DCGM 4.2.3's real `dcgmi diag -r 1 -j` (entity results, metadata block).
    r = dcgm.parse(DCGM4_NESTED)
    assert r.format == "dcgm4-json"
    assert r.dcgm_version == "4.2.3" and r.driver_version == "580.82.09"
    (t,) = r.tests
    assert t.name == "software" and t.result == "fail" and t.gpus == {"0": "pass", "1": "fail"}
    assert r.failed_gpus == [1] and r.passed is False
    assert "Persistence mode for GPU 1" in t.details


def test_dcgm4_json_top_level_tests() -> None:
    r = dcgm.parse(DCGM4_TOP)
    assert r.format == "dcgm4-json"
    assert {t.name: t.result for t in r.tests} == {"software": "pass", "memory": "fail", "pcie": "skip"}
    assert r.failed_gpus == [1]
    assert r.passed is False


def test_dcgm_unknown_status_word_is_never_a_pass() -> None:
    doc = DCGM4_TOP.replace('"status": "pass"}]},\n {"name": "memory"', '"status": "Inconclusive"}]},\n {"name": "memory"')
    with pytest.raises(ParseError, match="Inconclusive"):
        dcgm.parse(doc)


def test_dcgm_all_skipped_is_not_passed() -> None:
    r = dcgm.parse('{"tests": [{"name": "pcie", "results": [{"entity_id": 0, "status": "skip"}]}]}')
    assert r.passed is False


@pytest.mark.parametrize("cut", [0.3, 0.6, 0.9])
def test_dcgm_truncated_json_is_an_error(fx: Fx, cut: float) -> None:
    text = fx("dcgm/virtualclient/DCGMIDiag_r3_results.json").read_text()
    with pytest.raises(ParseError):
        dcgm.parse(text[: int(len(text) * cut)])


def test_dcgm_error_banner_only(tmp_path: Path) -> None:
    with pytest.raises(ParseError, match="dcgmi reported: Error: Unable to connect to host engine"):
        dcgm.parse("Error: Unable to connect to host engine. Host engine connection invalid/disconnected.")


def test_dcgm_text_garbled_result_cell(fx: Fx) -> None:
    text = fx("dcgm/h200x8_dcgmi-diag-r1_dcgm-3.1.8_persistence-mode-FAIL.txt").read_text()
    with pytest.raises(ParseError, match="unreadable result"):
        dcgm.parse(text.replace("| Pass      ", "| P@ss      ", 1).replace("| Pass  ", "| Pa#s  ", 1))


# --------------------------------------------------------------------------- NCCL


def test_nccl_single_node_h100(fx: Fx) -> None:
    r = nccl.parse(fx("nccl/h100x8_all_reduce_perf_single-node_nvls_issue290.txt").read_text(), "all_reduce")
    assert r.collective == "all_reduce" and r.ranks == 8 and r.hosts == ["node005"]
    assert len(r.rows) == 6
    assert round(r.avg_busbw or 0, 2) == 439.37
    assert r.peak_busbw == 476.53
    assert r.wrong_results == 0 and r.out_of_bounds == 0 and r.complete
    first, last = r.rows[0], r.rows[-1]
    assert (first.size_bytes, first.count, first.type, first.redop, first.root) == (134217728, 33554432, "float", "sum", -1)
    assert (first.algbw_oop, first.busbw_oop, first.wrong_oop) == (218.85, 382.99, 0)
    assert (last.size_bytes, last.time_oop_us, last.busbw_ip) == (4294967296, 15870.0, 476.53)


def test_nccl_two_node_degraded_srun_prefixed(fx: Fx) -> None:
    r = nccl.parse(fx("nccl/h100x8_2node-16gpu_all_reduce_perf_ndr-ib_DEGRADED_issue290.txt").read_text())
    assert r.ranks == 16 and r.hosts == ["node005", "node007"]
    assert len(r.rows) == 11
    assert round(r.avg_busbw or 0, 2) == 142.74  # printed 142.735
    assert r.peak_busbw == 167.87
    assert all(row.wrong_oop is None and row.wrong_ip is None for row in r.rows)  # validation off: N/A
    assert r.wrong_results == 0 and r.collective == "unknown"


def test_nccl_aws_excerpt_without_summary(fx: Fx) -> None:
    r = nccl.parse(fx("nccl/aws-p5_2node-16xH100_all_reduce_perf_efa-32x100G.txt").read_text())
    assert len(r.rows) == 32 and r.rows[0].size_bytes == 8 and r.rows[-1].size_bytes == 17179869184
    assert r.peak_busbw == 487.26
    assert r.avg_busbw is None and not r.complete and r.ranks is None


def test_nccl_mpirun_tag_output_prefix(fx: Fx) -> None:
    text = fx("nccl/h100x8_all_reduce_perf_single-node_nvls_issue290.txt").read_text()
    tagged = "\n".join(f"[1,0]<stdout>:{line}" for line in text.splitlines())
    r = nccl.parse(tagged)
    assert len(r.rows) == 6 and round(r.avg_busbw or 0, 2) == 439.37


def test_strip_rank_prefix() -> None:
    assert strip_rank_prefix(" 0: # Avg bus bandwidth    : 1") == "# Avg bus bandwidth    : 1"
    assert strip_rank_prefix("[3,12]<stderr>:x") == "x"
    assert strip_rank_prefix("   134217728      33554432") == "   134217728      33554432"


def test_nccl_truncated_row_is_an_error(fx: Fx) -> None:
    text = fx("nccl/h100x8_all_reduce_perf_single-node_nvls_issue290.txt").read_text()
    cut = text[: text.index("468.57") + 3]  # the run died mid-row
    with pytest.raises(ParseError, match="truncated or garbled"):
        nccl.parse(cut)


def test_nccl_cut_before_summary_is_incomplete(fx: Fx) -> None:
    text = fx("nccl/h100x8_all_reduce_perf_single-node_nvls_issue290.txt").read_text()
    r = nccl.parse(text[: text.index("# Out of bounds")])
    assert not r.complete and r.avg_busbw is None


def test_nccl_wrong_results_counted(fx: Fx) -> None:
    text = fx("nccl/h100x8_all_reduce_perf_single-node_nvls_issue290.txt").read_text()
    bad = text.replace("468.57      0", "468.57      3")
    assert nccl.parse(bad).wrong_results == 3


def test_nccl_failure_without_rows() -> None:
    with pytest.raises(ParseError, match="NCCL failure"):
        nccl.parse("# nThread 1\nnode005: Test NCCL failure common.cu:1005 'unhandled system error'\n")


# --------------------------------------------------------------------------- InfiniBand


def test_ibstat_h100_all_active(fx: Fx) -> None:
    r = infiniband.parse(fx("infiniband/gpud_ibstat.47.0.h100.all.active.0.txt").read_text())
    assert r.source == "ibstat" and len(r.cas) == 12
    names = [c.name for c in r.cas]
    assert names[:3] == ["mlx5_0", "mlx5_1", "mlx5_10"]
    ports = {c.name: c.ports[0] for c in r.cas}
    assert (ports["mlx5_0"].state, ports["mlx5_0"].physical_state, ports["mlx5_0"].rate_gbps,
            ports["mlx5_0"].link_layer) == ("Active", "LinkUp", 400.0, "Ethernet")
    assert sum(p.rate_gbps == 400 for p in ports.values()) == 8
    assert r.cas[0].ca_type == "MT4129" and r.cas[0].firmware == "28.39.1002"


def test_ibstat_h100_some_down(fx: Fx) -> None:
    r = infiniband.parse(fx("infiniband/gpud_ibstat.47.0.h100.some.down.0_FAIL.txt").read_text())
    down = sorted(c.name for c in r.cas for p in c.ports if p.state == "Down")
    assert down == ["mlx5_2", "mlx5_7", "mlx5_8"]
    p = next(c for c in r.cas if c.name == "mlx5_2").ports[0]
    assert (p.physical_state, p.rate_gbps, p.link_layer) == ("Disabled", 40.0, "Ethernet")
    assert next(c for c in r.cas if c.name == "mlx5_0").ports[0].link_layer == "InfiniBand"


def test_ibstat_truncated_port_is_an_error(fx: Fx) -> None:
    text = fx("infiniband/gpud_ibstat.47.0.h100.all.active.0.txt").read_text()
    with pytest.raises(ParseError, match="lacks"):
        infiniband.parse(text[: text.index("Rate: 100")])


def test_ibstat_garbage() -> None:
    with pytest.raises(ParseError, match=r"ibstat reported: ibpanic: \[12345\]"):
        infiniband.parse("ibpanic: [12345] main: stat of IB device 'mlx5_0' failed: No such file")


# ibv_devinfo -v, in the printf layout of rdma-core's libibverbs/examples/devinfo.c
# (no capture of it is among the shared fixtures; values mirror the H100 ibstat file).
IBV_DEVINFO = """hca_id:\tmlx5_0
\ttransport:\t\t\tInfiniBand (0)
\tfw_ver:\t\t\t\t28.39.1002
\tboard_id:\t\t\tMT_0000000838
\tphys_port_cnt:\t\t\t1
\t\tport:\t1
\t\t\tstate:\t\t\tPORT_ACTIVE (4)
\t\t\tmax_mtu:\t\t4096 (5)
\t\t\tactive_width:\t\t4X (2)
\t\t\tactive_speed:\t\t100.0 Gbps (128)
\t\t\tphys_state:\t\tLINK_UP (5)
\t\t\tlink_layer:\t\tInfiniBand

hca_id:\tmlx5_1
\ttransport:\t\t\tInfiniBand (0)
\tfw_ver:\t\t\t\t28.39.1002
\t\tport:\t1
\t\t\tstate:\t\t\tPORT_DOWN (1)
\t\t\tphys_state:\t\tDISABLED (3)
\t\t\tlink_layer:\t\tInfiniBand
"""


def test_ibv_devinfo_verbose() -> None:
    r = infiniband.parse(IBV_DEVINFO)
    assert r.source == "ibv_devinfo"
    a, b = r.cas
    assert (a.name, a.firmware, a.ports[0].state, a.ports[0].physical_state, a.ports[0].rate_gbps) == (
        "mlx5_0", "28.39.1002", "Active", "LinkUp", 400.0)
    assert (b.ports[0].state, b.ports[0].physical_state, b.ports[0].rate_gbps) == ("Down", "Disabled", None)


def test_ibv_devinfo_unknown_state() -> None:
    with pytest.raises(ParseError, match="unknown state"):
        infiniband.parse(IBV_DEVINFO.replace("PORT_ACTIVE (4)", "PORT_WEIRD (9)"))


# --------------------------------------------------------------------------- XID


def test_xid_119_gsp_timeouts(fx: Fx) -> None:
    r = xid.parse(fx("xid/gpud_dmesg-with-xid-119.log").read_text())
    assert [e.xid for e in r.events] == [119] * 5
    e = r.events[0]
    assert e.pci == "0000:9b:00" and e.bucket == "RESET_GPU" and e.mnemonic == "GSP_RPC_TIMEOUT"
    assert e.pid == "2024380" and e.process == "nvidia-smi" and e.timestamp == "Sun Feb 23 16:24:18 2025"
    assert e.message.startswith("Timeout after 6s of waiting for RPC response from GPU4 GSP!")
    assert "reset the GPU" in e.action


def test_xid_dbe_followed_by_remap(fx: Fx) -> None:
    r = xid.parse(fx("xid/gpud_tail_dmesg.0.log").read_text())
    assert [e.xid for e in r.events] == [48, 63] + [94] * 9
    assert {e.pci for e in r.events} == {"0000:19:00"}
    dbe, remap = r.events[0], r.events[1]
    assert dbe.bucket == "WORKFLOW_XID_48" and "double bit error" in dbe.message
    assert dbe.pid == "<unknown>" and dbe.process == "<unknown>"
    assert remap.bucket == "IGNORE" and remap.message.startswith("Row Remapper: New row")
    assert r.events[3].process == "python3.10" and r.events[3].message == "Ch 00000008"


def test_xid_old_driver_format_and_unknown_code() -> None:
    r = xid.parse("[  12.3] NVRM: Xid (0000:3b:00): 79, GPU has fallen off the bus.\n"
                  "NVRM: Xid (PCI:0000:3b:00): 999, pid=1, name=x, future\n")
    assert [(e.xid, e.pci, e.bucket) for e in r.events] == [(79, "0000:3b:00", "RESTART_BM"), (999, "0000:3b:00", "UNKNOWN")]
    assert r.events[0].message == "GPU has fallen off the bus."


def test_xid_clean_log_and_garbled_line() -> None:
    assert xid.parse("[    0.000000] Linux version 6.1.0\n").events == []
    with pytest.raises(ParseError, match="unreadable Xid"):
        xid.parse("NVRM: Xid (PCI:0000:3b:0")


def test_xid_catalog_is_nvidias_table() -> None:
    cat = xid.catalog()
    assert len(cat) == 162 and min(cat) == 1 and max(cat) == 162
    assert (cat[79].bucket, cat[48].bucket, cat[95].bucket, cat[94].bucket) == (
        "RESTART_BM", "WORKFLOW_XID_48", "RESET_GPU", "RESTART_APP")
    assert all(entry.bucket in xid.ACTIONS for entry in cat.values())


# --------------------------------------------------------------------------- nvidia-smi


def test_smi_q_h100_thamada(fx: Fx) -> None:
    r = nvidia_smi.parse(fx("nvidia-smi/thamada_H100SXMx8_nvidia-smi-q.txt").read_text())
    assert (r.format, r.driver_version, r.cuda_version, len(r.gpus)) == ("text", "565.57.01", "12.7", 8)
    g = r.gpus[0]
    assert (g.index, g.name, g.serial, g.pci_bus_id) == (0, "NVIDIA H100 80GB HBM3", "1654423001593", "00000000:18:00.0")
    assert (g.pcie_gen_current, g.pcie_gen_max, g.pcie_width_current, g.pcie_width_max) == (5, 5, 16, 16)
    assert (g.ecc_uncorrected_volatile, g.remapped_rows_failure, g.remapped_rows_pending) == (0, False, False)
    assert (g.temperature_c, g.power_limit_w, g.ecc_mode, g.throttle_reasons) == (30.0, 700.0, "Enabled", [])
    assert r.gpus[1].serial == "1654223054577"


def test_smi_q_h100_gpud_with_power_brake(fx: Fx) -> None:
    r = nvidia_smi.parse(fx("nvidia-smi/gpud_nvidia-smi-query.535.161.08.h100x8.txt").read_text())
    assert (r.driver_version, r.cuda_version, len(r.gpus)) == ("535.161.08", "12.2", 8)
    assert [g.serial for g in r.gpus] == ["1650124031592", "1650124008135", "1650124047722", "1650124032506",
                                          "1650124030635", "1650124048576", "1650124047010", "1650124007084"]
    assert r.gpus[7].pci_bus_id == "00000000:DB:00.0"
    # This capture really has GPU 0 held down by a power-brake slowdown.
    assert r.gpus[0].throttle_reasons == ["hw_slowdown", "hw_power_brake_slowdown"]


def test_smi_xml_a100(fx: Fx) -> None:
    r = nvidia_smi.parse(fx("nvidia-smi/telegraf_a100-sxm4-v12_nvidia-smi-q-x.xml").read_text())
    assert (r.format, r.driver_version, r.cuda_version) == ("xml", "535.54.03", "12.2")
    (g,) = r.gpus  # telegraf trimmed the capture to one <gpu>
    assert (g.name, g.serial, g.pci_bus_id) == ("NVIDIA A100-SXM4-80GB", "1650522003820", "00000000:01:00.0")
    assert (g.pcie_gen_current, g.pcie_gen_max, g.pcie_width_current, g.pcie_width_max) == (4, 4, 16, 16)
    assert (g.ecc_uncorrected_volatile, g.remapped_rows_failure) == (0, None)  # <remapped_rows>N/A
    assert (g.power_limit_w, g.temperature_c, g.throttle_reasons) == (500.0, 27.0, [])


def test_smi_table(fx: Fx) -> None:
    r = nvidia_smi.parse(fx("nvidia-smi/thamada_H100SXMx8_nvidia-smi.txt").read_text())
    assert (r.format, r.driver_version, r.cuda_version, len(r.gpus)) == ("table", "565.57.01", "12.7", 8)
    assert [g.pci_bus_id for g in r.gpus][-1] == "00000000:DB:00.0"
    assert all(g.ecc_uncorrected_volatile == 0 and g.serial is None for g in r.gpus)


def test_smi_truncated_q_text(fx: Fx) -> None:
    text = fx("nvidia-smi/thamada_H100SXMx8_nvidia-smi-q.txt").read_text()
    with pytest.raises(ParseError, match="announces 8 GPUs"):
        nvidia_smi.parse(text[: len(text) // 3])


def test_smi_truncated_xml(fx: Fx) -> None:
    text = fx("nvidia-smi/telegraf_a100-sxm4-v12_nvidia-smi-q-x.xml").read_text()
    with pytest.raises(ParseError, match="malformed or truncated"):
        nvidia_smi.parse(text[: len(text) // 2])


def test_smi_other_outputs_are_rejected(fx: Fx) -> None:
    with pytest.raises(ParseError):
        nvidia_smi.parse(fx("nvidia-smi/gpud_nvidia-smi-nvlink-status.a100x8.txt").read_text())
    with pytest.raises(ParseError):
        nvidia_smi.parse("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.")


def test_nvlink_status(fx: Fx) -> None:
    links = nvidia_smi.parse_nvlink_status(fx("nvidia-smi/gpud_nvidia-smi-nvlink-status.a100x8.txt").read_text())
    assert sorted(links) == list(range(8)) and all(v == [True] * 12 for v in links.values())
    good = nvidia_smi.parse_nvlink_status(fx("nhc/azurehpc-health-checks/test/data/good_nvlink_status.txt").read_text())
    assert good == {7: [True] * 12}
    bad = nvidia_smi.parse_nvlink_status(fx("nhc/azurehpc-health-checks/test/data/bad_nvlink_status.txt").read_text())
    assert bad == {6: []}  # "all links are inactive"
    text = fx("nvidia-smi/gpud_nvidia-smi-nvlink-status.a100x8.txt").read_text()
    assert nvidia_smi.parse_nvlink_status(text.replace("Link 3: 25 GB/s", "Link 3: <inactive>", 1))[0][3] is False
    with pytest.raises(ParseError, match="unreadable NVLink"):
        nvidia_smi.parse_nvlink_status(text.replace("Link 3: 25 GB/s", "Link 3: ???", 1))
    with pytest.raises(ParseError, match="no GPU"):
        nvidia_smi.parse_nvlink_status(fx("nvidia-smi/thamada_H100SXMx8_nvidia-smi-q.txt").read_text())

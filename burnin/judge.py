"""Judge measurements against a SKU profile: one function per kind of evidence.

The same functions run on the node (``burnin run``) and on the controller
(``burnin judge RESULT.json --profile P``), so a result can be re-judged against a
stricter or different profile without re-running anything. Rules: a reading that is
missing is an ``error``, never a pass; one bad GPU, port or test fails the node; every
finding says what was measured, what was required, and why it failed.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from burnin import kernel_window
from burnin.gpu_stress import StressReport
from burnin.nvml import GpuHealth, GpuInventory, NvmlXid
from burnin.parsers.dcgm import DcgmReport
from burnin.parsers.dcgm_report import skipped_at
from burnin.parsers.infiniband import IbReport
from burnin.parsers.nccl import NcclReport
from burnin.parsers.xid import XidReport, event_for
from burnin.profiles import Profile
from burnin.result import Finding, Verdict, worst


def _version_tuple(v: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", v))


def _per_gpu(
    name: str,
    gpus: list[GpuHealth],
    read: Callable[[GpuHealth], Any],
    bad: Callable[[Any], bool],
    threshold: Any,
    what: str,
) -> Finding:
    """One finding over all GPUs: error if any GPU did not report, fail if any is bad."""
    measured = {str(g.index): read(g) for g in gpus}
    missing = [g for g in gpus if read(g) is None]
    failing = [g for g in gpus if read(g) is not None and bad(read(g))]
    if failing:
        who = ", ".join(f"GPU {g.index} ({g.serial or g.pci_bus_id or '?'}): {read(g)}" for g in failing)
        return Finding(name, "fail", measured, threshold, f"{what}: {who}")
    if missing:
        notes = "; ".join(dict.fromkeys(n for g in missing for n in g.notes[:1]))
        who = ", ".join(str(g.index) for g in missing)
        return Finding(name, "error", measured, threshold, f"{what} not reported for GPU {who} {notes}".strip())
    if not gpus:
        return Finding(name, "error", measured, threshold, "no GPUs to judge")
    return Finding(name, "pass", measured, threshold, "")


def judge_gpus(
    inv: GpuInventory,
    profile: Profile,
    expect_driver: str | None = None,
    expect_cuda: str | None = None,
) -> list[Finding]:
    lim = profile.gpu
    gpus = inv.gpus
    out: list[Finding] = []
    count_verdict: Verdict = "pass" if len(gpus) == lim.count else "fail"
    out.append(
        Finding(
            "gpu.count",
            count_verdict,
            len(gpus),
            lim.count,
            "" if count_verdict == "pass" else f"{len(gpus)} of {lim.count} GPUs present",
        )
    )
    out.append(
        _per_gpu("gpu.model", gpus, lambda g: g.name, lambda n: n not in lim.models,
                 list(lim.models), "not a model of this SKU")
    )
    if inv.driver_version is None:
        out.append(Finding("gpu.driver", "error", None, lim.driver_min, "driver version not reported"))
    else:
        ok = _version_tuple(inv.driver_version) >= _version_tuple(lim.driver_min)
        reason = "" if ok else f"driver {inv.driver_version} is older than {lim.driver_min}"
        if ok and expect_driver is not None and inv.driver_version != expect_driver:
            ok, reason = False, f"driver {inv.driver_version} differs from the image's {expect_driver}"
        threshold = {"min": lim.driver_min, "expected": expect_driver}
        out.append(Finding("gpu.driver", "pass" if ok else "fail", inv.driver_version, threshold, reason))
    if expect_cuda is not None:
        ok = inv.cuda_version == expect_cuda
        out.append(
            Finding("gpu.cuda", "pass" if ok else ("error" if inv.cuda_version is None else "fail"),
                    inv.cuda_version, expect_cuda,
                    "" if ok else f"CUDA {inv.cuda_version} differs from the image's {expect_cuda}")
        )
    if lim.ecc_enabled:
        out.append(_per_gpu("gpu.ecc_mode", gpus, lambda g: g.ecc_enabled, lambda e: not e, True,
                            "ECC disabled"))
    out.append(
        _per_gpu("gpu.ecc_uncorrectable", gpus, lambda g: g.ecc_uncorrected_volatile,
                 lambda n: n > lim.uncorrectable_ecc_volatile_max, lim.uncorrectable_ecc_volatile_max,
                 "volatile uncorrectable ECC errors")
    )
    out.append(_memory_repair(gpus, profile))
    out.append(
        _per_gpu("gpu.pcie_gen", gpus, lambda g: g.pcie_gen_max, lambda n: n < lim.pcie_gen,
                 lim.pcie_gen, "PCIe link generation (max negotiable) below the SKU's")
    )
    out.append(
        _per_gpu("gpu.pcie_width", gpus, lambda g: g.pcie_width_current, lambda n: n < lim.pcie_width,
                 lim.pcie_width, "PCIe link width below the SKU's")
    )
    forbidden = set(lim.forbidden_throttle_reasons)
    out.append(
        _per_gpu("gpu.throttle", gpus, lambda g: g.throttle_reasons,
                 lambda rs: bool(forbidden & set(rs)), sorted(forbidden), "clocks held down by")
    )
    out.append(_temperature(gpus, profile))
    out.append(
        _per_gpu("gpu.power_limit", gpus, lambda g: g.power_limit_w, lambda w: w < lim.power_limit_min_w,
                 lim.power_limit_min_w, "enforced power limit (W) below the SKU's TDP")
    )
    if lim.nvlink_active_links == 0:  # a SKU without NVLink (or the GPU-less lab)
        measured = {str(g.index): None if g.nvlink_active is None else sum(g.nvlink_active) for g in gpus}
        out.append(Finding("gpu.nvlink", "pass", measured, 0, "the profile requires no NVLink"))
    else:
        out.append(
            _per_gpu("gpu.nvlink", gpus,
                     lambda g: None if g.nvlink_active is None else sum(g.nvlink_active),
                     lambda n: n < lim.nvlink_active_links, lim.nvlink_active_links,
                     "active NVLink links")
        )
    return out


def _memory_repair(gpus: list[GpuHealth], profile: Profile) -> Finding:
    """Row remapping (Ampere and later) or page retirement (earlier), whichever NVML reports."""
    lim = profile.gpu
    measured: dict[str, Any] = {}
    bad: list[str] = []
    missing: list[str] = []
    for g in gpus:
        if g.row_remap_pending is not None or g.row_remap_failure is not None:
            measured[str(g.index)] = {"remap_pending": g.row_remap_pending, "remap_failure": g.row_remap_failure}
            if g.row_remap_pending and not lim.row_remap_pending_allowed:
                bad.append(f"GPU {g.index}: row remap pending (reset needed)")
            if g.row_remap_failure and not lim.row_remap_failure_allowed:
                bad.append(f"GPU {g.index}: row remapping failed")
        elif g.retired_pages_pending is not None:
            measured[str(g.index)] = {"retired_pages_pending": g.retired_pages_pending}
            if g.retired_pages_pending and not lim.retired_pages_pending_allowed:
                bad.append(f"GPU {g.index}: page retirement pending (reset needed)")
        else:
            measured[str(g.index)] = None
            missing.append(str(g.index))
    threshold = {"remap_pending": lim.row_remap_pending_allowed, "remap_failure": lim.row_remap_failure_allowed,
                 "retired_pages_pending": lim.retired_pages_pending_allowed}
    if bad:
        return Finding("gpu.memory_repair", "fail", measured, threshold, "; ".join(bad))
    if missing or not gpus:
        return Finding("gpu.memory_repair", "error", measured, threshold,
                       f"neither row remapping nor page retirement reported for GPU {', '.join(missing)}")
    return Finding("gpu.memory_repair", "pass", measured, threshold, "")


def _temperature(gpus: list[GpuHealth], profile: Profile) -> Finding:
    measured: dict[str, Any] = {}
    bad, missing = [], []
    for g in gpus:
        # The GPU's own slowdown point may only tighten the profile's limit, never loosen it.
        limit = profile.gpu.max_temperature_c
        if g.temperature_slowdown_c:
            limit = min(limit, g.temperature_slowdown_c)
        measured[str(g.index)] = {"temperature_c": g.temperature_c, "limit_c": limit}
        if g.temperature_c is None:
            missing.append(str(g.index))
        elif g.temperature_c >= limit:
            bad.append(f"GPU {g.index}: {g.temperature_c:.0f} C >= {limit:.0f} C")
    if bad:
        return Finding("gpu.temperature", "fail", measured, profile.gpu.max_temperature_c, "; ".join(bad))
    if missing or not gpus:
        return Finding("gpu.temperature", "error", measured, profile.gpu.max_temperature_c,
                       f"temperature not reported for GPU {', '.join(missing)}")
    return Finding("gpu.temperature", "pass", measured, profile.gpu.max_temperature_c, "")


def judge_xid_log(report: XidReport, profile: Profile, since: str | None = None) -> list[Finding]:
    """The Xid lines of a kernel log, or of its lines from ``since`` on (:mod:`burnin.kernel_window`)."""
    window = kernel_window.split(report, since)
    harmless = set(profile.xid_harmless_buckets)
    events = window.judged
    bad = [e for e in events if e.bucket not in harmless]
    measured = sorted({e.xid for e in events})
    extra = [Finding("kernel_xid.window", "error", sorted({e.xid for e in window.unplaced}), since, window.error)
             ] if window.error else []
    left_out = window.note()
    if bad:
        seen: dict[int, str] = {}
        for e in bad:
            seen.setdefault(e.xid, f"Xid {e.xid} on {e.pci} ({e.mnemonic or 'unknown'}): {e.action}")
        why = "; ".join([*seen.values(), left_out] if left_out else seen.values())
        return [Finding("kernel_xid", "fail", measured, sorted(harmless), why), *extra]
    note = f"{len(events)} harmless Xid event(s)" if events else ""
    note = "; ".join(n for n in (note, left_out) if n)
    return [Finding("kernel_xid", "pass", measured, sorted(harmless), note), *extra]


def judge_xid_events(events: list[NvmlXid], profile: Profile) -> list[Finding]:
    report = XidReport([event_for(e.xid, e.pci_bus_id or "?", "reported through NVML events") for e in events])
    finding = judge_xid_log(report, profile)[0]
    return [Finding("xid_events", finding.verdict, finding.measured, finding.threshold, finding.reason)]


def _norm(name: str) -> str:
    return re.sub(r"[\s_]+", " ", name.strip().lower())


def judge_dcgm(report: DcgmReport, profile: Profile, level: str | None = None) -> list[Finding]:
    lim = profile.dcgm
    measured = {t.name: t.result for t in report.tests}
    bad = [t for t in report.tests if t.result == "fail" or (t.result == "warn" and not lim.allow_warn)]
    out: list[Finding] = []
    if level is not None:
        out.append(_dcgm_level(report, lim.levels[level]))
    out.append(_dcgm_skipped(report, None if level is None else lim.levels[level]))
    out.append(_dcgm_gpus(report, profile))
    if bad:
        gpus = f" (GPUs {report.failed_gpus})" if report.failed_gpus else ""
        reasons = "; ".join(f"{t.name}: {t.result}{' - ' + t.details[:200] if t.details else ''}" for t in bad)
        out.append(Finding("dcgm.tests", "fail", measured, "pass", f"{reasons}{gpus}"))
    elif not any(t.result == "pass" for t in report.tests):
        out.append(Finding("dcgm.tests", "error", measured, "pass", "DCGM passed no test (all skipped)"))
    else:
        out.append(Finding("dcgm.tests", "pass", measured, "pass", ""))
    by_name = {_norm(t.name): t.result for t in report.tests}
    for required in lim.required_tests:
        names = [_norm(n) for n in required.split("|")]
        result = next((by_name[n] for n in names if n in by_name), None)
        verdict: Verdict = "pass" if result == "pass" else "fail"
        out.append(Finding(f"dcgm.required.{names[0].replace(' ', '_')}", verdict, result, "pass",
                           "" if verdict == "pass" else f"required test {required!r} is {result or 'absent'}"))
    return out


def _dcgm_skipped(report: DcgmReport, want: int | None) -> Finding:
    """A test the required level runs that DCGM skipped was not run: an ``error``, never a pass.

    Not a ``fail``: a skip proves nothing about the hardware (DCGM skips a plugin for a GPU it
    does not support, a missing prerequisite, another process on the GPU), so the operator's
    action is to find out why and re-run, not to send the node to repair; but the node is not
    accepted either. Judged against the level the profile requires (a skip in a test only a
    higher level runs does not weaken it); without a level, against the level that ran."""
    if want is None or report.level is None:
        skipped, at = list(report.skipped_required), report.level
    else:
        at = min(want, report.level)
        skipped = skipped_at(report.tests, at)
    if skipped:
        return Finding("dcgm.skipped", "error", skipped, [],
                       f"DCGM skipped {len(skipped)} test(s) that r{at} runs: {', '.join(skipped)}; "
                       "a skipped test was not run (check why DCGM skipped it, then re-run)")
    return Finding("dcgm.skipped", "pass", [], [], f"no test r{at} runs was skipped" if at else "")


def _dcgm_gpus(report: DcgmReport, profile: Profile) -> Finding:
    """Each test whose output names the GPUs it tested must name every GPU of the SKU.

    A diagnostic run on a subset of the GPUs (``-i 0``, a GPU DCGM could not see, a GPU one
    plugin left out) passes for the GPUs it saw only. Judged per test: DCGM lists every GPU
    under a test that names any (3.x ``Pass - GPUs: 0, 2, 3`` with ``Fail - GPU: 1``, 4.x one
    ``GPU<n>:`` row each, JSON one result each). Tests that give one bare result (``Pass - All``,
    the 3.x deployment checks) cannot show it; the gpu check counts the GPUs instead."""
    want = profile.gpu.count
    named = {t.name: sorted((g for g in t.gpus if g.isdigit()), key=int) for t in report.tests}
    named = {name: ids for name, ids in named.items() if ids}
    if not named:
        return Finding("dcgm.gpus", "pass", None, want,
                       "the output names no GPU ids per test; GPU coverage is counted by the gpu check")
    short = {name: ids for name, ids in named.items() if len(ids) < want}
    if short:
        who = "; ".join(f"{name}: GPU {', '.join(ids)}" for name, ids in short.items())
        return Finding("dcgm.gpus", "error", short, want,
                       f"DCGM reported results for fewer GPUs than the SKU's {want}: {who}; "
                       "the others were not diagnosed")
    return Finding("dcgm.gpus", "pass", named, want, f"every test that names GPUs names {want}")


def _dcgm_level(report: DcgmReport, want: int) -> Finding:
    """The level that ran, as the output says (or as its categories imply), against the level required.

    The level asked for proves nothing: a dcgmi that ignored ``-r`` or a result copied from a
    shorter run would otherwise be judged as the run that was wanted."""
    how = "inferred from the test categories" if report.level_inferred else "stated by the output"
    if report.level_evidence:
        how = f"{how}: {report.level_evidence}"
    if report.level is None:
        return Finding("dcgm.level", "error", None, want,
                       "the DCGM output does not say which level ran, nor do its categories imply one")
    if report.level < want:
        return Finding("dcgm.level", "fail", report.level, want,
                       f"diagnostic ran at level {report.level} ({how}), profile needs {want}")
    return Finding("dcgm.level", "pass", report.level, want, f"level {report.level} ({how}) >= {want}")


def nccl_scope(report: NcclReport, profile: Profile) -> str:
    if len(report.hosts) > 1 or (report.ranks is not None and report.ranks > profile.gpu.count):
        return "multi_node"
    return "single_node"


def _nccl_correctness(report: NcclReport, profile: Profile, scope: str) -> Finding | None:
    """What makes a finished run prove a fault, or prove nothing, whatever its bandwidth.

    Each rule reads one fact the parser exposes; every rule that holds is reported, the
    worst decides (a bandwidth shortfall is judged beside it, not hidden by it). A run whose
    results were not checked (``-c 0``: every out-of-place ``#wrong`` is ``N/A``) proves
    nothing about correctness, so ``wrong_results == 0`` must not read as "correct"; every
    level of every profile judges correctness (the collectives other than all_reduce are
    judged on nothing else), so this holds at quick, standard and full alike."""
    unchecked = [r.size_bytes for r in report.rows if r.wrong_oop is None]
    want_ranks = profile.gpu.count
    rules: tuple[tuple[bool, Verdict, str, Any], ...] = (
        (report.out_of_bounds is not None and report.out_of_bounds > 0, "fail",
         f"{report.out_of_bounds} out-of-bounds values: the collective wrote outside its buffers "
         "(memory corruption on the collective path)", report.out_of_bounds),
        (report.wrong_results > 0, "fail",
         f"{report.wrong_results} wrong results: data corruption on the collective path", report.wrong_results),
        (not report.validated or len(unchecked) == len(report.rows), "error",
         "results were not checked (every out-of-place #wrong is N/A: nccl-tests ran with -c 0); "
         "0 wrong results proves nothing", None),
        (report.validated and 0 < len(unchecked) < len(report.rows), "error",
         f"results not checked at {len(unchecked)} message size(s) (#wrong N/A, e.g. {unchecked[0] if unchecked else 0}"
         " bytes): a partly validated run is not a validated one", unchecked),
        (report.out_of_bounds is None, "error",
         "no '# Out of bounds values' line: whether the run wrote outside its buffers is unknown", None),
        (report.ranks is None, "error",
         "no '# Rank N ... on HOST' lines: which GPUs took part is unknown", None),
        (scope == "single_node" and report.ranks is not None and report.ranks != want_ranks, "error",
         f"{report.ranks} rank(s) took part; a single-node run of this SKU has {want_ranks} (one per GPU)",
         report.ranks),
        (scope == "multi_node" and len(report.hosts) < 2, "error",
         f"judged as multi-node, but every rank ran on {', '.join(report.hosts) or 'an unnamed host'}: "
         "a single-node run is not a multi-node one", report.hosts),
        (scope == "multi_node" and report.ranks is not None and report.ranks != want_ranks * len(report.hosts),
         "error", f"{report.ranks} rank(s) on {len(report.hosts)} hosts; each host of this SKU runs "
         f"{want_ranks} (one per GPU)", report.ranks),
    )
    hits = [(verdict, why, measured) for hit, verdict, why, measured in rules if hit]
    if not hits:
        return None
    verdict = worst([v for v, _, _ in hits])
    return Finding(f"nccl.{report.collective}", verdict, {"measured": [m for _, _, m in hits]},
                   {"out_of_bounds": 0, "wrong": 0, "validated": True, "ranks_per_host": profile.gpu.count},
                   "; ".join(why for _, why, _ in hits))


def judge_nccl(report: NcclReport, profile: Profile, scope: str | None = None) -> list[Finding]:
    lim = profile.nccl
    scope = scope or nccl_scope(report, profile)
    name = f"nccl.{report.collective}"
    if report.failures:
        return [Finding(name, "error", None, None, f"nccl-tests reported: {report.failures[0][:200]}")]
    if not report.complete:
        return [Finding(name, "error", report.peak_busbw, None,
                        "no 'Avg bus bandwidth' line: the run did not finish (truncated output)")]
    bad = _nccl_correctness(report, profile, scope)
    out = [bad] if bad is not None else []
    if report.collective != "all_reduce":
        return out or [Finding(name, "pass", report.peak_busbw, None,
                        f"no published busbw floor for {report.collective}; judged on correctness "
                        f"(validated, 0 wrong, 0 out of bounds, {report.ranks} ranks)")]
    big = [r for r in report.rows if r.size_bytes >= lim.single_node_min_size_bytes]
    if scope == "multi_node":
        threshold = lim.multi_node_per_nic_busbw_min_gbps * lim.nics_per_node
    else:
        threshold = lim.single_node_busbw_min_gbps
    if not big:
        return [*out, Finding(f"{name}.{scope}", "error", None, threshold,
                              f"no message size >= {lim.single_node_min_size_bytes} bytes was tested")]
    best = max(max(r.busbw_oop, r.busbw_ip) for r in big)
    ok = best >= threshold
    return [*out, Finding(f"{name}.{scope}", "pass" if ok else "fail", round(best, 2), threshold,
                    "" if ok else f"peak busbw {best:.2f} GB/s at >= 1 GiB is below {threshold:.2f} GB/s "
                    f"({scope.replace('_', '-')}, {report.ranks or '?'} ranks)")]


def judge_ib(report: IbReport, profile: Profile) -> list[Finding]:
    lim = profile.ib
    ports = [(ca.name, p) for ca in report.cas if ca.name not in lim.ignore_cas for p in ca.ports]
    measured = {f"{ca}:{p.port}": {"state": p.state, "physical_state": p.physical_state,
                                    "rate_gbps": p.rate_gbps, "link_layer": p.link_layer}
                for ca, p in ports}
    down = [f"{ca}:{p.port} {p.state}/{p.physical_state}" for ca, p in ports
            if p.state != "Active" or p.physical_state != "LinkUp"]
    full = [(ca, p) for ca, p in ports if p.state == "Active" and p.rate_gbps is not None
            and p.rate_gbps >= lim.rate_gbps and p.link_layer in lim.link_layers]
    threshold = {"ports_min": lim.ports_min, "rate_gbps": lim.rate_gbps}
    short = [f"{ca.name} announces {ca.ports_announced} port(s), lists {len(ca.ports)}" for ca in report.cas
             if ca.ports_announced is not None and ca.ports_announced != len(ca.ports)]
    if short:  # the parser refuses such output; a stored document that says so is re-judged the same
        return [Finding("ib.ports", "error", measured, threshold, "port list incomplete: " + "; ".join(short))]
    if down:
        # an unknown physical state (ibv_devinfo without -v) is not "up": the link was not seen,
        # which is an error (not measured) unless some port is measurably down
        unseen = all(p.state == "Active" and p.physical_state == "Unknown" for _, p in ports
                     if p.physical_state != "LinkUp")
        note = " (physical state not reported; run ibstat or ibv_devinfo -v)" if unseen else ""
        return [Finding("ib.ports", "error" if unseen else "fail", measured, threshold,
                        "ports not up: " + ", ".join(down) + note)]
    if len(full) < lim.ports_min:
        unknown_rate = any(p.rate_gbps is None for _, p in ports)
        verdict: Verdict = "error" if unknown_rate else "fail"
        return [Finding("ib.ports", verdict, measured, threshold,
                        f"{len(full)} of {lim.ports_min} ports Active at >= {lim.rate_gbps:g} Gb/s"
                        + (" (rate not reported; run ibv_devinfo -v)" if unknown_rate else ""))]
    return [Finding("ib.ports", "pass", measured, threshold, "")]


def _stressed_gpus(report: StressReport, profile: Profile) -> Finding:
    """Every GPU of the SKU was stressed, on the GPU: the stress runs on the GPUs torch sees, so
    ``CUDA_VISIBLE_DEVICES=0`` or a GPU the driver lost stresses fewer, and each of them passing
    says nothing of the others; a run on the CPU (``device_type`` other than ``cuda``) none."""
    indices = sorted({g.index for g in report.gpus})
    want = profile.gpu.count
    measured = {"device_type": report.device_type, "gpus": indices}
    if report.device_type != "cuda":
        return Finding("stress.gpus", "error", measured, want,
                       f"the stress ran on {report.device_type!r}, not on the GPUs")
    if len(indices) != want or len(indices) != len(report.gpus):
        return Finding("stress.gpus", "error", measured, want,
                       f"{len(indices)} distinct GPU(s) stressed ({len(report.gpus)} results); the SKU has {want}: "
                       "the others were not tested")
    return Finding("stress.gpus", "pass", measured, want, f"all {want} GPUs stressed")


def judge_stress(report: StressReport, profile: Profile) -> list[Finding]:
    lim = profile.stress
    if not report.gpus:
        return [Finding("stress", "error", None, None, "no GPU was stressed")]
    out: list[Finding] = [_stressed_gpus(report, profile)]
    checks: list[tuple[str, str, float]] = [
        ("h2d_gbps", "host-to-device copy GB/s", lim.h2d_min_gbps),
        ("d2h_gbps", "device-to-host copy GB/s", lim.d2h_min_gbps),
        ("hbm_gbps", "device memory copy GB/s (read+write)", lim.hbm_min_gbps),
        ("gemm_tflops", "GEMM TFLOP/s", lim.gemm_tflops_min),
    ]
    for attr, what, floor in checks:
        measured = {str(g.index): getattr(g, attr) for g in report.gpus}
        missing = [k for k, v in measured.items() if v is None]
        low = [f"GPU {k}: {v:.1f}" for k, v in measured.items() if v is not None and v < floor]
        if low:
            out.append(Finding(f"stress.{attr}", "fail", measured, floor, f"{what} below floor: {', '.join(low)}"))
        elif missing:
            errs = "; ".join(e for g in report.gpus for e in g.errors[:1])
            out.append(Finding(f"stress.{attr}", "error", measured, floor,
                               f"{what} not measured on GPU {', '.join(missing)} {errs}".strip()))
        else:
            out.append(Finding(f"stress.{attr}", "pass", measured, floor, ""))
    measured_v = {str(g.index): {"copies_verified": g.copy_verified, "gemm_mismatches": g.gemm_mismatches,
                                 "reference_ok": g.gemm_reference_ok,
                                 "reference_max_rel_error": g.gemm_reference_max_rel_error,
                                 "iterations": g.gemm_iterations} for g in report.gpus}
    wrong = [f"GPU {g.index}: " + ", ".join(
        w for w, bad in (("copy data corrupted", not g.copy_verified),
                         (f"{g.gemm_mismatches} GEMM results differ from the first", g.gemm_mismatches > 0),
                         ("GEMM disagrees with the CPU reference", not g.gemm_reference_ok),
                         ("no GEMM iteration ran", g.gemm_iterations == 0)) if bad)
        for g in report.gpus
        if not g.copy_verified or g.gemm_mismatches or not g.gemm_reference_ok or g.gemm_iterations == 0]
    if wrong:
        out.append(Finding("stress.verified", "fail", measured_v, "bit-exact copies; GEMM == first == reference",
                           "; ".join(wrong)))
    else:
        out.append(Finding("stress.verified", "pass", measured_v, "bit-exact copies; GEMM == first == reference", ""))
    return out

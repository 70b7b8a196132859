"""`dcgmi diag -r N [-j]` for a simulated node, in DCGM 3.x's formats.

The JSON document has the 3.x shape (``"DCGM GPU Diagnostic" > test_categories``)
of `fixtures/dcgm/virtualclient/DCGMIDiag_r*_results.json`: deployment checks
without GPU ids, one result per GPU for plugin tests, ``warnings`` on a
failure. The table form follows `h200x8_dcgmi-diag-r1_...txt`. Run levels add
tests the way DCGM's do (r1 deployment, r2 + PCIe and memory, r3 + diagnostic
and stress, r4 + extended). The answer comes at once: real r3 takes ~15 min.
"""

from __future__ import annotations

import argparse
import json
import textwrap
from typing import Any

from lifecycle.lab.gputools.state import Gpu, NodeState

DCGM_VERSION = "3.3.9"
FAILED = 1  # non-zero when a test failed; the exact value is the lab's choice, not DCGM's

DEPLOYMENT = (
    "Denylist", "NVML Library", "CUDA Main Library", "Permissions and OS Blocks",
    "Persistence Mode", "Environment Variables", "Page Retirement/Row Remap",
    "Graphics Processes", "Inforom",
)

Result = dict[str, str]


def _lost(g: Gpu) -> str | None:
    return f"GPU {g.index} is lost: it has fallen off the bus (Xid 79). Reboot the node." if g.lost else None


def _pcie(g: Gpu, s: NodeState) -> Result:
    scale = (0.5 ** (g.pcie_gen_max - g.pcie_gen)) * g.pcie_width / 16
    h2d = s.model.pcie_gbps * scale
    d2h = h2d * 1.003
    i = g.index
    res: Result = {
        "gpu_ids": str(i),
        "info": (f"GPU {i} GPU {i} GPU to Host bandwidth:\t\t{d2h:.2f} GB/s, "
                 f"GPU {i} GPU {i} Host to GPU bandwidth:\t\t{h2d:.2f} GB/s, "
                 f"GPU {i} GPU {i} bidirectional bandwidth:\t{h2d * 1.71:.2f} GB/s, "
                 f"GPU {i} GPU {i} GPU to Host latency:\t\t2.309 us, "
                 f"GPU {i} GPU {i} Host to GPU latency:\t\t2.401 us, "
                 f"GPU {i} GPU {i} bidirectional latency:\t\t4.621 us"),
        "status": "Pass",
    }
    if g.pcie_gen < g.pcie_gen_max or g.pcie_width < 16:
        res["status"] = "Fail"
        res["warnings"] = (f"GPU {i} PCIe link is Gen{g.pcie_gen} x{g.pcie_width}, below the expected "
                           f"Gen{g.pcie_gen_max} x16: host to GPU bandwidth {h2d:.2f} GB/s is below "
                           f"the minimum {s.model.pcie_gbps * 0.75:.2f} GB/s")
    return res


def _memory(g: Gpu, s: NodeState) -> Result:
    total = s.model.memory_mib * 1024 * 1024
    res: Result = {"gpu_ids": str(g.index), "info": f"GPU {g.index} Allocated {int(total * 0.973)} bytes (97.3%)",
                   "status": "Pass"}
    if g.dram_uncorrectable:
        res["status"] = "Fail"
        res["warnings"] = (f"GPU {g.index} had {g.dram_uncorrectable} uncorrectable DRAM ECC errors during "
                           "the memory test; the row remapper failed to remap a row. Drain and reset the GPU.")
    return res


def _targeted_power(g: Gpu, s: NodeState) -> Result:
    target = s.model.power_limit_w - 1
    minimum = 0.75 * target
    if s.fault.profile == "dcgm-power" and s.fault.gpu == g.index:
        achieved = round(minimum * 0.8, 1)
        return {"gpu_ids": str(g.index), "info": f"GPU {g.index} GPU {g.index} power average:\t{achieved:.0f} W",
                "status": "Fail",
                "warnings": (f"Max power of {achieved:.1f} did not reach desired power minimum "
                             f"target_power_min_ratio of {minimum:.1f} for GPU {g.index} because the enforced "
                             "power limit has been set to "
                             f"{s.model.power_limit_w} watts. Please check the power supply and cooling.")}
    achieved = round(target * 0.97)
    return {"gpu_ids": str(g.index), "info": f"GPU {g.index} GPU {g.index} power average:\t{achieved} W",
            "status": "Pass"}


def _simple(g: Gpu, s: NodeState, info: str) -> Result:
    return {"gpu_ids": str(g.index), "info": info.format(i=g.index), "status": "Pass"}


def _per_gpu(s: NodeState, gpus: list[Gpu], make: Any) -> list[Result]:
    out = []
    for g in gpus:
        lost = _lost(g)
        out.append({"gpu_ids": str(g.index), "status": "Fail", "warnings": lost} if lost else make(g, s))
    return out


def _deployment(s: NodeState, gpus: list[Gpu]) -> list[dict[str, Any]]:
    tests = []
    for name in DEPLOYMENT:
        result: Result = {"status": "Pass"}
        bad = [g for g in gpus if g.remap_failure]
        if name == "Page Retirement/Row Remap" and bad:
            result = {"gpu_ids": ",".join(str(g.index) for g in bad), "status": "Fail",
                      "warnings": ", ".join(f"GPU {g.index} had uncorrectable memory errors and row remapping "
                                            "failed. Run a field diagnostic on the GPU." for g in bad)}
        tests.append({"name": name, "results": [result]})
    return tests


def run(s: NodeState, level: int, gpus: list[Gpu]) -> dict[str, Any]:
    categories: list[dict[str, Any]] = [{"category": "Deployment", "tests": _deployment(s, gpus)}]
    if level >= 2:
        hardware = [{"name": "GPU Memory", "results": _per_gpu(s, gpus, _memory)}]
        if level >= 3:
            hardware += [
                {"name": "Diagnostic", "results": _per_gpu(s, gpus, lambda g, st: _simple(
                    g, st, "GPU {i} GPU {i} calculated at approximately 51103.02 gigaflops during this test"))},
                {"name": "EUD Test", "results": [{"gpu_ids": str(g.index), "status": "Skip"} for g in gpus]},
            ]
        if level >= 4:
            hardware += [
                {"name": "Pulse Test", "results": _per_gpu(s, gpus, lambda g, st: _simple(g, st, "GPU {i} pulse"))},
                {"name": "Memtest", "results": _per_gpu(s, gpus, lambda g, st: _simple(g, st, "GPU {i} memtest"))},
            ]
        categories += [
            {"category": "Integration", "tests": [{"name": "PCIe", "results": _per_gpu(s, gpus, _pcie)}]},
            {"category": "Hardware", "tests": hardware},
        ]
    if level >= 3:
        categories.append({"category": "Stress", "tests": [
            {"name": "Targeted Stress", "results": _per_gpu(s, gpus, lambda g, st: _simple(
                g, st, "GPU {i} GPU {i} relative stress level\t3184"))},
            {"name": "Targeted Power", "results": _per_gpu(s, gpus, _targeted_power)},
            {"name": "Memory Bandwidth", "results": _per_gpu(s, gpus, lambda g, st: _simple(
                g, st, "GPU {i} GPU {i} memory bandwidth\t3035.24 GB/s"))},
        ]})
    return {"DCGM GPU Diagnostic": {"test_categories": categories}}


def _table(doc: dict[str, Any], s: NodeState, gpus: list[Gpu]) -> str:
    sep = "+---------------------------+------------------------------------------------+"
    right = "+" + "-" * 48 + "|"
    rows = [("DCGM Version", DCGM_VERSION), ("Driver Version Detected", s.driver_version),
            ("GPU Device IDs Detected", ",".join(s.model.device_id[2:6] for _ in gpus))]
    out = ["Successfully ran diagnostic for group.", sep,
           "| Diagnostic                | Result                                         |",
           "+===========================+================================================+",
           "|" + "-----  Metadata  ".ljust(27, "-") + right]
    out += [f"| {k:<25} | {v:<46} |" for k, v in rows]
    for cat in doc["DCGM GPU Diagnostic"]["test_categories"]:
        out.append("|" + f"-----  {cat['category']}  ".ljust(27, "-") + right)
        for test in cat["tests"]:
            failed = [r for r in test["results"] if r["status"] == "Fail"]
            if all(r["status"] == "Skip" for r in test["results"]):
                verdict = "Skip - All"
            elif failed:
                verdict = "Fail" + (" - GPU: " + ", ".join(r["gpu_ids"] for r in failed if "gpu_ids" in r)
                                    if any("gpu_ids" in r for r in failed) else "")
            else:
                verdict = "Pass" + (" - All" if "gpu_ids" in test["results"][0] else "")
            out.append(f"| {test['name']:<25} | {verdict:<46} |")
            for r in failed:
                for i, chunk in enumerate(textwrap.wrap(r.get("warnings", ""), 46)):
                    out.append(f"| {'Warning' if i == 0 else '':<25} | {chunk:<46} |")
    out.append(sep)
    return "\n".join(out) + "\n"


def _failed(doc: dict[str, Any]) -> bool:
    return any(r["status"] == "Fail" for c in doc["DCGM GPU Diagnostic"]["test_categories"]
               for t in c["tests"] for r in t["results"])


def main(argv: list[str], s: NodeState) -> tuple[str, int]:
    if not argv or argv[0] != "diag":
        return "Usage: dcgmi diag -r <1|2|3|4> [-j] [-i <gpu list>]\n(only 'diag' is simulated in the lab)\n", 2
    p = argparse.ArgumentParser(prog="dcgmi diag", add_help=False)
    p.add_argument("-r", "--run", required=False)
    p.add_argument("-j", "--json", action="store_true")
    p.add_argument("-i", "--gpuList")
    p.add_argument("-g", "--group")
    p.add_argument("-v", "--verbose", action="store_true")
    args, _rest = p.parse_known_args(argv[1:])
    if args.run not in ("1", "2", "3", "4"):
        return f"Error: invalid run level '{args.run}'. Valid levels are 1, 2, 3 and 4.\n", 2
    gpus = list(s.gpus)
    if args.gpuList:
        wanted = {x.strip() for x in args.gpuList.split(",")}
        gpus = [g for g in s.gpus if str(g.index) in wanted]
        if not gpus:
            return f"Error: no GPU matches '{args.gpuList}'.\n", 2
    doc = run(s, int(args.run), gpus)
    text = json.dumps(doc, indent="\t") + "\n" if args.json else _table(doc, s, gpus)
    return text, FAILED if _failed(doc) else 0

"""nccl-tests (`all_reduce_perf` and friends) for a simulated node, single node only.

Output follows nccl-tests 2.x as captured in
`fixtures/nccl/h100x8_all_reduce_perf_single-node_nvls_issue290.txt`: the
settings line, one line per rank, the size table with out-of-place and
in-place columns, and the "Avg bus bandwidth" footer that checks grep for.
Timings come from a latency + bandwidth model calibrated on that capture
(H100 8-GPU NVLS: ~383 GB/s busbw at 128 MiB, ~476 GB/s at 4 GiB); busbw uses
the definitions in nccl-tests' doc/PERFORMANCE.md. A little jitter, seeded by
node and size, keeps runs repeatable.
"""

from __future__ import annotations

import argparse
import os
import random
import re

from lifecycle.lab.gputools.state import NodeState

# op -> (redop column, busbw factor of n ranks, share of the SKU's all_reduce peak busbw)
OPS: dict[str, tuple[str, str, float]] = {
    "all_reduce_perf": ("sum", "allreduce", 1.0),
    "all_gather_perf": ("none", "gather", 0.78),
    "reduce_scatter_perf": ("sum", "gather", 0.78),
    "alltoall_perf": ("none", "gather", 0.72),
}
_SIZE_RE = re.compile(r"^(\d+)([KMG]?)$", re.IGNORECASE)
_UNITS = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3}
TABLE_HEAD = [
    "#" + " " * 62 + "out-of-place" + " " * 23 + "in-place",
    "#       size         count      type   redop    root     time   algbw   busbw #wrong"
    "     time   algbw   busbw #wrong",
    "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)       "
    "     (us)  (GB/s)  (GB/s)",
]
LATENCY_US = 25.0
RAMP_US = 75.0
RAMP_BYTES = 16 * 1024**2


def parse_size(text: str) -> int:
    m = _SIZE_RE.match(text.strip())
    if not m:
        raise argparse.ArgumentTypeError(f"invalid size '{text}'")
    return int(m.group(1)) * _UNITS[m.group(2).upper()]


def bus_factor(kind: str, n: int) -> float:
    if n <= 1:
        return 0.0
    return 2 * (n - 1) / n if kind == "allreduce" else (n - 1) / n


def _time_str(us: float) -> str:
    if us >= 10000:
        return f"{us:7.0f}"
    if us >= 100:
        return f"{us:7.1f}"
    return f"{us:7.2f}"


def _sizes(lo: int, hi: int, factor: int, step: int) -> list[int]:
    out: list[int] = []
    size = lo
    while size <= hi and len(out) < 64:
        out.append(size)
        size = size * factor if factor > 1 else size + max(step, 1)
    return out


def main(tool: str, argv: list[str], s: NodeState) -> tuple[str, int]:
    p = argparse.ArgumentParser(prog=tool, add_help=False)
    p.add_argument("-b", "--minbytes", type=parse_size, default=32 * 1024**2)
    p.add_argument("-e", "--maxbytes", type=parse_size, default=32 * 1024**2)
    p.add_argument("-f", "--stepfactor", type=int, default=1)
    p.add_argument("-i", "--stepbytes", type=parse_size, default=1024**2)
    p.add_argument("-g", "--ngpus", type=int, default=1)
    p.add_argument("-t", "--nthreads", type=int, default=1)
    p.add_argument("-w", "--warmup_iters", type=int, default=5)
    p.add_argument("-n", "--iters", type=int, default=20)
    p.add_argument("-m", "--agg_iters", type=int, default=1)
    p.add_argument("-c", "--check", type=int, default=1)
    p.add_argument("-G", "--cudagraph", type=int, default=0)
    try:
        args, _rest = p.parse_known_args(argv)
    except SystemExit:
        return f"{tool}: invalid arguments\n", 1
    n = args.ngpus * args.nthreads
    header = (f"# nThread {args.nthreads} nGpus {args.ngpus} minBytes {args.minbytes} maxBytes {args.maxbytes} "
              + (f"step: {args.stepfactor}(factor)" if args.stepfactor > 1 else f"step: {args.stepbytes}(bytes)")
              + f" warmup iters: {args.warmup_iters} iters: {args.iters} agg iters: {args.agg_iters}"
              f" validation: {args.check} graph: {args.cudagraph}\n#\n")
    pid = os.getpid()
    if n > len(s.gpus):
        return header + f"{s.name}: Test CUDA failure common.cu:892 'invalid device ordinal'\n" \
                        f" .. {s.name} pid {pid}: Test failure common.cu:1041\n", 1
    lines = [header.rstrip("\n"), "# Using devices"]
    for r, g in enumerate(s.gpus[:n]):
        lines.append(f"#  Rank {r:>2} Group  0 Pid {pid:>6} on {s.name:>10} device {r:>2} [0x{g.bus:02x}] {g.name}")
    lines.append("#")
    broken = [g for g in s.gpus[:n] if g.lost or g.dram_uncorrectable]
    if broken:
        why = "unknown error" if broken[0].lost else "uncorrectable ECC error encountered"
        lines += [f"{s.name}: Test CUDA failure common.cu:892 '{why}'",
                  f" .. {s.name} pid {pid}: Test failure common.cu:1041"]
        return "\n".join(lines) + "\n", 1
    redop, kind, share = OPS[tool]
    factor = bus_factor(kind, n)
    peak_bus = s.model.busbw_gbps * share * s.busbw_factor()
    peak_alg = peak_bus / factor if factor else s.model.busbw_gbps  # 1 GPU: a local copy
    lines += TABLE_HEAD
    align = 4 * (n if kind == "gather" else 1)
    rng = random.Random(f"{s.name}/{tool}/{n}")
    total = 0.0
    count_bw = 0
    for size in _sizes(args.minbytes, args.maxbytes, args.stepfactor, args.stepbytes):
        size = size // align * align
        count = size // 4 // (n if kind == "gather" else 1)
        row = f"{size:>12}  {count:>12}  {'float':>8}  {redop:>6}  {-1:>6}"
        for _place in ("out", "in"):
            us = (LATENCY_US + RAMP_US * size / (size + RAMP_BYTES) + size / (peak_alg * 1e3)) \
                * rng.uniform(0.995, 1.01)
            alg = size / 1e3 / us
            bus = alg * factor
            total += bus
            count_bw += 1
            row += f"  {_time_str(us)}  {alg:6.2f}  {bus:6.2f}  {0:>5}"
        lines.append(row)
    avg = total / count_bw if count_bw else 0.0
    lines += ["# Out of bounds values : 0 OK", f"# Avg bus bandwidth    : {avg:.3f}", "#", ""]
    return "\n".join(lines) + "\n", 0

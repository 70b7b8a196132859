"""nccl-tests (`all_reduce_perf` and friends) for a simulated node, alone or across nodes.

Output follows nccl-tests 2.x as captured in
`fixtures/nccl/h100x8_all_reduce_perf_single-node_nvls_issue290.txt`: the
settings line, one line per rank, the size table with out-of-place and
in-place columns, and the "Avg bus bandwidth" footer that checks grep for.
Timings come from a latency + bandwidth model calibrated on that capture
(H100 8-GPU NVLS: ~383 GB/s busbw at 128 MiB, ~476 GB/s at 4 GiB); busbw uses
the definitions in nccl-tests' doc/PERFORMANCE.md. A little jitter, seeded by
node and size, keeps runs repeatable. Under ``srun`` across several nodes, rank 0
prints the run of all ranks at the pace of the slowest participant
(:mod:`lifecycle.lab.gputools.multinode`).
"""

from __future__ import annotations

import argparse
import os
import random
import re
from collections.abc import Sequence

from lifecycle.lab.gputools.multinode import SlurmStep, collective_limit
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


def _args(tool: str, argv: list[str]) -> argparse.Namespace | None:
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
        return None
    return args


def _header(args: argparse.Namespace) -> str:
    return (f"# nThread {args.nthreads} nGpus {args.ngpus} minBytes {args.minbytes} maxBytes {args.maxbytes} "
            + (f"step: {args.stepfactor}(factor)" if args.stepfactor > 1 else f"step: {args.stepbytes}(bytes)")
            + f" warmup iters: {args.warmup_iters} iters: {args.iters} agg iters: {args.agg_iters}"
            f" validation: {args.check} graph: {args.cudagraph}")


def _cuda_failure(s: NodeState, per_node: int, pid: int) -> list[str]:
    broken = [g for g in s.gpus[:per_node] if g.lost or g.dram_uncorrectable]
    if not broken:
        return []
    why = "unknown error" if broken[0].lost else "uncorrectable ECC error encountered"
    return [f"{s.name}: Test CUDA failure common.cu:892 '{why}'",
            f" .. {s.name} pid {pid}: Test failure common.cu:1041"]


def _table(tool: str, args: argparse.Namespace, n: int, peak_bus: float, seed: str) -> list[str]:
    redop, kind, _share = OPS[tool]
    factor = bus_factor(kind, n)
    peak_alg = peak_bus / factor if factor else peak_bus  # 1 GPU: a local copy
    lines = list(TABLE_HEAD)
    align = 4 * (n if kind == "gather" else 1)
    rng = random.Random(seed)
    total = 0.0
    count_bw = 0
    for size in _sizes(args.minbytes, args.maxbytes, args.stepfactor, args.stepbytes):
        size = size // align * align
        count = size // 4 // (n if kind == "gather" else 1)
        row = f"{size:>12}  {count:>12}  {'float':>8}  {redop:>6}  {-1:>6}"
        for _place in ("out", "in"):
            us = (LATENCY_US + RAMP_US * size / (size + RAMP_BYTES) + size / (max(peak_alg, 1e-3) * 1e3)) \
                * rng.uniform(0.995, 1.01)
            alg = size / 1e3 / us
            bus = alg * factor
            total += bus
            count_bw += 1
            row += f"  {_time_str(us)}  {alg:6.2f}  {bus:6.2f}  {0:>5}"
        lines.append(row)
    avg = total / count_bw if count_bw else 0.0
    return [*lines, "# Out of bounds values : 0 OK", f"# Avg bus bandwidth    : {avg:.3f}", "#", ""]


def main(tool: str, argv: list[str], s: NodeState) -> tuple[str, int]:
    """One node's run (``-g`` GPUs of this node)."""
    args = _args(tool, argv)
    if args is None:
        return f"{tool}: invalid arguments\n", 1
    n = args.ngpus * args.nthreads
    header = _header(args) + "\n#\n"
    pid = os.getpid()
    if n > len(s.gpus):
        return header + f"{s.name}: Test CUDA failure common.cu:892 'invalid device ordinal'\n" \
                        f" .. {s.name} pid {pid}: Test failure common.cu:1041\n", 1
    lines = [header.rstrip("\n"), "# Using devices"]
    for r, g in enumerate(s.gpus[:n]):
        lines.append(f"#  Rank {r:>2} Group  0 Pid {pid:>6} on {s.name:>10} device {r:>2} [0x{g.bus:02x}] {g.name}")
    lines.append("#")
    failure = _cuda_failure(s, n, pid)
    if failure:
        return "\n".join(lines + failure) + "\n", 1
    _redop, _kind, share = OPS[tool]
    peak_bus = s.model.busbw_gbps * share * s.busbw_factor()
    lines += _table(tool, args, n, peak_bus, f"{s.name}/{tool}/{n}")
    return "\n".join(lines) + "\n", 0


def main_multinode(tool: str, argv: list[str], step: SlurmStep, states: Sequence[NodeState]) -> tuple[str, int]:
    """Rank 0's output of a run across ``step.nodes`` (one or more tasks per node, ``-g`` GPUs each).

    Ranks other than 0 print nothing, as nccl-tests' non-root ranks do.
    """
    if step.procid != 0:
        return "", 0
    args = _args(tool, argv)
    if args is None:
        return f"{tool}: invalid arguments\n", 1
    per_node = step.tasks_per_node * args.ngpus * args.nthreads
    n = per_node * len(states)
    lines = [_header(args), "#", "# Using devices"]
    base = os.getpid()
    for i, st in enumerate(states):
        pid = base if i == 0 else 100000 + int.from_bytes(st.name.encode()[-3:]) % 800000
        if per_node > len(st.gpus):
            return "\n".join([*lines, f"{st.name}: Test CUDA failure common.cu:892 'invalid device ordinal'",
                              f" .. {st.name} pid {pid}: Test failure common.cu:1041", ""]), 1
        for local, g in enumerate(st.gpus[:per_node]):
            rank = i * per_node + local
            lines.append(f"#  Rank {rank:>2} Group  0 Pid {pid + local:>6} on {st.name:>10} device {local:>2} "
                         f"[0x{g.bus:02x}] {g.name}")
    lines.append("#")
    for st in states:
        failure = _cuda_failure(st, per_node, base)
        if failure:
            return "\n".join(lines + failure) + "\n", 1
        if not any(h.up for h in st.hcas):
            return "\n".join([*lines, f"{st.name}: NCCL WARN NET/IB : No device found.",
                              f"{st.name}: Test NCCL failure common.cu:958 'unhandled system error'",
                              f" .. {st.name} pid {base}: Test failure common.cu:1041", ""]), 1
    _redop, _kind, share = OPS[tool]
    limit = collective_limit(states, share)
    lines += _table(tool, args, n, limit.busbw_gbps, f"{'+'.join(x.name for x in states)}/{tool}/{n}")
    return "\n".join(lines) + "\n", 0

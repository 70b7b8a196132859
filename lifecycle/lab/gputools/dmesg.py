"""`dmesg` for a simulated node: the kernel lines GPU health checks scan for.

Health checks grep the kernel log for `NVRM: Xid (PCI:...): N,` (the regex
gpud and NHC use) and for PCIe links that trained below their capability. The
lines here copy the wording of `fixtures/xid/*` (Xid 48/63 text from
`gpud_tail_dmesg.0.log`) and the kernel's PCIe bandwidth notice. Timestamps
count from the node's simulated boot; `-T`/`--ctime` and
`--time-format iso` print wall-clock time as the real tool does. A fault's
lines carry the time it was injected (30 s after boot for one present at
boot), so the same line reads the same on every call, as a real log's does:
the repair collector keys events on it. A GPU reset clears the fault but not
the kernel log (:data:`lifecycle.lab.faults.KERNEL_LOG_FILE`): its Xid lines
stay, at their time, until the node boots again, so a check that reads the
whole log after a reset sees them, as it would on a real node.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

from lifecycle.lab.gputools.state import Gpu, NodeState

# Gb/s per lane the kernel reports for each PCIe generation (pcie_bandwidth_available()).
LANE_GBPS = {3: 7.876, 4: 15.753, 5: 31.507}
GT_S = {3: "8.0", 4: "16.0", 5: "32.0"}


def _since_boot(s: NodeState, at: float | None) -> float:
    """When, after boot, the kernel logged a fault set at ``at`` (30 s for one present at boot)."""
    if s.booted_at and at and at > s.booted_at + 30.0:
        return at - s.booted_at
    return 30.0


def _xid_lines(g: Gpu, t: float) -> list[tuple[float, str]]:
    """The kernel's lines for a GPU's fault, logged at ``t`` seconds after boot."""
    pci = f"PCI:0000:{g.bus:02x}:00"
    out: list[tuple[float, str]] = []
    if g.lost:
        out += [
            (t, f"NVRM: Xid ({pci}): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."),
            (t, f"NVRM: GPU 0000:{g.bus:02x}:00.0: GPU has fallen off the bus."),
            (t, "NVRM: A GPU crash dump has been created. If possible, please run"),
            (t, "NVRM: nvidia-bug-report.sh as root to collect this data before"),
            (t, "NVRM: the NVIDIA kernel module is unloaded."),
        ]
    if g.remap_failure:
        addr = 0x12BAC1C3E0 + g.index * 0x1000
        out += [
            (t, f"NVRM: Xid ({pci}): 48, pid='<unknown>', name=<unknown>, An uncorrectable double bit "
                f"error (DBE) has been detected on GPU in the framebuffer at physAddr 0x{addr:x} "
                "partition 2, subpartition 1."),
            (t + 0.03, f"NVRM: Xid ({pci}): 64, pid='<unknown>', name=<unknown>, Row Remapper: "
                       f"Failed to remap row (0x{addr:016x}), no spare rows available."),
        ]
    return out


def events(s: NodeState, now: float) -> list[tuple[float, str]]:
    out: list[tuple[float, str]] = [
        (0.0, "Linux version 6.1.0-27-amd64 (debian-kernel@lists.debian.org) (gcc-12 (Debian 12.2.0-14) "
              "12.2.0, GNU ld (GNU Binutils for Debian) 2.40) #1 SMP PREEMPT_DYNAMIC Debian 6.1.115-1"),
        (4.112, "nvidia: loading out-of-tree module taints kernel."),
        (4.305, "nvidia-nvlink: Nvlink Core is being initialized, major device number 236"),
        (4.377, f"NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  {s.driver_version}  Release Build  "
                "(dvs-builder@U16-I1-N07-12-3)  Tue Oct 15 00:00:00 UTC 2024"),
    ]
    for at, was in s.logged:  # cleared by a GPU reset since; the log keeps them until the next boot
        out += _xid_lines(was, _since_boot(s, at))
    for g in s.gpus:
        if g.pcie_gen < g.pcie_gen_max or g.pcie_width < 16:
            avail = LANE_GBPS[g.pcie_gen] * g.pcie_width
            full = LANE_GBPS[g.pcie_gen_max] * 16
            out.append((2.2 + g.index / 100,
                        f"pci 0000:{g.bus:02x}:00.0: {avail:.3f} Gb/s available PCIe bandwidth, limited by "
                        f"{GT_S[g.pcie_gen]} GT/s PCIe x{g.pcie_width} link at 0000:{g.bus - 1:02x}:00.0 "
                        f"(capable of {full:.3f} Gb/s with {GT_S[g.pcie_gen_max]} GT/s PCIe x16 link)"))
        out += _xid_lines(g, _since_boot(s, s.fault_at))
    for h in s.hcas:
        out.append((3.0 + h.index / 100, f"mlx5_core 0000:{0x1a + h.index * 0x10:02x}:00.0: firmware version: "
                                         f"{h.firmware}"))
    return sorted(out, key=lambda e: e[0])


def main(argv: list[str], s: NodeState) -> tuple[str, int]:
    now = time.time()
    known = [t for t in (s.fault_at, *(at for at, _ in s.logged)) if t]
    boot = s.booted_at or (min(known) - 60.0 if known else now - 60.0)  # not booted: a stable stand-in
    ctime = "-T" in argv or "--ctime" in argv
    iso = "--time-format=iso" in argv or ("--time-format" in argv and "iso" in argv)
    lines = []
    for t, msg in events(s, now):
        if ctime:
            stamp = "[" + time.strftime("%a %b %d %H:%M:%S %Y", time.localtime(boot + t)) + "]"
        elif iso:
            stamp = datetime.fromtimestamp(boot + t, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S,%f+00:00")
        else:
            stamp = f"[{t:12.6f}]"
        lines.append(f"{stamp} {msg}")
    return "\n".join(lines) + "\n", 0

"""Hardware facts per SKU that the controller needs (GPU count, GRES type, host size).

Burn-in thresholds live in ``burnin/profiles``; this table only says what a
node of a SKU *is*, so that inventory validation, Slurm rendering and the
inspect step agree on it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Sku:
    name: str
    gpu_model: str
    gpu_count: int
    gres_type: str
    cpus: int
    memory_gib: int
    ib_ports: int
    ib_rate_gbps: int
    nvlink_domain_size: int
    gpu_reset: bool = True
    """Whether racklife may reset the node's GPUs on their own (``nvidia-smi -r``) as a repair."""
    gpu_reset_note: str = ""
    """Why not, when it may not."""


SKUS: dict[str, Sku] = {
    s.name: s
    for s in (
        Sku("h100-sxm-8", "NVIDIA H100 80GB HBM3", 8, "h100", 224, 2048, 8, 400, 8),
        Sku("h200-sxm-8", "NVIDIA H200", 8, "h200", 224, 2048, 8, 400, 8),
        Sku("a100-sxm-8", "NVIDIA A100-SXM4-80GB", 8, "a100", 256, 2048, 8, 200, 8),
        Sku("b200-8", "NVIDIA B200", 8, "b200", 224, 2048, 8, 400, 8),
        # Project choice, not a measured limit: a GB200 tray's GPUs are four of the 72 in one NVLink domain
        # spanning the rack (NVLink switch trays, IMEX channels shared with the other trays' jobs), so a
        # reset from one tray is not done; its GPU faults are repaired by a reboot instead.
        Sku("gb200-nvl72-tray", "NVIDIA GB200", 4, "gb200", 144, 960, 4, 400, 72, gpu_reset=False,
            gpu_reset_note="its GPUs share an NVLink domain with the rest of the NVL72 rack; reboot it instead"),
    )
}


def known_skus() -> list[str]:
    return sorted(SKUS)

"""What the lab declares about itself: its inventory and the burn-in profile its fake GPUs can meet.

The lab's inventory is the document every other racklife command reads, so it
is built here from what the lab really created (addresses, MACs, BMC
endpoints), never guessed: three quarters of the simulated nodes in
``training`` (Slurm), the rest in ``inference`` (Kubernetes) unless the lab
was asked for another count (``--inference N``), and the QEMU
node, when there is one, in the built-in ``spare`` pool (no scheduler: its
minimal image runs no slurmd or kubelet).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from pathlib import Path

from lifecycle.lab import netns
from lifecycle.model.inventory import Inventory, parse_inventory

VM_POOL = "spare"


def build_inventory(names: Sequence[str], rack_count: int, sku: str, nets: dict[str, netns.NodeNet],
                    bmcs: dict[str, tuple[str, str]], credentials: Path, vm: str | None = None,
                    inference: int | None = None) -> Inventory:
    """The lab's inventory; ``vm`` names the QEMU node (its net and BMC are in ``nets`` and ``bmcs``);
    ``inference``: how many of the last nodes are in ``inference`` (None: a quarter)."""
    training = len(names) - (len(names) // 4 if inference is None else inference)
    per_rack = math.ceil(len(names) / rack_count)
    everyone = [*names, *([vm] if vm else [])]
    nodes = []
    for i, name in enumerate(everyone):
        driver, address = bmcs[name]
        net = nets[name]
        rack_index = min(i // per_rack, rack_count - 1)
        pool = VM_POOL if name == vm else ("training" if i < training else "inference")
        nodes.append({
            "name": name, "serial": f"LAB{i + 1:05d}", "rack": f"rack-{rack_index + 1}",
            "u": 1 + (i - rack_index * per_rack) * 2, "sku": sku, "pool": pool,
            "bmc": {"driver": driver, "address": address, "credentials": f"file:{credentials}"},
            "nics": [{"name": "eth0", "mac": net.mac, "role": "boot", "ip": net.address}],
            "boot_ip": net.address, "topology": {"leaf": f"leaf-{rack_index + 1}"},
        })
    doc = {
        "site": {"name": "lab", "location": "racklife lab (emulated)"},
        "racks": [{"name": f"rack-{r + 1}"} for r in range(rack_count)],
        "pools": {"training": {"scheduler": "slurm", "partition": "training"},
                  "inference": {"scheduler": "kubernetes", "labels": {"racklife.io/pool": "inference"}}},
        "nodes": nodes,
    }
    return parse_inventory(json.dumps(doc), "<lab inventory>")


def write_lab_profile(sku: str, out: Path) -> Path:
    """The SKU's burn-in profile as the lab can meet it: no GPU soak, no NVLink link count.

    Lab GPUs are fake tools: there is nothing to run a GEMM on and the fake
    nvidia-smi reports no NVLink links. Every other threshold is the SKU's own.
    """
    from importlib import resources

    text = resources.files("burnin.profiles").joinpath(f"{sku}.toml").read_text(encoding="utf-8")
    checks = '["gpu", "kernel_xid", "ib", "dcgm", "nccl", "stress", "xid_events"]'
    if text.count(checks) != 3 or "nvlink_active_links = " not in text:
        raise RuntimeError(f"profile {sku} changed shape; update write_lab_profile")
    text = text.replace(checks, '["gpu", "kernel_xid", "ib", "dcgm", "nccl"]')
    text = re.sub(r"nvlink_active_links = \d+", "nvlink_active_links = 0", text, count=1)
    text = text.replace(f'name = "{sku}"', f'name = "lab-{sku}"', 1)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("# Derived by the racklife lab from " + sku + ": no GPU soak, no NVLink count.\n" + text)
    return out

"""Benchmark: racklife's own overhead for taking idle nodes out of Slurm and back.

Starts a real lab cluster (33 slurmd), then times ``leave`` (drain, check for
jobs, wait for ``drained``) followed by ``resume_if_ours`` for one idle node,
repeated, and for 32 nodes in one call. Idle nodes have no jobs, so the time
measured is racklife plus slurmctld round trips, not job run time.
Goal (issue 8): under 2 s of racklife overhead per node.

    sudo /work/venv/bin/python bench/slurm.py [--repeat 10]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from lifecycle.drivers.slurm.driver import SlurmDriver
from lifecycle.drivers.slurm.leave import leave
from lifecycle.drivers.slurm.runner import CommandRunner
from lifecycle.lab.slurm import LabSlurm, LabSlurmConfig
from lifecycle.model.inventory import Inventory

NODES = 33


def inventory() -> Inventory:
    nodes: list[dict[str, Any]] = [
        {
            "name": f"bn-{i:03d}", "serial": f"B{i:05d}", "rack": "r01" if i <= 17 else "r02",
            "u": 1 + (i - 1) % 17 * 2, "sku": "h100-sxm-8", "pool": "training",
            "bmc": {"driver": "redfish", "address": f"https://10.30.0.{i}",
                    "credentials": "env:BMC_PASSWORD"},
            "nics": [{"name": "eno1", "mac": f"02:00:00:00:01:{i:02x}", "role": "boot"}],
            "topology": {"leaf": "la" if i <= 17 else "lb", "spine": "s1"},
        }
        for i in range(1, NODES + 1)
    ]
    return Inventory.model_validate({
        "site": {"name": "bench"},
        "racks": [{"name": "r01"}, {"name": "r02"}],
        "pools": {"training": {"scheduler": "slurm", "partition": "train"}},
        "nodes": nodes,
    })


def cycle(driver: SlurmDriver, names: list[str], run_id: str) -> float:
    t0 = time.perf_counter()
    report = leave(driver, names, run_id=run_id, reason="bench", policy="requeue",
                   deadline_s=0, poll_s=0.05, settle_s=30)
    if not report.complete:
        raise RuntimeError(f"leave incomplete: {report.to_dict()}")
    driver.resume_if_ours(names, run_id=run_id)
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=10)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="rlb-", dir="/tmp"))
    lab = LabSlurm(LabSlurmConfig(inventory=inventory(), root=root, ready_timeout_s=60))
    t0 = time.perf_counter()
    lab.start()
    startup = time.perf_counter() - t0
    try:
        runner = CommandRunner(env=lab.env())
        driver = SlurmDriver(runner)
        one = [cycle(driver, ["bn-001"], f"b1-{i}") for i in range(args.repeat)]
        calls_before = runner.calls
        many_names = [f"bn-{i:03d}" for i in range(2, 34)]
        many = [cycle(driver, many_names, f"b32-{i}") for i in range(max(1, args.repeat // 3))]
        calls_32 = (runner.calls - calls_before) / max(1, args.repeat // 3)
    finally:
        lab.remove()
    print(json.dumps({
        "cluster_start_s": round(startup, 3),
        "one_node_leave_resume_s": {"median": round(statistics.median(one), 3),
                                    "max": round(max(one), 3), "runs": len(one)},
        "32_nodes_leave_resume_s": {"median": round(statistics.median(many), 3),
                                    "max": round(max(many), 3), "runs": len(many),
                                    "per_node": round(statistics.median(many) / 32, 4),
                                    "slurm_commands_per_cycle": calls_32},
    }, indent=2))


if __name__ == "__main__":
    main()

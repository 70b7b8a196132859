"""The lab's driver install hook: a node's NVIDIA driver changed the way a package install changes it.

racklife installs a GPU driver through the site's hook
``RACKLIFE_DRIVER_INSTALL_CMD`` with the node's name and the version
appended (``drivers/nvidia_driver``); ``racklife lab env`` exports this
module as the lab's. On a real node an install puts the new kernel modules
on disk and the running driver stays the old one until the node reboots;
here the version is written to the node's ``driver-installed.json`` and the
simulated node loads it at its next boot (``SimNode``: its ``node.json``,
which every fake GPU tool reads, then names it). So the fakes report the new
driver only after racklife has power-cycled the node through its BMC.

The fault ``driver-unapplied`` (``racklife lab fault NODE driver-unapplied``)
makes the install lie: the hook says it installed the version and exits 0,
but nothing changes, and the node boots its old driver again. That is what
racklife's read-back has to catch. Every call is logged to
``driver-installs.log`` under the lab directory (one line: node, version,
what was done).

    python -m lifecycle.lab.driver_install --lab-dir DIR NODE VERSION
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from lifecycle.drivers.nvidia_driver import check_version
from lifecycle.lab.faults import read_fault
from lifecycle.model import vocab

INSTALLED_FILE = "driver-installed.json"
LOG_FILE = "driver-installs.log"
UNAPPLIED = "driver-unapplied"


def installed(node_dir: Path) -> str | None:
    """The driver version installed on the node's disk (loaded at its next boot); None: the lab's own."""
    try:
        data = json.loads((node_dir / INSTALLED_FILE).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    return str(data["version"])


def install(lab_dir: Path, node: str, version: str) -> str:
    """Install ``version`` on ``node`` (or, with the fault, pretend to); what the hook prints."""
    if not vocab.is_node_name(node):
        raise ValueError(f"{node!r} is not a valid node name")
    version = check_version(version)
    node_dir = lab_dir / "nodes" / node
    if not node_dir.is_dir():
        raise ValueError(f"{node} is not a node of the lab in {lab_dir}")
    lying = read_fault(node_dir).profile == UNAPPLIED
    if not lying:
        tmp = node_dir / f".{INSTALLED_FILE}.tmp"
        tmp.write_text(json.dumps({"version": version, "at": time.time()}) + "\n", encoding="utf-8")
        tmp.replace(node_dir / INSTALLED_FILE)
    with (lab_dir / LOG_FILE).open("a", encoding="utf-8") as log:
        log.write(f"{node} {version} {'unapplied (fault ' + UNAPPLIED + ')' if lying else 'installed'}\n")
    return f"nvidia-driver {version} installed on {node}; loaded at the next boot"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lifecycle.lab.driver_install")
    parser.add_argument("--lab-dir", type=Path, required=True)
    parser.add_argument("node")
    parser.add_argument("version")
    args = parser.parse_args(argv)
    try:
        print(install(args.lab_dir, args.node, args.version))
    except (ValueError, OSError) as exc:
        print(f"driver install: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())

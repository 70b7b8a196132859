"""The one entry point behind every fake tool, and the writer of a node's ``bin/``.

The tool is the name it was called as (``argv[0]``, i.e. the symlink's name)
and the node is the directory above the symlink, so a tool needs no
environment: `ssh node nvidia-smi` works as long as the node's ``bin/`` is on
PATH.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from lifecycle.lab.gputools import TOOLS, dcgmi, dmesg, ib, nccl, nvsmi
from lifecycle.lab.gputools.state import load

LAUNCHER = "gputool"


def run(tool: str, argv: list[str], node_dir: Path) -> tuple[str, int]:
    s = load(node_dir)
    if tool == "nvidia-smi":
        return nvsmi.main(argv, s)
    if tool == "dcgmi":
        return dcgmi.main(argv, s)
    if tool in nccl.OPS:
        return nccl.main(tool, argv, s)
    if tool == "ibstat":
        return ib.ibstat(argv, s)
    if tool == "ibv_devinfo":
        return ib.ibv_devinfo(argv, s)
    if tool == "dmesg":
        return dmesg.main(argv, s)
    return f"{tool}: not a lab tool (known: {', '.join(TOOLS)})\n", 127


def main() -> int:
    called = Path(sys.argv[0])
    text, code = run(called.name, sys.argv[1:], called.absolute().parent.parent)
    sys.stdout.write(text)
    sys.stdout.flush()
    return code


def install(bin_dir: Path, python: str = sys.executable) -> None:
    """Write the launcher and one symlink per tool into ``bin_dir`` (idempotent)."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    launcher = bin_dir / LAUNCHER
    launcher.write_text(
        f"#!{python}\n"
        "import sys\n"
        "from lifecycle.lab.gputools.cli import main\n"
        "sys.exit(main())\n",
        encoding="utf-8",
    )
    launcher.chmod(0o755)
    for tool in TOOLS:
        link = bin_dir / tool
        if link.is_symlink() or link.exists():
            link.unlink()
        os.symlink(LAUNCHER, link)

"""The one entry point behind every fake tool, and the writer of a node's ``bin/``.

The tool is the name it was called as (``argv[0]``, i.e. the symlink's name)
and the node is the directory above the symlink, so a tool needs no
environment: `ssh node nvidia-smi` works as long as the node's ``bin/`` is on
PATH. Under Slurm the node is the one slurmd names (``SLURMD_NODENAME``), since
every lab slurmd runs on the same host and any node's ``bin/`` may be the one
started.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from lifecycle.lab.gputools import TOOLS, dcgmi, dmesg, ib, mpirun, multinode, nccl, nvme, nvsmi, reset, timing
from lifecycle.lab.gputools.state import NODE_FILE, NodeState, load

LAUNCHER = "gputool"


def _nccl(tool: str, argv: list[str], node_dir: Path, env: Mapping[str, str]) -> tuple[str, int]:
    step = multinode.slurm_step(env)
    if step is None or len(step.nodes) < 2:
        return nccl.main(tool, argv, load(node_dir))
    if step.procid != 0:
        return "", 0
    dirs = [node_dir.parent / n for n in step.nodes]
    missing = [d.name for d in dirs if not (d / NODE_FILE).is_file()]
    if missing:
        return f"{tool}: step nodes are not lab nodes: {', '.join(missing)}\n", 1
    return nccl.main_multinode(tool, argv, step, [load(d) for d in dirs])


def run(tool: str, argv: list[str], node_dir: Path, env: Mapping[str, str] | None = None,
        sleep: Callable[[float], None] = time.sleep) -> tuple[str, int]:
    """The tool's output and exit code, after the real tool's time when the lab asks for it
    (:mod:`lifecycle.lab.gputools.timing`)."""
    env = os.environ if env is None else env
    with reset.using_gpus(node_dir, tool):
        if _is_reset(tool, argv):
            scale, table = timing.settings(node_dir, env)
            if scale > 0:  # the reset takes its time before it answers (the GPU is checked when it ends)
                sleep(scale * table["nvidia-smi.reset"])
            return _reset(argv, node_dir)
        text, code = _answer(tool, argv, node_dir, env)
        scale, table = timing.settings(node_dir, env)
        if scale > 0:
            seconds = scale * timing.tool_seconds(tool, argv, text, table)
            if seconds > 0:
                sleep(seconds)
    return text, code


def _is_reset(tool: str, argv: list[str]) -> bool:
    return tool == "nvidia-smi" and ("-r" in argv or "--gpu-reset" in argv)


def _reset(argv: list[str], node_dir: Path) -> tuple[str, int]:
    """``nvidia-smi -r [-i ID]`` (or ``--gpu-reset``); nothing else may be asked with it."""
    rest = [a for a in argv if a not in ("-r", "--gpu-reset")]
    wanted = None
    if rest[:1] in (["-i"], ["--id"]) and len(rest) == 2:
        wanted = rest[1]
    elif len(rest) == 1 and rest[0].startswith("--id="):
        wanted = rest[0].split("=", 1)[1]
    elif rest:
        return f"Invalid combination of input arguments: {' '.join(rest)}\n", nvsmi.INVALID_ARGUMENT
    return reset.reset(node_dir, wanted)


def _answer(tool: str, argv: list[str], node_dir: Path, env: Mapping[str, str]) -> tuple[str, int]:
    if tool in nccl.OPS:
        return _nccl(tool, argv, node_dir, env)
    if tool == "mpirun":
        return mpirun.main(argv, node_dir)
    if tool == "nvme":
        return nvme.main(argv, node_dir)
    s = load(node_dir)
    if tool == "nvidia-smi":
        return nvsmi.main(argv, s)
    if tool == "dcgmi":
        return dcgmi.main(argv, s)
    if tool == "ibstat":
        return ib.ibstat(argv, s)
    if tool == "ibv_devinfo":
        return ib.ibv_devinfo(argv, s)
    if tool == "dmesg":
        return dmesg.main(argv, s)
    if tool == "dmidecode":
        return dmidecode(argv, s)
    return f"{tool}: not a lab tool (known: {', '.join(TOOLS)})\n", 127


def dmidecode(argv: list[str], s: NodeState) -> tuple[str, int]:
    """``dmidecode -s system-serial-number``, the one question burn-in asks of it."""
    if argv != ["-s", "system-serial-number"]:
        return "dmidecode: only '-s system-serial-number' is simulated in the lab\n", 2
    if s.serial is None:
        return "Not Specified\n", 0  # what firmware without a serial says
    return f"{s.serial}\n", 0


def main() -> int:
    called = Path(sys.argv[0])
    text, code = run(called.name, sys.argv[1:], multinode.node_dir(called.absolute().parent.parent, os.environ))
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

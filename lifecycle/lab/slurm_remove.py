"""The lab's slurm.conf hook for decommission: take a node out of the lab's Slurm files and restart slurmctld.

Slurm 22.05 cannot forget a node that slurm.conf defines while slurmctld
runs (``scontrol delete`` is for dynamic nodes; ``reconfigure`` with another
node count stops slurmctld). A site does it by re-rendering the files and
restarting slurmctld (racklife's ``slurm_controller`` role); racklife runs that
as the hook ``RACKLIFE_SLURM_CONF_CMD`` with the node's name appended. This
is the lab's hook (``racklife lab env`` exports it): the node is taken out of
every node list in slurm.conf, gres.conf and topology.conf, and slurmctld is
restarted inside the lab's PID namespace (where ``lab down`` ends it); jobs
survive in its state save location.

    python -m lifecycle.lab.slurm_remove --lab-dir DIR NODE
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from lifecycle.drivers.slurm.hostlist import compress, expand
from lifecycle.lab.control import STATE_FILE

LIST_KEYS = frozenset({"nodename", "nodes", "suspendexcnodes"})
FILES = ("slurm.conf", "gres.conf", "topology.conf")


def without_node(text: str, node: str) -> str:
    """The file with ``node`` taken out of every node list; a line left naming no node is dropped
    (and a topology switch so dropped is taken out of the ``Switches=`` above it, and so on up)."""
    out = _without(text, node, "nodes")
    dropped = _dropped_switches(text, out)
    while dropped:
        before = out
        for switch in dropped:
            out = _without(out, switch, "switches")
        dropped = _dropped_switches(before, out)
    return out


def _dropped_switches(before: str, after: str) -> list[str]:
    names = {line.split(" ", 1)[0].partition("=")[2] for line in after.splitlines() if line.startswith("SwitchName=")}
    return [line.split(" ", 1)[0].partition("=")[2] for line in before.splitlines()
            if line.startswith("SwitchName=") and line.split(" ", 1)[0].partition("=")[2] not in names]


def _without(text: str, node: str, switch_key: str) -> str:
    keys = LIST_KEYS if switch_key == "nodes" else frozenset({"switches"})
    out: list[str] = []
    for line in text.splitlines():
        if line.lstrip().startswith("#") or "=" not in line:
            out.append(line)
            continue
        words, drop = [], False
        for word in line.split(" "):
            key, eq, value = word.partition("=")
            if eq and key.lower() in keys and value:
                names = expand(value)
                if node in names:
                    rest = [n for n in names if n != node]
                    if not rest and (key.lower() == "nodename" or line.startswith("SwitchName=")):
                        drop = True
                    word = f"{key}={compress(rest) if rest else ''}"
            words.append(word)
        if not drop:
            out.append(" ".join(words))
    return "\n".join(out) + ("\n" if text.endswith("\n") else "")


def _init_pid(lab_dir: Path) -> int:
    state = json.loads((lab_dir / STATE_FILE).read_text(encoding="utf-8"))
    unshare = state.get("slurm_pgid")
    if not unshare:
        raise RuntimeError("the lab's Slurm is not running")
    children = Path(f"/proc/{unshare}/task/{unshare}/children").read_text().split()
    if not children:
        raise RuntimeError("the lab's Slurm PID namespace has no init")
    return int(children[0])


def _inside(init: int, conf: Path, argv: list[str], timeout_s: float = 30.0) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")} | {"SLURM_CONF": str(conf)}
    return subprocess.run(["nsenter", "-t", str(init), "--pid", "--mount", "--", *argv], env=env,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout_s, check=False)


def _wait(done: Callable[[], bool], seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not done():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.3)


def remove(lab_dir: Path, node: str) -> str:
    state = json.loads((lab_dir / STATE_FILE).read_text(encoding="utf-8"))
    conf = Path(state["slurm_conf"])
    changed = []
    for name in FILES:
        path = conf.parent / name
        if not path.is_file():
            continue
        before = path.read_text(encoding="utf-8")
        after = without_node(before, node)
        if after != before:
            path.write_text(after, encoding="utf-8")
            changed.append(name)
    if not changed:
        return f"{node}: in none of the lab's Slurm files"
    init = _init_pid(lab_dir)

    def up() -> bool:
        return "is UP" in _inside(init, conf, ["scontrol", "ping"]).stdout
    _inside(init, conf, ["scontrol", "shutdown", "slurmctld"])
    _wait(lambda: not up(), 30, "slurmctld to stop")
    started = _inside(init, conf, ["slurmctld", "-f", str(conf)])
    if started.returncode != 0:
        raise RuntimeError(f"slurmctld did not start again: {started.stderr.strip()}")
    _wait(up, 60, "slurmctld to answer again")
    return f"{node}: removed from {', '.join(changed)}; slurmctld restarted"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m lifecycle.lab.slurm_remove")
    parser.add_argument("--lab-dir", type=Path, required=True)
    parser.add_argument("node")
    opts = parser.parse_args(argv)
    try:
        print(remove(opts.lab_dir, opts.node))
    except (OSError, RuntimeError, KeyError, ValueError, subprocess.TimeoutExpired) as exc:
        sys.stderr.write(f"slurm_remove: {exc}\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

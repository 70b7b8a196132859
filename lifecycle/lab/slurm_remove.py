"""The lab's slurm.conf hooks: take a node out of the lab's Slurm files (decommission), or put it back in.

Slurm 22.05 cannot forget a node that slurm.conf defines while slurmctld
runs (``scontrol delete`` is for dynamic nodes; ``reconfigure`` with another
node count stops slurmctld). A site does it by re-rendering the files and
restarting slurmctld (racklife's ``slurm_controller`` role); racklife runs that
as the hook ``RACKLIFE_SLURM_CONF_CMD`` with the node's name appended. This
is the lab's hook (``racklife lab env`` exports it): the node is taken out of
every node list in slurm.conf, gres.conf and topology.conf, and slurmctld is
restarted inside the lab's PID namespace (where ``lab down`` ends it); jobs
survive in its state save location.

The other direction is the registration hook ``RACKLIFE_SLURM_ADD_CMD``
(a Pulumi ``SlurmNodeRegistration``), run with the node's name, its
partition and the ``NodeName=`` line racklife renders for it appended: the
line goes into slurm.conf (the line this lab had for the node, with its
slurmd's port, when the node was taken out earlier; else racklife's line,
pointed at loopback), the node into the partition's ``Nodes=``, and
slurmctld is restarted the same way.

    python -m lifecycle.lab.slurm_remove --lab-dir DIR NODE
    python -m lifecycle.lab.slurm_remove --lab-dir DIR --add NODE PARTITION LINE
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
from lifecycle.lab import slurm_daemons
from lifecycle.lab.control import STATE_FILE

LIST_KEYS = frozenset({"nodename", "nodes", "suspendexcnodes"})
FILES = ("slurm.conf", "gres.conf", "topology.conf")
REMOVED_DIR = "slurm-removed"  # under the lab dir: NODE.line, the slurm.conf line a removal took out
ADDRESS_KEYS = ("nodehostname", "nodeaddr", "port")


def node_line_of(text: str, node: str) -> str | None:
    """The ``NodeName=`` line of slurm.conf that defines ``node`` alone, if there is one."""
    for line in text.splitlines():
        first = line.split(" ", 1)[0]
        if first.lower().startswith("nodename=") and expand(first.partition("=")[2]) == [node]:
            return line
    return None


def on_loopback(line: str) -> str:
    """racklife's rendered line with the lab's address: every lab slurmd listens on loopback."""
    words = [w for w in line.split(" ") if w.partition("=")[0].lower() not in ADDRESS_KEYS]
    return " ".join([words[0], "NodeHostname=localhost", "NodeAddr=127.0.0.1", *words[1:]])


def with_node(text: str, node: str, partition: str, line: str) -> str:
    """slurm.conf with ``line`` defining ``node`` (after the last NodeName line) and ``node`` in the
    partition's ``Nodes=``; unchanged where it is there already. Raises ``ValueError`` without the partition."""
    lines = text.splitlines()
    at = [i for i, x in enumerate(lines) if x.lower().startswith("partitionname=")
          and x.split(" ", 1)[0].partition("=")[2] == partition]
    if not at:
        raise ValueError(f"slurm.conf has no partition {partition}")
    if node_line_of(text, node) is None:
        last = max((i for i, x in enumerate(lines) if x.lower().startswith("nodename=")), default=at[0] - 1)
        lines.insert(last + 1, line)
        at = [i + 1 if i > last else i for i in at]
    words = lines[at[0]].split(" ")
    for i, word in enumerate(words):
        key, eq, value = word.partition("=")
        if eq and key.lower() == "nodes" and node not in (names := expand(value) if value else []):
            words[i] = f"{key}={compress([*names, node])}"
    lines[at[0]] = " ".join(words)
    return "\n".join(lines) + ("\n" if text.endswith("\n") else "")


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
    text = conf.read_text(encoding="utf-8")
    if defined_nodes(text) == {node}:
        # slurmctld refuses to start on a slurm.conf that defines no node ("no nodes configured"): the
        # files are left as they are and the controller keeps running, rather than restarted into a crash.
        raise ValueError(f"{node} is the last node slurm.conf defines; slurmctld does not start without one, "
                         "so it is left in the lab's Slurm files")
    line = node_line_of(text, node)
    if line is not None:  # kept, so a later registration gives the node back its own slurmd's port
        (lab_dir / REMOVED_DIR).mkdir(exist_ok=True)
        (lab_dir / REMOVED_DIR / f"{node}.line").write_text(line + "\n", encoding="utf-8")
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
    _restart(lab_dir, conf)
    return f"{node}: removed from {', '.join(changed)}; slurmctld restarted"


def add(lab_dir: Path, node: str, partition: str, line: str) -> str:
    state = json.loads((lab_dir / STATE_FILE).read_text(encoding="utf-8"))
    conf = Path(state["slurm_conf"])
    if not line.startswith(f"NodeName={node} ") or "\n" in line:
        raise ValueError(f"not a NodeName line for {node}: {line!r}")
    kept = lab_dir / REMOVED_DIR / f"{node}.line"
    own = kept.read_text(encoding="utf-8").strip() if kept.is_file() else on_loopback(line)
    before = conf.read_text(encoding="utf-8")
    after = with_node(before, node, partition, own)
    if after == before:
        return f"{node}: in slurm.conf and partition {partition} already"
    conf.write_text(after, encoding="utf-8")
    _restart(lab_dir, conf)
    return f"{node}: added to slurm.conf, partition {partition}; slurmctld restarted"


def defined_nodes(text: str) -> set[str]:
    """Every node a ``NodeName=`` line of slurm.conf defines (``NodeName=DEFAULT`` defines none)."""
    out: set[str] = set()
    for line in text.splitlines():
        first = line.split(" ", 1)[0]
        if first.lower().startswith("nodename=") and first.partition("=")[2].lower() != "default":
            out.update(expand(first.partition("=")[2]))
    return out


def responding(sinfo_out: str) -> set[str]:
    """The nodes of ``sinfo -h -N -o '%N %T'`` whose slurmd has registered and answers: not ``unknown``,
    ``down`` or not responding (the ``*`` suffix)."""
    out = set()
    for line in sinfo_out.splitlines():
        fields = line.split()
        if len(fields) == 2 and not fields[1].endswith("*") \
                and fields[1].lower().split("+")[0] not in ("unknown", "down", "future"):
            out.add(fields[0])
    return out


def _restart(lab_dir: Path, conf: Path) -> None:
    """slurmctld stopped and started again with the edited files; done when it answers and every node whose
    slurmd answered before has registered again (until then Slurm shows those nodes ``unknown``, and a
    caller that reads them right after the hook would see a node in service as not there)."""
    init = slurm_daemons.init_pid(lab_dir)

    def up() -> bool:
        return "is UP" in _inside(init, conf, ["scontrol", "ping"]).stdout

    def answering() -> set[str]:
        return responding(_inside(init, conf, ["sinfo", "-h", "-N", "-o", "%N %T"]).stdout)
    before = answering()
    _inside(init, conf, ["scontrol", "shutdown", "slurmctld"])
    _wait(lambda: not up(), 30, "slurmctld to stop")
    for ctl in slurm_daemons.controllers(conf):  # the primary, then the backup (if the lab has one)
        started = _inside(init, conf, slurm_daemons.controller_argv(conf, ctl))
        if started.returncode != 0:
            raise RuntimeError(f"slurmctld ({ctl.role}) did not start again: {started.stderr.strip()}")
        _wait(up, 60, "slurmctld to answer again")
    defined = defined_nodes(conf.read_text(encoding="utf-8"))
    _wait(lambda: (before & defined) <= answering(), 90, "the nodes' slurmd to register again: "
          + ",".join(sorted(before & defined)))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m lifecycle.lab.slurm_remove")
    parser.add_argument("--lab-dir", type=Path, required=True)
    parser.add_argument("--add", action="store_true", help="register: NODE PARTITION LINE")
    parser.add_argument("node")
    parser.add_argument("rest", nargs="*")
    opts = parser.parse_args(argv)
    if len(opts.rest) != (2 if opts.add else 0):
        parser.error("--add takes NODE PARTITION LINE; a removal takes NODE alone")
    try:
        print(add(opts.lab_dir, opts.node, *opts.rest) if opts.add else remove(opts.lab_dir, opts.node))
    except (OSError, RuntimeError, KeyError, ValueError, subprocess.TimeoutExpired) as exc:
        sys.stderr.write(f"slurm_remove: {exc}\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Every command, enumerated from the CLI itself: data commands take -o, node commands take one way to name nodes.

The issue found `build`, `lab env`, `lab fault` and `workflows cancel|resume`
without `--json`, and `kube join`, `role-swap` and `decommission` taking only
plain names. A hand-kept list of commands would not notice the next command
that is missing them; these tests walk the command tree (``every_command``), so
a new command fails here until it has the options or is listed below with
the reason it has none (and an entry whose command is gone fails too).
"""

from __future__ import annotations

import json
import sys

import pytest
from typer import _click as click
from typer.core import TyperArgument as Argument
from typer.core import TyperOption as Option

from lifecycle.cli._lazy import every_command

COMMANDS = {p: c for p, c in every_command() if p}


def _runs(cmd: click.Command) -> bool:
    """A command that does something itself: a leaf, or a group whose own callback takes options (`upgrade`)."""
    if not getattr(cmd, "commands", None):
        return True
    return any(isinstance(p, Option) and p.name not in ("help",) for p in cmd.params)


RUNNABLE = {p: c for p, c in COMMANDS.items() if _runs(c)}


def _opts(cmd: click.Command) -> set[str]:
    return {o for p in cmd.params for o in getattr(p, "opts", ())}


# Commands that print no data document, each with why.
NO_DATA: dict[str, str] = {
    "serve": "a daemon: runs until stopped, logs on stderr",
    "boot serve": "a daemon (the HTTP boot server)",
    "metrics serve": "a daemon (the /metrics endpoint)",
    "metrics show": "prints the Prometheus exposition format, the document a scrape reads",
    "metrics textfile": "writes node exporter's .prom file and prints nothing",
    "slurm suspend-program": "slurmctld's SuspendProgram hook: Slurm calls it, it prints nothing",
    "slurm resume-program": "slurmctld's ResumeProgram hook: Slurm calls it, it prints nothing",
    "lab inventory": "prints the lab's inventory file itself (YAML), the input of every other command",
    "lab tour": "a guided walk-through for a person, running the other commands",
}


# Commands whose -o is their own, each with why.
OWN_OUTPUT: dict[str, str] = {
    "kube render": "Kubernetes manifests: -o yaml (documents) or json (a v1 List); no table of them",
}


def test_every_data_command_takes_o_and_json() -> None:
    missing = [p for p, c in RUNNABLE.items()
               if p not in NO_DATA and not ({"--output", "-o", "--json", "--no-headers"} <= _opts(c)
                                            or (p in OWN_OUTPUT and "--output" in _opts(c)))]
    assert not missing, f"commands without -o/--output, --json and --no-headers: {missing}"
    stale = [p for p in NO_DATA if p not in RUNNABLE]
    assert not stale, f"NO_DATA names commands that do not exist: {stale}"
    extra = [p for p in NO_DATA if "--output" in _opts(RUNNABLE[p])]
    assert not extra, f"NO_DATA lists commands that do take -o: {extra}"


@pytest.mark.parametrize("path", sorted(p for p in RUNNABLE if p not in NO_DATA))
def test_a_usage_error_under_o_json_is_the_envelope(path: str, monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """Each data command, run as `racklife PATH --no-such-option -o json`: exit 2, the envelope on stdout."""
    from lifecycle import cli

    monkeypatch.setattr(sys, "argv", ["racklife", *path.split(), "--no-such-option", "-o", "json"])
    with pytest.raises(SystemExit) as ended:
        cli.main()
    out = capsys.readouterr().out
    assert ended.value.code == 2
    error = json.loads(out)["error"]
    assert error["code"] == "bad_input" and "--no-such-option" in error["message"]


# The one way to name nodes (lifecycle/cli/_select.py).
SELECTION = {"--rack", "--pool", "--all", "--selector"}
NODE_PARAMS = ("node", "nodes", "targets")  # a parameter by one of these names means the command takes nodes

# Commands that name nodes another way, each with why.
OTHER_NAMING: dict[str, str] = {
    "refresh": "the planner's scope within the inventory file: --nodes takes names and hostlists",
    "plan": "the planner's scope within the inventory file: --nodes takes names and hostlists",
    "apply": "the planner's scope within the inventory file: --nodes takes names and hostlists",
    "lab up": "--nodes is how many simulated nodes the lab has",
    "lab tour": "--nodes is how many simulated nodes the tour's lab has",
    "lab fault": "a lab's simulated node, not a node of the store",
    "nodes list": "lists every node unless filtered (--rack, --pool, --selector, --state)",
    "node list": "lists every node unless filtered (--rack, --pool, --selector, --state)",
}


def _takes_nodes(cmd: click.Command) -> bool:
    return any(p.name in NODE_PARAMS for p in cmd.params) or bool(_opts(cmd) & ({"--node", "--nodes"} | SELECTION))


def test_every_node_command_takes_names_hostlists_and_the_filters() -> None:
    node_commands = {p: c for p, c in RUNNABLE.items() if _takes_nodes(c)}
    assert {"accept", "provision", "slurm join", "slurm leave", "kube join", "role-swap", "decommission",
            "repair", "upgrade"} <= set(node_commands)  # the detection sees the commands it must see
    missing = {p: sorted(SELECTION - _opts(c)) for p, c in node_commands.items()
               if p not in OTHER_NAMING and not _opts(c) >= SELECTION}
    assert not missing, f"node commands without the filters: {missing}"
    stale = [p for p in OTHER_NAMING if p not in node_commands]
    assert not stale, f"OTHER_NAMING names commands that do not take nodes: {stale}"
    positional = [p for p, c in node_commands.items() if p not in OTHER_NAMING and p != "upgrade"
                  and not any(isinstance(a, Argument) and a.nargs == -1 and not a.required for a in c.params)]
    assert not positional, f"node commands whose NODE… is not an optional positional list: {positional}"

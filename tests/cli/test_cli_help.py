"""The basics of a command line people trust: --version, -h, completion, readable metavars, help and an example
on every option and command."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest
from typer import _click as click
from typer.core import TyperGroup
from typer.testing import CliRunner

from lifecycle.cli import app
from lifecycle.cli._help import EXAMPLES
from lifecycle.cli._lazy import every_command

REPO = Path(__file__).resolve().parents[2]
COMMANDS = dict(every_command())
LEAVES = [p for p, c in COMMANDS.items() if not getattr(c, "commands", None)]
WIDE = {"COLUMNS": "200", "NO_COLOR": "1"}


def help_of(path: str, flag: str = "--help") -> str:
    res = CliRunner().invoke(app, [*path.split(), flag], env=WIDE)
    assert res.exit_code == 0, res.output
    return res.output


def test_version_prints_the_package_version() -> None:
    res = CliRunner().invoke(app, ["--version"])
    assert res.exit_code == 0 and res.output.strip() == f"racklife {version('racklife')}"


@pytest.mark.parametrize("path", list(COMMANDS))
def test_h_is_help_everywhere(path: str) -> None:
    assert help_of(path, "-h") == help_of(path, "--help")


@pytest.mark.parametrize("path", list(COMMANDS))
def test_no_python_type_as_the_metavar_of_an_option(path: str) -> None:
    options = [line for line in help_of(path).splitlines() if re.match(r"^│ +--", line)]
    assert options
    bad = [line for line in options if re.search(r"<(bool|str|int|float|Path|list\[.*\])>", line)]
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("path", list(COMMANDS))
def test_every_option_and_argument_has_help(path: str) -> None:
    missing = [p.name for p in COMMANDS[path].params if not (getattr(p, "help", None) or "").strip()]
    assert not missing, f"racklife {path}: {missing} have no help"


@pytest.mark.parametrize("path", ["", *LEAVES])
def test_every_command_shows_an_example_that_parses(path: str) -> None:
    assert path in EXAMPLES, f"racklife {path} has no example in lifecycle/cli/_help.py"
    text = " ".join(help_of(path).split())
    assert f"Example: {EXAMPLES[path]}" in text
    invocation = re.search(r"racklife [^)>]*", EXAMPLES[path])  # inside sudo, eval "$(…)" or before a redirect
    assert invocation is not None
    args = shlex.split(invocation.group())[1:]
    # The real parser: an unknown option, a missing argument or a bad value raises here.
    root = COMMANDS[""]
    ctx = root.make_context("racklife", list(args), resilient_parsing=False)
    cmd: click.Command = root
    rest = [*ctx._protected_args, *ctx.args]
    names: list[str] = []
    while isinstance(cmd, TyperGroup) and rest:
        name, sub, rest = cmd.resolve_command(ctx, rest)
        assert name is not None and sub is not None
        names.append(name)
        ctx = sub.make_context(name, rest, parent=ctx)
        cmd, rest = sub, [*getattr(ctx, "_protected_args", []), *ctx.args]
    assert " ".join(names).startswith(path)


def test_every_example_names_a_command_that_exists() -> None:
    assert not set(EXAMPLES) - set(COMMANDS)


def complete(words: str) -> list[str]:
    env = {**os.environ, "_RACKLIFE_COMPLETE": "complete_bash", "COMP_WORDS": words,
           "COMP_CWORD": str(len(words.split()) - (0 if words.endswith(" ") else 1))}
    res = subprocess.run([sys.executable, "-c", "import sys; sys.argv[0] = 'racklife'; from lifecycle.cli import main; "
                          "main()"], env=env, capture_output=True, text=True, timeout=60)
    return res.stdout.split()


def test_shell_completion_completes_commands_and_options_of_a_lazy_command() -> None:
    assert {"node", "nodes"} <= set(complete("racklife nod"))
    assert "--pool" in complete("racklife nodes list --p")


def test_show_completion_prints_a_script_for_the_shell() -> None:
    # As a user runs it, in its own process: in-process (CliRunner) it exited 1 now and then
    # after other tests on the same worker had run the CLI in-process.
    res = subprocess.run([sys.executable, "-c", "import sys; sys.argv[0] = 'racklife'; from lifecycle.cli import main; "
                          "main()", "--show-completion", "bash"], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0 and "_RACKLIFE_COMPLETE=complete_bash" in res.stdout, res.stdout + res.stderr
    assert "complete -o default -F _racklife_completion racklife" in res.stdout, res.stdout

"""docs/cli.md is generated from the commands; it fails here the moment a command, option or example changes."""

from __future__ import annotations

from pathlib import Path

from lifecycle.cli._lazy import every_command
from lifecycle.cli.reference import render

DOC = Path(__file__).resolve().parents[2] / "docs" / "cli.md"


def test_the_cli_reference_is_current() -> None:
    assert DOC.read_text() == render(), "docs/cli.md is stale: python -m lifecycle.cli.reference > docs/cli.md"


def test_the_reference_has_every_command_and_option() -> None:
    text = render()
    for path, cmd in every_command():
        assert f"## `{('racklife ' + path).strip()}`" in text, path
        for p in cmd.params:
            if p.param_type_name == "option":
                assert f"`{p.opts[0]}`" in text, (path, p.opts[0])

"""Command groups that need an optional extra: registered even when it is missing, failing in one line.

``pip install racklife`` gives the controller (inventory, store, BMCs,
Slurm, Kubernetes, workflows); the emulated lab and image builds need extras.
A group whose extra is missing still appears in ``racklife --help`` and
answers any use with one line naming the extra to install (exit 6), instead
of the whole command failing to import.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from types import ModuleType

import typer

from lifecycle.cli._common import UNAVAILABLE, fail

# The top-level modules each extra provides (pyproject.toml, [project.optional-dependencies]).
EXTRA_OF: dict[str, str] = {
    "aiohttp": "lab",
    "jsonpatch": "lab",
    "ansible": "images",
    "tf": "stacks",
}


def missing_extra(exc: ImportError) -> str | None:
    """The extra that provides the module ``exc`` could not import, or None if it is no extra's."""
    top = (exc.name or "").split(".")[0]
    return EXTRA_OF.get(top)


def message(group: str, extra: str, module: str) -> str:
    return (f"'racklife {group}' needs the '{extra}' extra ({module} is not installed): "
            f"pip install 'racklife[{extra}]'")


def load(module: str, group: str) -> ModuleType | Callable[..., None]:
    """Import ``lifecycle.cli.<module>``, or a stand-in command that names the missing extra.

    The stand-in is a command that takes any arguments (register it with
    ``STAND_IN_SETTINGS``), so ``racklife lab up --nodes 3`` reaches it.
    """
    try:
        return importlib.import_module(f"lifecycle.cli.{module}")
    except ImportError as exc:
        extra = missing_extra(exc)
        if extra is None:
            raise
        text = message(group, extra, (exc.name or "?").split(".")[0])

        def stand_in(args: list[str] | None = typer.Argument(None, hidden=True)) -> None:
            fail(text, UNAVAILABLE)

        stand_in.__doc__ = f"(not installed) {text}"
        return stand_in


STAND_IN_SETTINGS = {"allow_extra_args": True, "ignore_unknown_options": True}

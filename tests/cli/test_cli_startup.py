"""`racklife` starts fast: a command's module (and DBOS, SQLAlchemy, the lab…) is imported only when it is used."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from lifecycle.cli import app
from lifecycle.cli._lazy import COMMANDS, load_command, short_help

REPO = Path(__file__).resolve().parents[2]
HEAVY = ("dbos", "sqlalchemy", "matplotlib", "lightkube", "redfish", "cryptography", "jsonschema", "celpy",
         "prometheus_client", "aiohttp", "pyghmi", "acceptance", "burnin", "lifecycle.lab", "lifecycle.store")
PROBE = '''
import json, sys
sys.argv = ["racklife", *sys.argv[1:]]
from lifecycle.cli import main
try:
    main()
except SystemExit:
    pass
print(json.dumps(sorted(sys.modules)), file=sys.stderr)
'''


def modules_after(tmp_path: Path, *args: str) -> set[str]:
    res = subprocess.run([sys.executable, "-c", PROBE, *args], cwd=tmp_path, capture_output=True, text=True,
                         env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "HOME": str(tmp_path),
                              "RACKLIFE_DB": f"sqlite:///{tmp_path}/empty.sqlite"}, timeout=120)
    return set(json.loads(res.stderr.strip().splitlines()[-1]))


def loaded(mods: set[str], prefix: str) -> bool:
    return any(m == prefix or m.startswith(prefix + ".") for m in mods)


@pytest.mark.parametrize("args", [("--help",), ("-h",), ("--version",), ()])
def test_the_root_help_imports_no_command_and_no_heavy_library(tmp_path: Path, args: tuple[str, ...]) -> None:
    mods = modules_after(tmp_path, *args)
    assert not [m for m in HEAVY if loaded(mods, m)]
    assert not [m for m in mods if m.startswith("lifecycle.cli.") and m.split(".")[2] in
                {e.module for e in COMMANDS.values()}]


def test_nodes_list_imports_the_store_but_not_the_workflow_engine_or_the_lab(tmp_path: Path) -> None:
    mods = modules_after(tmp_path, "nodes", "list")
    assert loaded(mods, "lifecycle.store")
    assert not [m for m in ("dbos", "matplotlib", "lightkube", "redfish", "aiohttp", "lifecycle.lab",
                            "lifecycle.cli.accept", "lifecycle.cli.bmc") if loaded(mods, m)]


@pytest.mark.parametrize("name", list(COMMANDS))
def test_the_lazy_table_says_what_the_command_says(name: str) -> None:
    assert COMMANDS[name].help == short_help(load_command(name))


def test_the_root_help_lists_every_command_with_its_line() -> None:
    res = CliRunner().invoke(app, ["--help"], env={"COLUMNS": "300"})
    assert res.exit_code == 0
    for name, entry in COMMANDS.items():
        assert any(line.split()[1:2] == [name] and entry.help[:40] in line for line in res.output.splitlines()
                   if len(line.split()) > 1), name


def test_a_mistyped_command_suggests_one_not_yet_imported() -> None:
    res = CliRunner().invoke(app, ["acept", "rack-1"])
    assert res.exit_code == 2 and "accept" in res.output

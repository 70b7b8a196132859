"""A new user's first hour: `pip install racklife` gives a working command; the extras are optional.

The lab's and the image builder's packages are made unimportable in a
subprocess (a meta-path blocker, as if the extras were never installed):
`racklife --help` and the controller's commands still work, and a command
that needs an extra says in one line which one to install.
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "site-h100-2rack.yaml"
LAB_EXTRA = ("aiohttp", "jsonpatch")
IMAGES_EXTRA = ("ansible",)

BLOCKER = '''
import importlib.abc, sys
BLOCKED = set(sys.argv.pop(1).split(","))
class Blocker(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, Blocker())
sys.argv[0] = "racklife"
from lifecycle.cli import main
main()
'''


def racklife_without(blocked: tuple[str, ...], tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", BLOCKER, ",".join(blocked), *args], cwd=tmp_path,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "RACKLIFE_HOME": str(tmp_path),
                               "HOME": str(tmp_path)},
                          capture_output=True, text=True, timeout=120)


def test_help_works_without_the_lab_and_images_extras(tmp_path: Path) -> None:
    res = racklife_without(LAB_EXTRA + IMAGES_EXTRA, tmp_path, "--help")
    assert res.returncode == 0, res.stderr
    for group in ("inventory", "node", "bmc", "slurm", "lab"):
        assert group in res.stdout


def test_controller_commands_work_without_the_extras(tmp_path: Path) -> None:
    res = racklife_without(LAB_EXTRA + IMAGES_EXTRA, tmp_path, "inventory", "import", str(EXAMPLE))
    assert res.returncode == 0, res.stderr
    assert "16 added" in res.stdout


@pytest.mark.parametrize("args", [("lab", "up", "--nodes", "3"), ("lab", "status"), ("lab", "tour")])
def test_a_lab_command_without_the_lab_extra_names_it(tmp_path: Path, args: tuple[str, ...]) -> None:
    res = racklife_without(LAB_EXTRA, tmp_path, *args)
    assert res.returncode == 6, (res.returncode, res.stderr)
    assert "Traceback" not in res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert "pip install 'racklife[lab]'" in lines[0] and any(f"({m} is not installed)" in lines[0] for m in LAB_EXTRA)


def test_drivers_and_nvml_are_in_the_base_install() -> None:
    """BMC drivers, the Kubernetes client and NVML are what racklife drives: not test or extra-only."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    base = {d.split(">")[0].split("=")[0].split("[")[0].strip().lower() for d in project["dependencies"]}
    # Redfish goes over the standard library's http.client, with certifi's CA bundle (drivers/bmc/redfish_http.py).
    assert {"certifi", "pyghmi", "lightkube", "nvidia-ml-py", "alembic"} <= base
    assert not {"redfish", "requests"} & base  # nothing racklife imports: not installed for it
    extras = project["optional-dependencies"]
    for name in ("lab", "images"):
        assert not {"certifi", "pyghmi", "lightkube", "nvidia-ml-py"} & {d.split(">")[0] for d in extras[name]}

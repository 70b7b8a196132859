"""pyghmi's plugin loader moves ``sys.path`` under other threads' imports; racklife imports it so that it cannot.

CI failed once with ``No module named 'lightkube'`` in `racklife apply`: a BMC read imported pyghmi on one
thread while the Kubernetes read imported lightkube on another. pyghmi's OEM lookup inserts each plugin
directory at ``sys.path[1]`` and pops it again at import; the other thread's path finder, part-way along
``sys.path``, skipped site-packages when the list shifted under it.

A stand-in module does what pyghmi's loader does (insert, a system call that lets other threads run, pop),
many times, while another thread looks up an installed package over and over. Imported plainly, some
look-ups miss the package; imported through ``pyghmi_import.load``, none does. Each runs in a fresh
interpreter, where neither module is imported yet.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

STAND_IN = """
import os, sys
for _ in range(20000):
    sys.path.insert(1, "/nonexistent-plugin-dir")
    os.stat("/")
    sys.path.pop(1)
    os.stat("/")
"""

RACE = """
import importlib, importlib.machinery, json, sys, threading
from lifecycle.drivers.bmc import pyghmi_import
done = threading.Event()
looks, misses = 0, 0

def look():
    global looks, misses
    while not done.is_set():
        looks += 1
        misses += importlib.machinery.PathFinder.find_spec("yaml") is None  # installed in site-packages

def load():
    try:
        if sys.argv[1] == "plain":
            importlib.import_module("plugin_dance")
        else:
            pyghmi_import.load(("plugin_dance",))
    finally:
        done.set()

before = list(sys.path)
walker = threading.Thread(target=look)
walker.start()
load()
walker.join()
print(json.dumps({"looks": looks, "misses": misses, "path_kept": sys.path == before,
                  "path_type": type(sys.path).__name__}))
"""


def _race(tmp_path: Path, how: str) -> dict[str, object]:
    (tmp_path / "plugin_dance.py").write_text(STAND_IN)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(tmp_path)])}
    res = subprocess.run([sys.executable, "-c", RACE, how], env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    got: dict[str, object] = json.loads(res.stdout)
    return got


def test_a_plain_import_of_the_plugin_dance_makes_another_threads_lookups_miss(tmp_path: Path) -> None:
    """The hazard itself: without the loader an installed package is not found while the dance goes on."""
    got = _race(tmp_path, "plain")
    assert isinstance(got["misses"], int) and got["misses"] > 0, got


def test_through_the_loader_no_lookup_misses_and_sys_path_is_the_same_list_after(tmp_path: Path) -> None:
    got = _race(tmp_path, "loader")
    assert isinstance(got["looks"], int) and got["looks"] > 50, got  # the walker ran beside the dance
    assert got["misses"] == 0, got
    assert got["path_kept"] is True and got["path_type"] == "list", got


def test_the_ipmi_driver_imports_pyghmi_through_the_loader() -> None:
    probe = ("import sys; original = sys.path; import lifecycle.drivers.bmc.ipmi, lifecycle.lab.ipmi_emulator; "
             "print(sys.path is original, type(sys.path).__name__, 'pyghmi.ipmi.oem.lookup' in sys.modules)")
    res = subprocess.run([sys.executable, "-c", probe], env={**os.environ, "PYTHONPATH": str(REPO)},
                         capture_output=True, text=True, timeout=120)
    assert res.stdout.split() == ["True", "list", "True"], res.stderr

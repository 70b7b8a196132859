"""Every command's refusal and bad input under --json: the documented exit code and one error envelope.

Before, most commands printed errors as text on stderr and nothing on stdout
under --json, a few printed a shape of their own ({"error": "text"},
{"valid": false}), and a usage error was a box of text. Each case here is a
command line that must fail in a known way; each must leave exit code and
``{"error": {"code", "exit_code", "message"}}`` agreeing, on stdout, with no
traceback.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from lifecycle.cli._common import EXIT_CODES

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "site-h100-2rack.yaml"
EXE = shutil.which("racklife") or str(Path(sys.executable).with_name("racklife"))


def racklife(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RACKLIFE_")} | {"RACKLIFE_HOME": str(home)}
    return subprocess.run([EXE, *args], env=env, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    h = tmp_path_factory.mktemp("envelope")
    assert racklife(h, "inventory", "import", str(EXAMPLE)).returncode == 0
    (h / "ssh_config").write_text("Host *\n  BatchMode yes\n")
    (h / "bad.yaml").write_text(EXAMPLE.read_text().replace("serial: SN-H100-0102", "serial: SN-H100-0101"))
    (h / "not-k8s.yaml").write_text("- a list\n")
    (h / "junk.txt").write_text("nothing a parser knows\n")
    return h


def _in(home: Path, name: str) -> str:
    return str(home / name)


# name → (argv after `racklife`, with {home} replaced; the exit code it must end with)
CASES: dict[str, tuple[Callable[[Path], list[str]], int]] = {
    "usage: unknown option": (lambda h: ["nodes", "list", "--flying"], 2),
    "usage: unknown command": (lambda h: ["nodse", "list", "--json"], 2),
    "usage: bad choice": (lambda h: ["bmc", "power", "sideways", "--json"], 2),
    "nodes list: unknown state": (lambda h: ["nodes", "list", "--state", "flying"], 2),
    "node show: unknown node": (lambda h: ["node", "show", "r09-n01"], 2),
    "node history: unknown node": (lambda h: ["node", "history", "r09-n01"], 2),
    "workflows list: unknown status": (lambda h: ["workflows", "list", "--status", "sleepy"], 2),
    "workflows show: unknown run": (lambda h: ["workflows", "show", "accept-000000"], 2),
    "workflows cancel: unknown run": (lambda h: ["workflows", "cancel", "accept-000000"], 2),
    "inventory validate: duplicate serial": (lambda h: ["inventory", "validate", _in(h, "bad.yaml")], 2),
    "inventory import: duplicate serial": (lambda h: ["inventory", "import", _in(h, "bad.yaml")], 2),
    "plan: unknown node": (lambda h: ["plan", "--nodes", "r09-n01", "--no-firmware"], 2),
    "refresh: unknown node": (lambda h: ["refresh", "--nodes", "r09-n01", "--no-firmware"], 2),
    "apply: bad level": (lambda h: ["apply", str(EXAMPLE), "--level", "extreme", "--yes"], 2),
    "accept: neither rack nor nodes": (lambda h: ["accept", "--ssh-config", _in(h, "ssh_config")], 2),
    "accept: unknown node": (lambda h: ["accept", "--nodes", "r09-n01", "--ssh-config", _in(h, "ssh_config")], 2),
    "provision: no target": (lambda h: ["provision"], 2),
    "provision: unknown node": (lambda h: ["provision", "r09-n01"], 2),
    "slurm render: bad controller": (lambda h: ["slurm", "render", "--inventory", str(EXAMPLE), "--out",
                                                _in(h, "slurm-out"), "--controller", "ctl #x"], 2),
    "slurm leave: bad policy": (lambda h: ["slurm", "leave", "r01-n01", "--policy", "yank"], 2),
    "bmc power: no target": (lambda h: ["bmc", "power", "status"], 2),
    "bmc power: unknown node": (lambda h: ["bmc", "power", "status", "--inventory", str(EXAMPLE),
                                           "--node", "r09-n01"], 2),
    "kube validate: not an object": (lambda h: ["kube", "validate", _in(h, "not-k8s.yaml")], 2),
    "report capacity: bad duration": (lambda h: ["report", "capacity", "--since", "fortnight"], 2),
    "burnin parse: unknown parser": (lambda h: ["burnin", "parse", "smoke", _in(h, "junk.txt")], 2),
    "burnin judge: missing result": (lambda h: ["burnin", "judge", _in(h, "none.json"), "--profile",
                                                "h100-sxm-8"], 2),
    "evidence verify: not a directory": (lambda h: ["evidence", "verify", _in(h, "junk.txt")], 2),
    "store: not a database url": (lambda h: ["--db", "notaurl", "nodes", "list"], 6),
    "slurm join: unknown pool": (lambda h: ["slurm", "join", "--pool", "gaming"], 2),
    "nodes list: unknown pool": (lambda h: ["nodes", "list", "--pool", "gaming"], 2),
    "decommission: unknown node": (lambda h: ["decommission", "r09-n01"], 2),
    "bmc firmware update: no image": (lambda h: ["bmc", "firmware", "update", "r01-n01", "--file",
                                                 _in(h, "none.bin"), "--component", "BMC"], 2),
    "up: no stack": (lambda h: ["up"], 2),
    "role-swap: no kubeconfig": (lambda h: ["role-swap", "r01-n01", "--to", "inference"], 2),
    "config view: unknown option": (lambda h: ["config", "view", "--everything"], 2),
    "lab status: no lab": (lambda h: ["lab", "status", "--dir", _in(h, "no-lab")], 5),
    "lab fault: no lab": (lambda h: ["lab", "fault", "rl-n01", "xid79", "--dir", _in(h, "no-lab")], 5),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_failure_has_its_code_and_the_envelope(home: Path, case: str) -> None:
    argv, code = CASES[case]
    args = argv(home)
    if "--json" not in args:
        args.append("--json")
    res = racklife(home, *args)
    assert res.returncode == code, (case, res.returncode, res.stdout, res.stderr)
    assert "Traceback" not in res.stdout + res.stderr, case
    err = json.loads(res.stdout)["error"]
    assert err["exit_code"] == code and err["code"] == EXIT_CODES[code], (case, err)
    assert err["message"] and res.stderr.startswith("error: "), (case, err, res.stderr)  # people read stderr


def test_yaml_gets_the_envelope_as_yaml(home: Path) -> None:
    import yaml

    res = racklife(home, "node", "show", "r09-n01", "-o", "yaml")
    assert res.returncode == 2
    assert yaml.safe_load(res.stdout)["error"] == {"code": "bad_input", "exit_code": 2,
                                                  "message": "no node named 'r09-n01' in the store (import an "
                                                             "inventory first)"}


def test_text_mode_prints_no_json_and_the_problem_has_file_line_field(home: Path) -> None:
    res = racklife(home, "inventory", "validate", _in(home, "bad.yaml"), "-o", "json")
    err = json.loads(res.stdout)["error"]
    assert err["file"] == _in(home, "bad.yaml") and err["line"] >= 1 and err["field"] == "nodes[1](r01-n02).serial"
    assert err["problems"][0]["message"].startswith("duplicate serial")
    text = racklife(home, "node", "show", "r09-n01")
    assert text.returncode == 2 and text.stdout == "" and text.stderr.startswith("error: ")
    parse = racklife(home, "burnin", "parse", "dcgm", _in(home, "junk.txt"))
    assert parse.returncode == 2 and parse.stdout == "", "JSON without --json"


def test_an_unexpected_error_is_one_line_exit_70(home: Path, tmp_path: Path) -> None:
    """A bug in racklife: one line naming it and how to see the traceback, never the traceback itself."""
    shim = tmp_path / "sitecustomize.py"
    shim.write_text("import lifecycle.cli.nodes as n\n"
                    "def boom(*a, **k):\n    raise ZeroDivisionError('scripted')\n"
                    "n.Store = boom\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("RACKLIFE_")} | {
        "RACKLIFE_HOME": str(home), "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    res = subprocess.run([EXE, "nodes", "list", "--json"], env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 70 and "Traceback" not in res.stderr
    assert json.loads(res.stdout)["error"]["code"] == "internal"
    assert "ZeroDivisionError: scripted" in res.stderr and "RACKLIFE_DEBUG=1" in res.stderr


@pytest.mark.parametrize(("module", "now"), [("lightkube", "it is found now"),
                                             ("racklife_no_such_module", "it is not installed there")])
def test_a_module_that_did_not_import_says_which_python_looked_and_whether_it_finds_it_now(
        home: Path, tmp_path: Path, module: str, now: str) -> None:
    shim = tmp_path / "sitecustomize.py"
    shim.write_text("import lifecycle.cli.nodes as n\n"
                    f"def boom(*a, **k):\n    raise ModuleNotFoundError(\"No module named {module!r}\", name={module!r})\n"
                    "n.Store = boom\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("RACKLIFE_")} | {
        "RACKLIFE_HOME": str(home), "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    res = subprocess.run([EXE, "nodes", "list"], env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 70 and "Traceback" not in res.stderr
    assert f"No module named '{module}' (python " in res.stderr and now in res.stderr, res.stderr

"""The foundation commands, run as a user runs them: exit codes, JSON, and nothing written on errors."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "site-h100-2rack.yaml"
CRASH_APP = Path(__file__).resolve().parents[1] / "workflows" / "crash_app.py"


def racklife(home: Path, *args: str, check: bool = False) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "RACKLIFE_DB"} | {"RACKLIFE_HOME": str(home)}
    exe = shutil.which("racklife") or str(Path(sys.executable).with_name("racklife"))
    proc = subprocess.run([exe, *args], env=env, capture_output=True, text=True, timeout=120)
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


def test_validate_good_and_bad(tmp_path: Path) -> None:
    ok = racklife(tmp_path, "inventory", "validate", str(EXAMPLE), "--json", check=True)
    assert json.loads(ok.stdout)["nodes"] == 16
    bad = tmp_path / "bad.yaml"
    bad.write_text(EXAMPLE.read_text().replace("serial: SN-H100-0102", "serial: SN-H100-0101"))
    res = racklife(tmp_path, "inventory", "validate", str(bad))
    assert res.returncode == 2
    assert f"{bad}:" in res.stderr and "nodes[1](r01-n02).serial: duplicate serial" in res.stderr


def test_failed_import_writes_nothing(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(EXAMPLE.read_text().replace("    pool: inference\n", "    pool: gaming\n", 1))
    res = racklife(tmp_path, "inventory", "import", str(bad), "--json")
    assert res.returncode == 2
    problems = json.loads(res.stdout)["problems"]
    assert any(p["message"].startswith("unknown pool 'gaming'") for p in problems)
    assert not (tmp_path / "racklife.sqlite").exists()
    racklife(tmp_path, "inventory", "import", str(EXAMPLE), check=True)
    res = racklife(tmp_path, "inventory", "import", str(bad))
    assert res.returncode == 2
    nodes = json.loads(racklife(tmp_path, "nodes", "list", "--json", check=True).stdout)
    assert {n["pool"] for n in nodes} == {"training", "inference"}


def test_import_list_show_history(tmp_path: Path) -> None:
    first = json.loads(racklife(tmp_path, "inventory", "import", str(EXAMPLE), "--json", check=True).stdout)
    assert len(first["added"]) == 16
    again = json.loads(racklife(tmp_path, "inventory", "import", str(EXAMPLE), "--json", check=True).stdout)
    assert again["added"] == [] and len(again["unchanged"]) == 16
    inference = json.loads(racklife(tmp_path, "nodes", "list", "--pool", "inference", "--json", check=True).stdout)
    assert sorted(n["name"] for n in inference) == ["r01-n07", "r01-n08", "r02-n07", "r02-n08"]
    assert json.loads(racklife(tmp_path, "nodes", "list", "--state", "in_service", "--json",
                               check=True).stdout) == []
    assert racklife(tmp_path, "nodes", "list", "--state", "flying").returncode == 2
    show = json.loads(racklife(tmp_path, "node", "show", "r01-n08", "--json", check=True).stdout)
    assert show["spec"]["bmc"]["driver"] == "ipmi" and show["acceptance"] == []
    hist = json.loads(racklife(tmp_path, "node", "history", "r01-n08", "--json", check=True).stdout)
    assert [h["event"] for h in hist] == ["enroll"]
    missing = racklife(tmp_path, "node", "show", "r09-n01")
    assert missing.returncode == 2 and "no node named 'r09-n01'" in missing.stderr


def test_workflows_list_show_cancel(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'racklife.sqlite'}"
    out = tmp_path / "steps.txt"
    with (tmp_path / "app.log").open("wb") as log:
        proc = subprocess.Popen([sys.executable, str(CRASH_APP), url, str(out), "start"],
                                env=os.environ | {"CRASH_HOLD": "1"}, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        while not (tmp_path / "step3-started").exists():
            assert time.monotonic() < deadline
            time.sleep(0.1)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    runs = json.loads(racklife(tmp_path, "workflows", "list", "--json", check=True).stdout)
    assert [(r["id"], r["status"]) for r in runs] == [("crash-wf", "PENDING")]
    shown = json.loads(racklife(tmp_path, "workflows", "show", "crash-wf", "--json", check=True).stdout)
    assert [s["output"] for s in shown["steps"]] == [1, 2]
    racklife(tmp_path, "workflows", "cancel", "crash-wf", check=True)
    runs = json.loads(racklife(tmp_path, "workflows", "list", "--status", "cancelled", "--json",
                               check=True).stdout)
    assert [r["id"] for r in runs] == ["crash-wf"]
    assert racklife(tmp_path, "workflows", "show", "nope").returncode == 2


def test_hostile_inventories_exit_2_with_json_and_no_traceback(tmp_path: Path) -> None:
    """Issue 14's probes through the command: exit 2, every problem in JSON, no traceback, no store."""
    from tests.model.test_inventory_edges import billion_laughs

    base = EXAMPLE.read_text()
    hostile = {
        "laughs.yaml": billion_laughs().encode(),
        "nested.yaml": ("site: " + "[" * 20_000 + "]" * 20_000 + "\n").encode(),
        "nul.yaml": base.replace("serial: SN-H100-0102", "serial: SN-H100-\x000102").encode(),
        "esc.yaml": base.replace("name: r01-n02", "name: r01-n02\x1b[2J").encode(),
        "latin1.yaml": base.replace("ams1", "ams\xe9").encode("latin-1"),
        "same-bmc.yaml": base.replace("https://10.10.1.12", "https://10.10.1.11:443/").encode(),
    }
    for name, data in hostile.items():
        path = tmp_path / name
        path.write_bytes(data)
        for command in ("validate", "import"):
            res = racklife(tmp_path, "inventory", command, str(path), "--json")
            assert res.returncode == 2, (name, command, res.stderr)
            assert "Traceback" not in res.stderr + res.stdout, (name, res.stderr)
            problems = json.loads(res.stdout)["problems"]
            assert problems and all(p["file"] == str(path) and p["line"] >= 1 and p["field"] for p in problems), \
                (name, problems)
    assert not (tmp_path / "racklife.sqlite").exists()

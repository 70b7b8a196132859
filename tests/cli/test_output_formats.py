"""-o table|wide|json|yaml|name and --no-headers, as a script and a person at a terminal meet them.

Before, piped output was a Rich box table wrapped at the terminal's width
(run ids cut to ``accept-917de0d…``, node names cut at 60 columns), and each
command had only ``--json``.
"""

from __future__ import annotations

import json
import os
import pty
import select
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "site-h100-2rack.yaml"
EXE = shutil.which("racklife") or str(Path(sys.executable).with_name("racklife"))
BOX = set("│┃━─┏┗╭╰")


def env_for(home: Path, **extra: str) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if k not in ("RACKLIFE_DB", "COLUMNS", "FORCE_COLOR")}
    return base | {"RACKLIFE_HOME": str(home), "NO_COLOR": "1"} | extra


def racklife(home: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([EXE, *args], env=env_for(home, **env), capture_output=True, text=True, timeout=120)


def on_a_tty(home: Path, *args: str, columns: int) -> str:
    """Run with stdout and stderr on a pseudo-terminal of ``columns`` columns; what it printed."""
    master, slave = pty.openpty()
    proc = subprocess.Popen([EXE, *args], env=env_for(home, COLUMNS=str(columns), LINES="50", TERM="xterm"),
                            stdin=subprocess.DEVNULL, stdout=slave, stderr=slave)
    os.close(slave)
    chunks: list[bytes] = []
    while True:
        ready, _, _ = select.select([master], [], [], 60)
        if not ready:
            break
        try:
            data = os.read(master, 65536)
        except OSError:  # the other side closed
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    assert proc.wait(60) == 0
    return b"".join(chunks).decode(errors="replace")


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    h = tmp_path_factory.mktemp("output")
    assert racklife(h, "inventory", "import", str(EXAMPLE)).returncode == 0
    return h


@pytest.mark.parametrize("columns", ["60", "200"])
def test_piped_tables_are_plain_columns_never_cut(home: Path, columns: str) -> None:
    res = racklife(home, "nodes", "list", COLUMNS=columns)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert not BOX & set(res.stdout) and "…" not in res.stdout
    assert lines[0].split() == ["node", "state", "pool", "rack", "U", "sku", "since"]
    rows = [line.split() for line in lines[1:]]
    assert len(rows) == 16 and all(len(r) == 8 for r in rows)  # "since" is a date and a time
    assert rows[0][:3] == ["r01-n01", "enrolled", "training"]


def test_no_headers_wide_name_yaml(home: Path) -> None:
    plain = racklife(home, "nodes", "list", "--no-headers").stdout.splitlines()
    assert len(plain) == 16 and plain[0].startswith("r01-n01 ")
    wide = racklife(home, "nodes", "list", "-o", "wide").stdout.splitlines()
    assert wide[0].split()[-2:] == ["serial", "bmc"]
    assert "SN-H100-0101" in wide[1].split() and "https://10.10.1.11" in wide[1]
    names = racklife(home, "nodes", "list", "--pool", "inference", "-o", "name")
    assert names.stdout.split() == ["r01-n07", "r01-n08", "r02-n07", "r02-n08"]
    doc = yaml.safe_load(racklife(home, "nodes", "list", "-oyaml").stdout)
    assert [n["name"] for n in doc][:2] == ["r01-n01", "r01-n02"] and doc[0]["serial"] == "SN-H100-0101"
    same = json.loads(racklife(home, "nodes", "list", "--output=json").stdout)
    assert same == json.loads(racklife(home, "nodes", "list", "--json").stdout) == doc


def test_a_terminal_gets_a_table_that_folds_instead_of_cutting(home: Path) -> None:
    narrow = on_a_tty(home, "nodes", "list", "-o", "table", columns=60)
    assert BOX & set(narrow) and "…" not in narrow
    for n in ("r01-n01", "r02-n08"):
        assert n in narrow
    bare = on_a_tty(home, "nodes", "list", "--no-headers", columns=200)
    assert "state" not in bare and "r01-n01" in bare


def test_json_with_another_format_is_bad_input_in_the_envelope(home: Path) -> None:
    res = racklife(home, "nodes", "list", "--json", "-o", "name")
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert "--json is -o json" in res.stderr
    bad = racklife(home, "nodes", "list", "-o", "xml", "--json")
    err = json.loads(bad.stdout)["error"]
    assert bad.returncode == 2 and err["code"] == "bad_input" and "'xml'" in err["message"]

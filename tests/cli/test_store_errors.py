"""Broken stores, as a user meets them: one clear line, exit 6, no traceback, nothing written.

Each case is a probe from issue 14; before, every one ended in a raw
traceback with exit 1 (which means "verdict: fail"), or worse, in a silent
success (``:memory:`` said "16 added" and kept nothing).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "site-h100-2rack.yaml"
UNAVAILABLE = 6


def racklife(home: Path, *args: str, db: str | None = None, env: dict[str, str] | None = None,
             prefix: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k != "RACKLIFE_DB"} | {"RACKLIFE_HOME": str(home)}
    exe = shutil.which("racklife") or str(Path(sys.executable).with_name("racklife"))
    argv = [*prefix, exe, *(("--db", db) if db else ()), *args]
    return subprocess.run(argv, env=base | (env or {}), capture_output=True, text=True, timeout=120)


def assert_one_line(res: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert res.returncode == UNAVAILABLE, (res.returncode, res.stdout, res.stderr)
    assert "Traceback" not in res.stderr + res.stdout
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), res.stderr
    for n in needles:
        assert n in lines[0], lines[0]


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # closed again when the block ends: nothing listens


def file_with(name: str, content: bytes) -> Callable[[Path], str]:
    def make(d: Path) -> str:
        (d / name).write_bytes(content)
        return f"sqlite:///{d / name}"
    return make


CASES: dict[str, tuple[Callable[[Path], str], tuple[str, ...]]] = {
    "garbage-file": (file_with("g.sqlite", b"not a database at all " * 64), ("is not a SQLite database",)),
    "zero-byte-file": (file_with("e.sqlite", b""), ("is an empty file",)),
    "not-a-url": (lambda d: "notaurl", ("'notaurl' is not a database URL",)),
    "mysql": (lambda d: "mysql://root:hunter22@127.0.0.1/racklife", ("cannot keep its store in mysql",)),
    "memory": (lambda d: "sqlite:///:memory:", ("keeps nothing",)),
    "memory-bare": (lambda d: "sqlite://", ("keeps nothing",)),
    "postgres-unreachable": (lambda d: f"postgresql://racklife:s3cretpw@127.0.0.1:{closed_port()}/racklife",
                             ("does not answer",)),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_broken_store_is_one_line_exit_6(tmp_path: Path, case: str) -> None:
    make, needles = CASES[case]
    url = make(tmp_path)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    res = racklife(tmp_path, "inventory", "import", str(EXAMPLE), db=url)
    assert_one_line(res, *needles)
    assert "hunter22" not in res.stderr and "s3cretpw" not in res.stderr
    after = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file() and not p.name.endswith(".lock")}
    assert after == before  # nothing made, nothing changed
    as_json = racklife(tmp_path, "nodes", "list", "--json", db=url)
    assert as_json.returncode == UNAVAILABLE
    assert json.loads(as_json.stdout)["error"]["exit_code"] == UNAVAILABLE


def test_racklife_home_that_is_a_file(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.write_text("I am a file\n")
    res = racklife(home, "inventory", "import", str(EXAMPLE))
    assert_one_line(res, f"{home} is a file, not a directory")
    assert home.read_text() == "I am a file\n"


def test_another_applications_sqlite_gets_nothing_added(tmp_path: Path) -> None:
    path = tmp_path / "invoices.sqlite"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY, total REAL)")
        conn.execute("INSERT INTO invoices VALUES (1, 9.5)")
    before = path.read_bytes()
    res = racklife(tmp_path, "inventory", "import", str(EXAMPLE), db=f"sqlite:///{path}")
    assert_one_line(res, "is not a racklife store", "invoices")
    assert path.read_bytes() == before
    with sqlite3.connect(path) as conn:
        assert [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")] == ["invoices"]


def _imported(tmp_path: Path) -> Path:
    res = racklife(tmp_path, "inventory", "import", str(EXAMPLE))
    assert res.returncode == 0, res.stderr
    return tmp_path / "racklife.sqlite"


def test_unknown_state_in_a_row(tmp_path: Path) -> None:
    path = _imported(tmp_path)
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE racklife_nodes SET state = 'levitating' WHERE name = 'r01-n03'")
    for args in (("nodes", "list"), ("node", "show", "r01-n03"), ("inventory", "import", str(EXAMPLE)),
                 ("node", "history", "r01-n01")):
        res = racklife(tmp_path, *args)
        if args[-1] == "r01-n01":  # its own rows are fine
            assert res.returncode == 0, res.stderr
            continue
        assert_one_line(res, "node r01-n03 has state 'levitating'")


def test_locked_store(tmp_path: Path) -> None:
    path = _imported(tmp_path)
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        res = racklife(tmp_path, "inventory", "import", str(EXAMPLE),
                       env={"RACKLIFE_DB_LOCK_TIMEOUT_S": "1"})
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert_one_line(res, "is locked by another process")


def test_read_only_store(tmp_path: Path) -> None:
    _imported(tmp_path)
    if os.geteuid() == 0:  # root writes through file modes: make the directory a read-only mount
        if not shutil.which("unshare"):
            pytest.fail("unshare (util-linux) is needed to make a read-only store as root")
        script = 'mount --bind -o ro "$0" "$0" && exec "$@"'
        res = racklife(tmp_path, "nodes", "list", prefix=("unshare", "--mount", "sh", "-c", script, str(tmp_path)))
    else:
        for p in tmp_path.iterdir():
            p.chmod(0o400)
        tmp_path.chmod(0o500)
        try:
            res = racklife(tmp_path, "nodes", "list")
        finally:
            tmp_path.chmod(0o700)
    assert_one_line(res, "read-only")

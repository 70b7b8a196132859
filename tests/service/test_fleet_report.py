"""`racklife report fleet`: the numbers behind the page, and the page as headless Chromium renders it."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from datetime import timedelta
from html.parser import HTMLParser
from pathlib import Path

import pytest
import sqlalchemy as sa

from lifecycle.service import fleet_report
from lifecycle.store import Store
from lifecycle.store import db as dbm
from tests.service import scripted

RACKLIFE = [sys.executable, "-c", "from lifecycle.cli import main; main()"]
SINCE = scripted.NOW - timedelta(days=4)
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--host-resolver-rules=MAP * ~NOTFOUND"]
SECTIONS = {"pools", "ledger", "acceptance", "causes"}


@pytest.fixture(scope="module")
def store(repo_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    """The scripted store, its transitions spread over the two days before NOW, and two more failed records:
    one with a kernel Xid 79 and a dcgm failure, one whose summary cannot be read."""
    s = scripted.build(repo_dir, f"sqlite:///{tmp_path_factory.mktemp('fleet') / 'rl.sqlite'}")
    t, a = dbm.transitions, dbm.acceptance_records
    start = scripted.NOW - timedelta(days=2)
    with s.engine.begin() as conn:
        ids = [r.id for r in conn.execute(sa.select(t.c.id).order_by(t.c.id))]
        for i, tid in enumerate(ids):
            conn.execute(sa.update(t).where(t.c.id == tid).values(at=start + i * timedelta(minutes=20)))
        findings = [{"check": "kernel_xid", "verdict": "fail", "measured": [79]},
                    {"check": "dcgm.diag", "verdict": "fail", "measured": None}, {"check": "gpu", "verdict": "pass"}]
        for rid, node, summary in [("x1", "r01-n05", json.dumps({"verdict": "fail", "findings": findings})),
                                   ("x2", "r01-n06", "{not json")]:
            at = scripted.NOW - timedelta(minutes=30)
            conn.execute(sa.insert(a).values(id=rid, node=node, passed=False, level="quick", profile="h100-sxm-8",
                                             created_at=at, expires_at=at, accepted_by="test", run_id=None,
                                             summary=summary))
    yield s
    s.close()


def test_the_numbers(store: Store) -> None:
    r = fleet_report.build(store, SINCE, scripted.NOW)
    assert r.by_check == {"nccl.all_reduce": 1, "kernel_xid": 1, "dcgm.diag": 1, fleet_report.UNREADABLE: 1}
    assert r.by_xid == {79: 1}
    assert [a.passed for a in r.acceptance].count(True) == 3 and len(r.acceptance) == 6
    last = {p: {c: v[-1] for c, v in caps.items() if v[-1]} for p, caps in r.gpus.items()}
    assert last["training"] == {"in_service": 8, "lent": 8, "quarantined": 8, "bringup": 72}
    assert last["inference"] == {"in_service": 8, "bringup": 24}
    first = {p: sum(v[0] for v in caps.values()) for p, caps in r.gpus.items()}
    assert set(first.values()) == {0} and "training" in first  # nothing enrolled 4 days before NOW
    assert r.ledger.by_capacity["training"]["in_service"] > 0


class _Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.ids: dict[str, str] = {}
        self.sections: set[str] = set()
        self.svgs = 0
        self._id: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        d = dict(attrs)
        if tag == "section" and d.get("id"):
            self.sections.add(str(d["id"]))
        if tag == "svg":
            self.svgs += 1
        self._id = d.get("id") if tag == "span" else None

    def handle_data(self, data: str) -> None:
        if self._id:
            self.ids[self._id] = data.strip()
            self._id = None


def test_report_fleet_renders_offline_in_chromium(store: Store, tmp_path: Path) -> None:
    env = os.environ | {"RACKLIFE_DB": store.url}
    out = tmp_path / "fleet.html"
    done = subprocess.run([*RACKLIFE, "report", "fleet", "--out", str(out), "--since", SINCE.isoformat(),
                           "--until", scripted.NOW.isoformat(), "--json"],
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["failed"] == 3 and doc["by_xid"] == {"79": 1}
    page = out.read_text()
    assert "<script" not in page and "<link" not in page and "<img" not in page
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:|//)""", page)
    assert not re.search(r"xlink:href=\"(?!#)", page)  # SVG references stay inside the page
    chromium = shutil.which("chromium")
    assert chromium, "Debian package 'chromium' is required for this test"
    base = [chromium, *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'chromium-profile'}"]
    shot = tmp_path / "fleet.png"
    subprocess.run([*base, "--window-size=1200,3000", f"--screenshot={shot}", out.as_uri()],
                   check=True, capture_output=True, timeout=120)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000
    dom = subprocess.run([*base, "--dump-dom", out.as_uri()], check=True, capture_output=True, timeout=120,
                         text=True).stdout
    parsed = _Page()
    parsed.feed(dom)
    assert parsed.sections == SECTIONS
    assert parsed.ids == {"count-records": "6", "count-pass": "3", "count-fail": "3"}
    assert parsed.svgs == 5  # pools, ledger, acceptance, by check, by Xid
    assert "Xid 79" in dom and "summary unreadable" in dom


def test_report_fleet_refuses_a_missing_directory(store: Store, tmp_path: Path) -> None:
    env = os.environ | {"RACKLIFE_DB": store.url}
    bad = subprocess.run([*RACKLIFE, "report", "fleet", "--out", str(tmp_path / "nope" / "r.html")], env=env,
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "does not exist" in bad.stderr and "Traceback" not in bad.stderr
    assert not (tmp_path / "nope").exists()

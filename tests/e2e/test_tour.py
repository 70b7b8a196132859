"""The README's main command runs `racklife lab tour`: it must complete on a fresh lab."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from lifecycle.lab import rack
from tests.e2e.conftest import run

pytestmark = [pytest.mark.xdist_group("lab"), pytest.mark.slow]


def test_tour_builds_serves_and_tears_down() -> None:
    assert os.geteuid() == 0, "the tour needs root"
    lab_dir = Path(tempfile.mkdtemp(prefix="rlt", dir="/tmp")) / "lab"
    prefix = f"rlt{os.getpid() % 10000}-"
    try:
        res = run(dict(os.environ), "lab", "tour", "--dir", str(lab_dir), "--prefix", prefix, timeout=1200)
        assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
        assert "tour complete" in res.stdout
        assert "node-03" in res.stdout and "quarantined" in res.stdout
    finally:
        rack.cleanup(lab_dir, prefix)
    from lifecycle.lab import netns

    assert netns.running(prefix) == []

"""A controller SIGKILLed mid-workflow resumes from its last finished step (SQLite and PostgreSQL)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

APP = Path(__file__).with_name("crash_app.py")


def _wait_for(path: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            raise AssertionError(f"{path} did not appear within {timeout}s")
        time.sleep(0.1)


def crash_and_resume(url: str, work: Path) -> None:
    out = work / "steps.txt"
    env = os.environ | {"CRASH_HOLD": "1"}
    with (work / "first.log").open("wb") as log:
        first = subprocess.Popen([sys.executable, str(APP), url, str(out), "start"], env=env,
                                 stdout=log, stderr=subprocess.STDOUT)
    try:
        _wait_for(work / "step3-started", 120)
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(30)
    assert first.returncode == -signal.SIGKILL
    assert out.read_text().splitlines() == ["step 1", "step 2"]

    env = {k: v for k, v in os.environ.items() if k != "CRASH_HOLD"}
    second = subprocess.run([sys.executable, str(APP), url, str(out), "recover"], env=env,
                            capture_output=True, text=True, timeout=180)
    assert second.returncode == 0, second.stderr
    assert "result 4" in second.stdout
    assert out.read_text().splitlines() == ["step 1", "step 2", "step 3", "step 4"]


def test_crash_resume_sqlite(tmp_path: Path) -> None:
    crash_and_resume(f"sqlite:///{tmp_path / 'rl.sqlite'}", tmp_path)


@pytest.mark.postgres
def test_crash_resume_postgres(tmp_path: Path, postgres_url: str) -> None:
    crash_and_resume(postgres_url, tmp_path)

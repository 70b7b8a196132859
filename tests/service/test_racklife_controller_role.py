"""The racklife_controller role, applied twice to a throwaway root; its unit verified and its ExecStart run.

Real ansible-core with the local connection, every path prefixed with a
temporary directory (``racklife_controller_root``) as the other role tests do;
no user is created and no unit started (no init system here). What the role
writes is then judged by real tools: ``systemd-analyze verify`` on the unit,
and the unit's own ``ExecStart`` line, run with the environment file it
names, must start a `racklife serve` that heartbeats and stops with exit 0 on
SIGTERM.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

from lifecycle.store import Store
from lifecycle.workflows.controller import live_services
from tests.ansible_local import play_locally

pytestmark = [pytest.mark.root, pytest.mark.slow]

PLAYBOOK = """
- hosts: localhost
  connection: local
  gather_facts: false
  roles:
    - role: racklife_controller
      vars:
        racklife_controller_root: {root}
        racklife_controller_db_url: "{db}"
        racklife_controller_exe: {exe}
        racklife_controller_user: nobody
        racklife_controller_group: nogroup
        racklife_controller_create_user: false
        racklife_controller_manage_service: false
        racklife_controller_refresh_interval_s: 0
        racklife_controller_metrics_listen: "127.0.0.1:{metrics}"
        racklife_controller_secrets_env_src: "{secrets}"
        racklife_controller_env:
          RACKLIFE_KUBECONFIG: /etc/racklife/kubeconfig
"""


def _playbook(tmp: Path, root: Path, db: str, secrets: str = "", metrics: int = 9464) -> Path:
    exe = Path(sys.executable).with_name("racklife")
    p = tmp / "site.yml"
    p.write_text(PLAYBOOK.format(root=root, db=db, exe=exe, secrets=secrets, metrics=metrics))
    return p


def _env_file(path: Path) -> dict[str, str]:
    lines = [ln for ln in path.read_text().splitlines() if ln and not ln.startswith("#")]
    return dict(ln.split("=", 1) for ln in lines)


def test_role_installs_the_unit_idempotently_and_the_unit_starts_serve(repo_dir: Path, tmp_path: Path,
                                                                        free_port: Callable[[], int]) -> None:
    root = tmp_path / "root"
    root.mkdir()
    secrets = tmp_path / "secrets.env"
    secrets.write_text("RACKLIFE_BMC_PASSWORD=hunter2-not-logged\n")
    db = f"sqlite:///{root}/var/lib/racklife/racklife.sqlite"
    metrics = free_port()
    playbook = _playbook(tmp_path, root, db, str(secrets), metrics)

    changed, out = play_locally(repo_dir, tmp_path, [str(playbook)])
    assert changed > 0
    again, out2 = play_locally(repo_dir, tmp_path, [str(playbook)])
    assert again == 0, out2[-3000:]
    assert "hunter2" not in out + out2

    conf, state = root / "etc/racklife", root / "var/lib/racklife"
    unit = root / "etc/systemd/system/racklife.service"
    assert state.stat().st_mode & 0o777 == 0o700 and state.owner() == "nobody"
    assert (conf / "secrets.env").stat().st_mode & 0o777 == 0o640 and (conf / "secrets.env").group() == "nogroup"
    env = _env_file(conf / "serve.env")
    assert env == {"RACKLIFE_DB": db, "RACKLIFE_HOME": "/var/lib/racklife", "RACKLIFE_REFRESH_INTERVAL_S": "0",
                   "RACKLIFE_KUBECONFIG": "/etc/racklife/kubeconfig"}

    # systemd's own parser: it exits 0 even for an unknown key or a bad value, so every line it says counts.
    verify = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, check=False)
    said = [ln for ln in verify.stderr.splitlines() if "Special user nobody" not in ln]  # the test's user
    assert verify.returncode == 0 and not said, verify.stderr

    text = unit.read_text()
    exec_start = next(ln.split("=", 1)[1] for ln in text.splitlines() if ln.startswith("ExecStart="))
    assert "User=nobody" in text and "KillSignal=SIGTERM" in text
    run_env = {k: v for k, v in os.environ.items() if not k.startswith("RACKLIFE_")} | env
    run_env["RACKLIFE_HOME"] = str(state)  # the unit's paths are the host's; here they live under root
    with (tmp_path / "serve.log").open("wb") as log:
        proc = subprocess.Popen(shlex.split(exec_start), env=run_env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "serve.log").read_text()
            if (state / "racklife.sqlite").exists():
                store = Store(db)
                try:
                    if live_services(store):
                        break
                finally:
                    store.close()
            time.sleep(0.3)
        # The heartbeat is written when the service's executor starts; its /metrics listener comes up just after.
        while True:
            assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "serve.log").read_text()
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{metrics}/metrics", timeout=10) as resp:
                    body = resp.read()
                break
            except urllib.error.URLError as e:
                if not isinstance(e.reason, ConnectionRefusedError):
                    raise
                time.sleep(0.3)
        assert b"racklife_nodes" in body
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0, (tmp_path / "serve.log").read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.parametrize("db", ["", "postgresql://racklife:s3cret-pw@db.example/racklife", "mysql://db/racklife"])
def test_role_refuses_a_missing_or_passworded_database_url(repo_dir: Path, tmp_path: Path, db: str) -> None:
    root = tmp_path / "root"
    root.mkdir()
    with pytest.raises(AssertionError) as info:
        play_locally(repo_dir, tmp_path, [str(_playbook(tmp_path, root, db))])
    assert "s3cret-pw" not in str(info.value)  # the check is no_log: the URL is never printed
    assert not (root / "etc").exists()  # nothing written


def test_role_refuses_an_environment_value_that_would_add_a_line(repo_dir: Path, tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    playbook = _playbook(tmp_path, root, "sqlite:////var/lib/racklife/racklife.sqlite")
    playbook.write_text(playbook.read_text().replace("/etc/racklife/kubeconfig",
                                                     '"/x\\nRACKLIFE_DB=postgresql://evil/db"'))
    with pytest.raises(AssertionError) as info:
        play_locally(repo_dir, tmp_path, [str(playbook)])
    assert "RACKLIFE_KUBECONFIG must be an environment name with a one-line value" in str(info.value)

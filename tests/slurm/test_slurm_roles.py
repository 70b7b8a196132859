"""The slurm_controller and slurm_compute roles, applied twice to a throwaway root on this machine.

Real ansible-core with the local connection; every path the roles write is
prefixed with a temporary directory (``*_root``), the Debian packages are
checked with the real apt module (already installed: nothing to change), and
daemons are not restarted (no init system here). The accounting database and
its socket-authenticated user are created in a real MariaDB server (started
from the lab's template on a socket of its own). The second run must change
nothing.
"""

from __future__ import annotations

import pwd
import secrets
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from lifecycle.drivers.slurm.render import render
from lifecycle.lab import slurm_accounting
from lifecycle.model.inventory import Inventory
from tests.ansible_local import play_locally

pytestmark = [pytest.mark.root, pytest.mark.slow]

PLAYBOOK = """
- hosts: localhost
  connection: local
  gather_facts: false
  roles:
    - role: slurm_controller
      vars:
        slurm_controller_config_src: {conf}
        slurm_controller_root: {root}
        slurm_controller_munge_key_src: {key}
        slurm_controller_manage_services: false
        slurm_controller_manage_database: {manage_db}
        slurm_controller_db_socket: {socket}
    - role: slurm_compute
      vars:
        slurm_compute_config_src: {conf}
        slurm_compute_root: {root}
        slurm_compute_munge_key_src: {key}
        slurm_compute_manage_services: false
"""


def _play(repo: Path, tmp: Path, playbook: Path) -> tuple[int, str]:
    return play_locally(repo, tmp, [str(playbook)])


@pytest.fixture
def mariadb(tmp_path: Path) -> Iterator[Path]:
    """A MariaDB server of this test's own (no network; its socket under tmp_path); its socket path."""
    paths = slurm_accounting.AccountingPaths(tmp_path / "db-root")
    for sub in ("run", "log"):
        (paths.root / sub).mkdir(parents=True)
    slurm_accounting.prepare(paths, "role-test")
    subprocess.run(slurm_accounting.server_argv(paths), check=True, timeout=30, stdin=subprocess.DEVNULL)
    try:
        slurm_accounting._wait(lambda: slurm_accounting.server_up(paths), 60, "MariaDB")
        yield paths.socket
    finally:
        subprocess.run(["mariadb-admin", "--no-defaults", f"--socket={paths.socket}", "-u", "root", "shutdown"],
                       check=False, timeout=60, capture_output=True)


def _sql(socket: Path, query: str) -> str:
    return subprocess.run(["mariadb", "--no-defaults", f"--socket={socket}", "-u", "root", "-N", "-e", query],
                          capture_output=True, text=True, check=True, timeout=30).stdout.strip()


def test_roles_install_rendered_files_idempotently(repo_dir: Path, tmp_path: Path, site16: Inventory,
                                                   mariadb: Path) -> None:
    conf = tmp_path / "rendered"
    conf.mkdir()
    files = render(site16).files
    for name, text in files.items():
        (conf / name).write_text(text)
    key = tmp_path / "munge.key"
    key.write_bytes(secrets.token_bytes(1024))
    root = tmp_path / "root"
    root.mkdir()
    playbook = tmp_path / "site.yml"
    playbook.write_text(PLAYBOOK.format(conf=conf, root=root, key=key, manage_db="true", socket=mariadb))

    changed, _ = _play(repo_dir, tmp_path, playbook)
    assert changed > 0
    for name, text in files.items():
        assert (root / "etc" / "slurm" / name).read_text() == text
    dbd = (root / "etc" / "slurm" / "slurmdbd.conf").stat()
    assert (dbd.st_mode & 0o777, pwd.getpwuid(dbd.st_uid).pw_name) == (0o600, "slurm")
    assert _sql(mariadb, "SHOW DATABASES LIKE 'slurm_acct_db'") == "slurm_acct_db"
    assert _sql(mariadb, "SELECT JSON_VALUE(Priv, '$.plugin') FROM mysql.global_priv "
                         "WHERE User = 'slurm' AND Host = 'localhost'") == "unix_socket"
    assert (root / "etc" / "munge" / "munge.key").stat().st_mode & 0o777 == 0o400
    assert (root / "var" / "spool" / "slurmctld").is_dir()
    assert (root / "var" / "spool" / "slurmd").is_dir()

    again, out = _play(repo_dir, tmp_path, playbook)
    assert again == 0, out[-3000:]

    assert "munge.key" not in out.replace("Install the munge key", "")  # no_log keeps it out


def test_roles_refuse_missing_rendered_files(repo_dir: Path, tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    playbook = tmp_path / "site.yml"
    playbook.write_text(PLAYBOOK.format(conf=empty, root=tmp_path / "root", key="''", manage_db="false",
                                        socket="/nonexistent"))
    with pytest.raises(AssertionError) as info:
        _play(repo_dir, tmp_path, playbook)
    assert "slurm.conf is missing from" in str(info.value)


CONFIGLESS = """
- hosts: localhost
  connection: local
  gather_facts: false
  roles:
    - role: slurm_compute
      vars:
        slurm_compute_conf_server: "{server}"
        slurm_compute_root: {root}
        slurm_compute_manage_services: false
"""


def test_compute_role_starts_slurmd_configless(repo_dir: Path, tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    playbook = tmp_path / "site.yml"
    playbook.write_text(CONFIGLESS.format(server="ctl-a:6817,ctl-b:6817", root=root))
    changed, _ = _play(repo_dir, tmp_path, playbook)
    assert changed > 0
    assert 'SLURMD_OPTIONS="--conf-server ctl-a:6817,ctl-b:6817"' in (root / "etc" / "default" / "slurmd").read_text()
    assert not (root / "etc" / "slurm" / "slurm.conf").exists()  # the controllers serve it
    again, out = _play(repo_dir, tmp_path, playbook)
    assert again == 0, out[-3000:]
    playbook.write_text(CONFIGLESS.format(server="ctl-a:6817 --foo", root=root))
    with pytest.raises(AssertionError) as info:
        _play(repo_dir, tmp_path, playbook)
    assert "slurm_compute_conf_server must be host:port" in str(info.value)


def test_the_labs_database_server_keeps_its_temporary_tables_in_its_own_directory(
        mariadb: Path, tmp_path: Path) -> None:
    # Each lab's server is PID 10 of its lab's PID namespace: in a shared /tmp two of them made the same
    # temporary table names, and one crashed (signal 11) under slurmdbd's first queries.
    said = subprocess.run(["mariadb", "--no-defaults", f"--socket={mariadb}", "-u", "root", "-N", "-B", "-e",
                           "SELECT @@tmpdir; SHOW COLUMNS FROM information_schema.TABLES"],
                          capture_output=True, text=True, timeout=60, check=True, stdin=subprocess.DEVNULL)
    lines = said.stdout.splitlines()
    assert lines[0] == str(slurm_accounting.AccountingPaths(tmp_path / "db-root").tmpdir), said.stdout
    assert any(line.startswith("TABLE_NAME") for line in lines[1:]), said.stdout

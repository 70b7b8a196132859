"""The slurm_controller and slurm_compute roles, applied twice to a throwaway root on this machine.

Real ansible-core with the local connection; every path the roles write is
prefixed with a temporary directory (``*_root``), the Debian packages are
checked with the real apt module (already installed: nothing to change), and
daemons are not restarted (no init system here). The second run must change
nothing.
"""

from __future__ import annotations

import secrets
from pathlib import Path

import pytest

from lifecycle.drivers.slurm.render import render
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
    - role: slurm_compute
      vars:
        slurm_compute_config_src: {conf}
        slurm_compute_root: {root}
        slurm_compute_munge_key_src: {key}
        slurm_compute_manage_services: false
"""


def _play(repo: Path, tmp: Path, playbook: Path) -> tuple[int, str]:
    return play_locally(repo, tmp, [str(playbook)])


def test_roles_install_rendered_files_idempotently(repo_dir: Path, tmp_path: Path,
                                                   site16: Inventory) -> None:
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
    playbook.write_text(PLAYBOOK.format(conf=conf, root=root, key=key))

    changed, _ = _play(repo_dir, tmp_path, playbook)
    assert changed > 0
    for name, text in files.items():
        assert (root / "etc" / "slurm" / name).read_text() == text
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
    playbook.write_text(PLAYBOOK.format(conf=empty, root=tmp_path / "root", key="''"))
    with pytest.raises(AssertionError) as info:
        _play(repo_dir, tmp_path, playbook)
    assert "slurm.conf is missing from" in str(info.value)

"""The parts of a rootfs build that run without debootstrap: the play, the recap, scrub, the namespace guard."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from lifecycle.imaging import chroot, roles
from lifecycle.imaging.common import BuildError
from lifecycle.imaging.definition import Role, load_definition
from lifecycle.imaging.rootfs import _cache_lock, role_pins

RUN = """
TASK [base : Install the admin's authorized keys] ******
changed: [image]

TASK [base : Write the RDMA and large page sysctl settings] ******
ok: [image]

RUNNING HANDLER [base : Apply sysctl settings] ******
changed: [image]

PLAY RECAP *********************************************************************
image                      : ok=17   changed=2    unreachable=0    failed=0    skipped=1    rescued=0    ignored=0
"""


def test_play_gives_role_variables_at_play_level_so_handlers_see_them() -> None:
    defn, _ = load_definition("debian12-gpu")
    plays = roles.playbook(list(defn.roles), {"base_admin_authorized_keys": ["ssh-ed25519 AAAA x"],
                                              "slurm_compute_packages": ["slurmd"]})
    play = plays[0]
    assert play["connection"] == "racklife_chroot" and play["hosts"] == roles.HOST
    assert [t["ansible.builtin.import_role"] for t in play["tasks"]] == [
        {"name": "base"}, {"name": "netboot_node"}, {"name": "slurm_compute", "tasks_from": "packages"}]
    assert play["vars"]["base_manage_services"] is False
    assert play["vars"]["base_admin_authorized_keys"] == ["ssh-ed25519 AAAA x"]
    assert play["vars"]["slurm_compute_packages"] == ["slurmd"]  # the site's variables win


def test_preflight_runs_validate_only_of_roles_applied_whole() -> None:
    plays = roles.playbook([Role(name="base"), Role(name="slurm_compute", tasks_from="packages")], {},
                           tasks_from="validate", connection="local")
    assert [t["ansible.builtin.import_role"] for t in plays[0]["tasks"]] == [
        {"name": "base", "tasks_from": "validate"}]


def test_recap_and_changed_tasks_are_read_from_the_output() -> None:
    m = roles._RECAP.search(RUN)
    assert m is not None
    assert roles.Recap(*(int(x) for x in m.groups())) == roles.Recap(17, 2, 0, 0, 1)
    assert roles.changed_tasks(RUN) == ["base : Install the admin's authorized keys",
                                        "base : Apply sysctl settings"]


def test_pins_include_what_the_roles_install() -> None:
    defn, _ = load_definition("debian12-gpu")
    pins = role_pins(defn)
    assert "slurmd=22.05.8-4+deb12u3" in pins and any(p.startswith("openssh-server=") for p in pins)
    assert "sudo" not in pins


def test_scrub_removes_what_identifies_a_machine_or_a_build(tmp_path: Path) -> None:
    for rel in ("etc/ssh/ssh_host_ed25519_key", "etc/ssh/ssh_host_rsa_key.pub", "var/lib/apt/lists/x_Packages",
                "var/log/dpkg.log", "usr/sbin/policy-rc.d", "etc/resolv.conf", "root/.ansible/tmp/x",
                "etc/ssh/sshd_config", "var/log/chrony/keep", "etc/munge/munge.key"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("x")
    (tmp_path / "etc/machine-id").write_text("0123456789abcdef0123456789abcdef\n")
    removed = chroot.scrub(tmp_path)
    assert "etc/ssh/ssh_host_ed25519_key" in removed and "root/.ansible" in removed
    assert not (tmp_path / "etc/munge/munge.key").exists()  # a secret every node would share
    assert not list((tmp_path / "etc/ssh").glob("ssh_host_*"))
    assert (tmp_path / "etc/ssh/sshd_config").exists() and (tmp_path / "var/log/chrony/keep").exists()
    assert (tmp_path / "etc/machine-id").read_text() == ""
    assert not (tmp_path / "usr/sbin/policy-rc.d").exists() and not (tmp_path / "etc/resolv.conf").exists()


def test_sources_are_deb822_with_the_archive_keyring() -> None:
    text = chroot.deb822_sources([("http://deb.debian.org/debian", ["bookworm", "bookworm-updates"], ["main"])],
                                 "/usr/share/keyrings/debian-archive-keyring.gpg")
    assert text == ("Types: deb\nURIs: http://deb.debian.org/debian\nSuites: bookworm bookworm-updates\n"
                    "Components: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n")


def test_mount_helper_refuses_to_mount_on_the_builder(tmp_path: Path) -> None:
    res = subprocess.run([sys.executable, "-m", "lifecycle.imaging.chroot", str(tmp_path), "--", "true"],
                         capture_output=True, text=True, check=False)
    assert res.returncode == 2 and "unshare" in res.stderr
    assert not (tmp_path / "proc").exists()


def test_build_errors_say_which_tool_is_missing() -> None:
    from lifecycle.imaging.common import run

    with pytest.raises(BuildError, match="no-such-tool is not installed"):
        run(["no-such-tool"])


def test_builds_sharing_an_apt_cache_take_turns(tmp_path: Path) -> None:
    """A second build waits for the first one's apt work instead of failing on apt's lock."""
    import threading

    cache = tmp_path / "apt" / "debian-bookworm-amd64"
    order: list[str] = []
    first_in = threading.Event()
    release = threading.Event()

    def first() -> None:
        with _cache_lock(cache, order.append):
            order.append("first in")
            first_in.set()
            release.wait(10)
            order.append("first out")

    t = threading.Thread(target=first)
    t.start()
    assert first_in.wait(10)
    second = threading.Thread(target=lambda: _second(cache, order))
    second.start()
    deadline = 100
    while not any(m.startswith("apt: waiting") for m in order) and deadline:
        deadline -= 1
        threading.Event().wait(0.05)
    release.set()
    t.join(10)
    second.join(10)
    assert order == ["first in", f"apt: waiting for another build using {cache}", "first out", "second in"]


def _second(cache: Path, order: list[str]) -> None:
    with _cache_lock(cache, order.append):
        order.append("second in")

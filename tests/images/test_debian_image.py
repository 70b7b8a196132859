"""The debian12-gpu image: debootstrap, pinned packages, the base and slurm_compute roles through the
chroot connection (applied twice: the second run changes nothing), kernel, initrd, squashfs, manifest.

Needs root and the Debian packages debootstrap and squashfs-tools, and reaches deb.debian.org for
packages. Downloads are cached in ~/.cache/racklife/debs (debootstrap tarball, apt archives), so only
the first build on a machine downloads.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from lifecycle.imaging.common import BuildError
from lifecycle.imaging.definition import DefinitionError, ImageDefinition, load_definition
from lifecycle.imaging.rootfs import RootfsBuild, build_rootfs, squashfs

# Two full builds: a cold cache (debootstrap + apt downloads) takes over ten minutes on two loaded cores.
pytestmark = [pytest.mark.root, pytest.mark.slow, pytest.mark.xdist_group("image"), pytest.mark.timeout(2400)]

CACHE = Path.home() / ".cache" / "racklife" / "debs"


def _require() -> None:
    assert os.geteuid() == 0, "the image build needs root (debootstrap, chroot, mounts)"
    missing = [t for t in ("debootstrap", "mksquashfs", "unsquashfs") if shutil.which(t) is None]
    assert not missing, f"missing {missing}: apt-get install debootstrap squashfs-tools"


@pytest.fixture(scope="module")
def pubkey(tmp_path_factory: pytest.TempPathFactory) -> str:
    key = tmp_path_factory.mktemp("key") / "ops"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "ops@test", "-f", str(key)], check=True)
    return key.with_suffix(".pub").read_text().strip()


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory, pubkey: str) -> RootfsBuild:
    _require()
    defn, defdir = load_definition("debian12-gpu")
    out = tmp_path_factory.mktemp("images")
    return build_rootfs(defn, defdir, out, CACHE, log=print, role_vars={"base_admin_authorized_keys": [pubkey]})


@pytest.fixture(scope="module")
def listing(image: RootfsBuild) -> dict[str, list[str]]:
    """path in the image -> (mode, uid/gid, date) from `unsquashfs -lln`."""
    out = subprocess.run(["unsquashfs", "-lln", "-d", "", str(image.target / "root.squashfs")],
                         capture_output=True, text=True, check=True).stdout
    entries = {}
    for line in out.splitlines():
        m = re.match(r"^(\S{10}) (\d+/\d+) .*? (\d{4}-\d\d-\d\d) \d\d:\d\d (/.*?)(?: -> .*)?$", line)
        if m:
            entries[m.group(4)] = [m.group(1), m.group(2), m.group(3)]
    assert len(entries) > 10000, out[:2000]
    return entries


def _extract(image: RootfsBuild, tmp_path: Path, *paths: str) -> Path:
    dest = tmp_path / "x"
    subprocess.run(["unsquashfs", "-q", "-n", "-d", str(dest), str(image.target / "root.squashfs"), *paths],
                   check=True, capture_output=True)
    return dest


def test_roles_change_the_root_once_then_nothing(image: RootfsBuild) -> None:
    assert image.roles_first.failed == 0 and image.roles_first.changed > 5
    assert image.roles_second.changed == 0, image.roles_second
    assert image.roles_second.ok == image.roles_first.ok


def test_manifest_pins_packages_and_hashes_artefacts(image: RootfsBuild) -> None:
    m = json.loads((image.target / "manifest.json").read_text())
    assert m == image.manifest
    assert (m["name"], m["version"], m["kind"]) == ("debian12-gpu", "2026.11.1", "rootfs")
    defn, _ = load_definition("debian12-gpu")
    kname, _, kversion = defn.kernel.package.partition("=")
    packages = {p["name"]: p["version"] for p in m["packages"]}
    assert packages[kname] == kversion
    assert m["kernel_version"] == kname.removeprefix("linux-image-")
    assert m["pinned"]["slurmd"] == packages["slurmd"] == "22.05.8-4+deb12u3"
    assert m["pinned"]["openssh-server"] == packages["openssh-server"]
    for name in ("chrony", "sudo", "rdma-core", "infiniband-diags", "live-boot", "python3", "systemd-sysv", "munge"):
        assert name in packages, name
    assert "systemd-timesyncd" not in packages  # chrony keeps time
    assert [p["name"] for p in m["packages"]] == sorted(packages)
    assert {x["name"] for x in m["left_out"]} >= {"nvidia-driver", "cuda", "datacenter-gpu-manager"}
    assert m["roles"] == ["base", "netboot_node", "slurm_compute/packages"]
    assert set(m["artefacts"]) == {"vmlinuz", "initrd.img", "root.squashfs"}
    for name, meta in m["artefacts"].items():
        data = (image.target / name).read_bytes()
        assert hashlib.sha256(data).hexdigest() == meta["sha256"] and len(data) == meta["size"]
    assert (image.target / "vmlinuz").read_bytes()[0x202:0x206] == b"HdrS"  # an x86 bzImage
    assert m["builder"]["name"] == "racklife" and m["built_at"]


def test_root_holds_the_roles_work(image: RootfsBuild, listing: dict[str, list[str]], pubkey: str,
                                   tmp_path: Path) -> None:
    keys = "/home/ops/.ssh/authorized_keys"
    assert listing[keys][0] == "-rw-------" and listing[keys][1] == "1000/1000"
    assert listing["/etc/sudoers.d/90-racklife-admin"][0] == "-r--r-----"
    root = _extract(image, tmp_path, keys, "/etc/sysctl.d/60-racklife-rdma.conf",
                    "/etc/security/limits.d/90-racklife-rdma.conf", "/etc/ssh/sshd_config.d/60-racklife.conf",
                    "/etc/chrony/chrony.conf", "/etc/systemd/system.conf.d/60-racklife-limits.conf",
                    "/etc/machine-id", "/etc/hostname")
    assert (root / keys.lstrip("/")).read_text() == pubkey + "\n"
    sysctl = (root / "etc/sysctl.d/60-racklife-rdma.conf").read_text()
    assert "vm.max_map_count = 1048576" in sysctl and "vm.nr_hugepages = 0" in sysctl
    assert "net.core.rmem_max = 268435456" in sysctl
    limits = (root / "etc/security/limits.d/90-racklife-rdma.conf").read_text()
    assert "* hard memlock unlimited" in limits
    assert "DefaultLimitMEMLOCK=infinity" in (root / "etc/systemd/system.conf.d/60-racklife-limits.conf").read_text()
    sshd = (root / "etc/ssh/sshd_config.d/60-racklife.conf").read_text()
    assert "PasswordAuthentication no" in sshd and "AuthenticationMethods publickey" in sshd
    assert "server 127.0.0.1 iburst" in (root / "etc/chrony/chrony.conf").read_text()
    assert (root / "etc/machine-id").read_text() == ""
    assert (root / "etc/hostname").read_text() == "localhost\n"


def test_root_is_scrubbed_and_stamped(image: RootfsBuild, listing: dict[str, list[str]]) -> None:
    assert not [p for p in listing if p.startswith("/etc/ssh/ssh_host_")], "host keys must be made per node"
    for gone in ("/usr/sbin/policy-rc.d", "/etc/resolv.conf", "/root/.ansible", "/etc/munge/munge.key"):
        assert gone not in listing, gone
    assert not [p for p in listing if p.startswith("/var/lib/apt/lists/") and p.endswith("_Packages")]
    assert "/etc/systemd/system/multi-user.target.wants/racklife-ssh-host-keys.service" in listing
    # netboot_node: DHCP after switch-root and the phone-home agent, enabled at boot.
    for unit in ("multi-user.target.wants/racklife-phone-home.service",
                 "multi-user.target.wants/systemd-networkd.service",
                 "network-online.target.wants/systemd-networkd-wait-online.service"):
        assert f"/etc/systemd/system/{unit}" in listing, unit
    assert listing["/usr/local/sbin/racklife-phone-home"][0] == "-rwxr-xr-x"
    assert "/etc/systemd/network/80-racklife-dhcp.network" in listing
    for tool in ("/usr/sbin/slurmd", "/usr/sbin/ibstat", "/usr/sbin/chronyd", "/usr/sbin/sshd"):
        assert tool in listing, tool
    # Every file carries the definition's time (2026-11-30), not the build's.
    assert {f[2] for f in listing.values()} == {"2026-11-30"}


def test_a_rebuild_gives_the_same_manifest_and_bytes(image: RootfsBuild, pubkey: str,
                                                    tmp_path_factory: pytest.TempPathFactory) -> None:
    """Same definition, same mirror state, same variables: same packages and byte-identical artefacts."""
    defn, defdir = load_definition("debian12-gpu")
    again = build_rootfs(defn, defdir, tmp_path_factory.mktemp("again"), CACHE, log=print,
                         role_vars={"base_admin_authorized_keys": [pubkey]})
    assert {k: v for k, v in again.manifest.items() if k != "built_at"} == \
        {k: v for k, v in image.manifest.items() if k != "built_at"}


def test_squashfs_is_byte_identical_for_the_same_tree(tmp_path: Path) -> None:
    _require()
    tree = tmp_path / "tree"
    (tree / "etc").mkdir(parents=True)
    (tree / "etc" / "a").write_text("a\n")
    squashfs(tree, tmp_path / "one.squashfs", 1795996800)
    os.utime(tree / "etc" / "a", (1, 1))  # a rebuild writes the same file at another time
    squashfs(tree, tmp_path / "two.squashfs", 1795996800)
    assert (tmp_path / "one.squashfs").read_bytes() == (tmp_path / "two.squashfs").read_bytes()


def test_a_build_without_admin_keys_stops_before_debootstrap(tmp_path: Path) -> None:
    _require()
    defn, defdir = load_definition("debian12-gpu")
    with pytest.raises(BuildError, match="base_admin_authorized_keys"):
        build_rootfs(defn, defdir, tmp_path / "out", tmp_path / "cache")
    with pytest.raises(BuildError, match="is not an OpenSSH public key line"):
        build_rootfs(defn, defdir, tmp_path / "out", tmp_path / "cache",
                     role_vars={"base_admin_authorized_keys": ["ssh-ed25519 AAAA\nPermitRootLogin yes"]})
    with pytest.raises(BuildError, match="belong to no role"):
        build_rootfs(defn, defdir, tmp_path / "out", tmp_path / "cache", role_vars={"kubelet_version": "1.31"})
    assert not (tmp_path / "cache" / "debootstrap").exists()


def test_definition_format_takes_ubuntu_and_refuses_half_rootfs(tmp_path: Path) -> None:
    defn, _ = load_definition("debian12-gpu")
    noble = defn.model_dump() | {
        "name": "ubuntu2404-gpu",
        "base": defn.base.model_dump() | {
            "distro": "ubuntu", "release": "noble", "mirror": "http://archive.ubuntu.com/ubuntu",
            "sources": [{"uri": "http://archive.ubuntu.com/ubuntu", "suites": ["noble", "noble-updates"],
                         "components": ["main", "universe"]}]},
        "kernel": {"package": "linux-image-generic"},
    }
    assert ImageDefinition.model_validate(noble).base.distro == "ubuntu"
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: half\nversion: '1'\nkind: rootfs\nsource_date_epoch: 0\n"
                   "base: {distro: debian, release: bookworm}\nkernel: {package: linux-image-amd64}\n")
    with pytest.raises(DefinitionError, match=r"base.mirror and base.sources"):
        load_definition(str(bad))
    bad.write_text("name: mixed\nversion: '1'\nkind: initramfs\ninit: x\nroles: [{name: base}]\n"
                   "base: {distro: debian, release: bookworm}\nkernel: {package: linux-image-amd64}\n")
    with pytest.raises(DefinitionError, match="no roles"):
        load_definition(str(bad))

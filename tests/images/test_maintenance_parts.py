"""The maintenance image's parts that need no download: its definition, the public-key check of its build,
the shared-library closure of its programs, the host key it reports and how the read-back pins it.
(The image itself is built and booted on a QEMU VM in tests/e2e/test_vm_boot.py.)"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from lifecycle.drivers.boot.server import PhoneHomeReport, host_key
from lifecycle.imaging import elf
from lifecycle.imaging.build import BuildError, build, fingerprint, public_keys
from lifecycle.imaging.definition import DefinitionError, load_definition
from lifecycle.workflows.decommission_checks import readback_image
from lifecycle.workflows.erase_readback import pinned_config


@pytest.fixture(scope="module")
def keypair(tmp_path_factory: pytest.TempPathFactory) -> Path:
    key = tmp_path_factory.mktemp("key") / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "site", "-f", str(key)], check=True,
                   timeout=30)
    return key


def test_the_definition_names_dropbear_nvme_and_the_nvme_driver() -> None:
    defn, _ = load_definition("maintenance")
    assert defn.kind == "initramfs" and defn.authorized_keys == "/root/.ssh/authorized_keys"
    assert {"dropbear-bin", "nvme-cli", "busybox-static"} <= set(defn.packages)
    assert defn.binaries == ["/usr/sbin/dropbear", "/usr/bin/dropbearkey", "/usr/sbin/nvme"]
    mods = defn.kernel.modules
    assert mods[0] == "e1000" and mods[-2:] == ["nvme-core", "nvme"]
    init = (Path("images") / str(defn.init)).read_text()
    # The init loads the same modules in the same order (insmod resolves no dependencies).
    loop = init.split("for m in ", 1)[1].split("; do", 1)[0].replace("\\\n", " ").split()
    assert loop == mods


def test_binaries_and_authorized_keys_are_for_initramfs_images(tmp_path: Path) -> None:
    text = Path("images/debian12-gpu.yaml").read_text() + "\nbinaries: [/usr/sbin/nvme]\n"
    (tmp_path / "x.yaml").write_text(text)
    with pytest.raises(DefinitionError, match="binaries and authorized_keys are for initramfs images"):
        load_definition(str(tmp_path / "x.yaml"))


def test_only_public_keys_go_into_the_image(keypair: Path) -> None:
    pub = keypair.with_suffix(".pub").read_text()
    assert public_keys(["# the site", "", pub]) == [pub.strip()]
    assert fingerprint(pub) == subprocess.run(["ssh-keygen", "-l", "-f", str(keypair.with_suffix(".pub"))],
                                              capture_output=True, text=True, check=True).stdout.split()[1]
    with pytest.raises(BuildError, match="line 1: a private key"):
        public_keys(keypair.read_text().splitlines())
    with pytest.raises(BuildError, match="line 2: not an SSH public key"):
        public_keys([pub, 'command="x" ' + pub])
    typ, blob = pub.split()[:2]
    with pytest.raises(BuildError, match="is not a ssh-rsa key"):
        public_keys([f"ssh-rsa {blob}"])
    with pytest.raises(BuildError, match="no public key given"):
        public_keys(["# nothing"])
    assert typ == "ssh-ed25519"


def test_the_build_requires_keys_for_the_maintenance_image_and_refuses_them_elsewhere(tmp_path: Path,
                                                                                      keypair: Path) -> None:
    maint, mdir = load_definition("maintenance")
    with pytest.raises(BuildError, match="no public key given"):  # before anything is downloaded
        build(maint, mdir, tmp_path / "out", tmp_path / "cache")
    minimal, ndir = load_definition("minimal")
    with pytest.raises(BuildError, match="takes no authorized keys"):
        build(minimal, ndir, tmp_path / "out", tmp_path / "cache",
              authorized_keys=keypair.with_suffix(".pub").read_text().splitlines())
    assert not (tmp_path / "cache").exists()


def test_a_program_comes_with_its_interpreter_and_libraries(tmp_path: Path) -> None:
    got = elf.closure([Path("/")], ["/usr/bin/true"])
    assert "usr/bin/true" in got and "lib64/ld-linux-x86-64.so.2" in got
    assert any(k.endswith("/libc.so.6") for k in got)
    # A root that has the program and not its libraries: the build names what is missing.
    (tmp_path / "usr/bin").mkdir(parents=True)
    shutil.copy("/usr/bin/true", tmp_path / "usr/bin/true")
    with pytest.raises(BuildError, match=r"interpreter /lib64/ld-linux-x86-64\.so\.2"):
        elf.closure([tmp_path], ["/usr/bin/true"])
    with pytest.raises(BuildError, match="no package of the image ships /usr/sbin/nvme"):
        elf.closure([tmp_path], ["/usr/sbin/nvme"])


def test_a_reported_host_key_is_type_and_key_or_nothing() -> None:
    key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHA0PsiD5xKc76N886MaElOb0bY6Cg2nvAhWgIthQBbi"
    assert host_key(key + " root@(none)") == key
    for bad in (None, 3, "", "ssh-dss AAAA", "ssh-ed25519 AAAA\nevil", 'from="*" ssh-ed25519 AAAA', "ssh-ed25519"):
        assert host_key(bad) == "", bad
    assert PhoneHomeReport("t", "n", "i", "1", (), "10.0.0.1").ssh_host_key == ""


def test_the_read_back_pins_the_reported_host_key_before_the_sites_config(tmp_path: Path) -> None:
    site = tmp_path / "config"
    site.write_text("Host node-01\n    HostName 10.0.0.5\n    StrictHostKeyChecking no\n")
    key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHA0PsiD5xKc76N886MaElOb0bY6Cg2nvAhWgIthQBbi"
    with pinned_config("node-01", str(site), key) as cfg:
        text = Path(cfg).read_text()
        known = Path(cfg).with_name("known_hosts")
        assert known.read_text() == f"node-01 {key}\n"
        assert text.startswith(f'Host node-01\n    HostKeyAlias node-01\n    UserKnownHostsFile "{known}"\n')
        assert text.index("StrictHostKeyChecking yes") < text.index("StrictHostKeyChecking no")
        assert text.endswith(site.read_text())
        import paramiko  # the parser FabricSSH reads it with: the first value wins

        looked = paramiko.SSHConfig.from_path(cfg).lookup("node-01")
        assert (looked["stricthostkeychecking"], looked["hostname"]) == ("yes", "10.0.0.5")
    assert not known.exists()
    with pinned_config("node-01", str(site), "") as same:  # nothing reported: the site's config as it is
        assert same == str(site)


def test_the_read_back_boots_the_maintenance_image_where_it_is_built(tmp_path: Path) -> None:
    assert readback_image(tmp_path, None) == "minimal"
    (tmp_path / "minimal-1").mkdir()
    (tmp_path / "minimal-1" / "manifest.json").write_text('{"name": "minimal"}')
    assert readback_image(tmp_path, None) == "minimal"
    (tmp_path / "maintenance-1").mkdir()
    (tmp_path / "maintenance-1" / "manifest.json").write_text('{"name": "maintenance"}')
    assert readback_image(tmp_path, None) == "maintenance"
    assert readback_image(tmp_path, "minimal") == "minimal"


def test_image_build_cli_takes_public_keys_only(tmp_path: Path, keypair: Path) -> None:
    from tests.cli.test_roleswap_cli import racklife

    out = ["--out", str(tmp_path / "out"), "--cache", str(tmp_path / "cache")]
    res = racklife(tmp_path, "image", "build", "maintenance", *out)
    assert res.returncode == 2 and "needs --authorized-keys FILE" in res.stderr, res.stderr
    res = racklife(tmp_path, "image", "build", "maintenance", "--authorized-keys", str(keypair), *out)
    assert res.returncode == 2 and "line 1: a private key" in res.stderr, res.stderr
    assert "PRIVATE" not in res.stdout + res.stderr.replace("a private key", "")
    assert not (tmp_path / "out").exists() and not (tmp_path / "cache").exists()


def test_a_dry_run_erase_names_the_image_it_would_boot(tmp_path: Path) -> None:
    import json

    from tests.cli.test_roleswap_cli import EXAMPLE, racklife

    assert racklife(tmp_path, "inventory", "import", str(EXAMPLE)).returncode == 0
    images = tmp_path / "images"
    for name in ("minimal", "maintenance"):
        (images / f"{name}-1").mkdir(parents=True)
        (images / f"{name}-1" / "manifest.json").write_text(json.dumps(
            {"name": name, "version": "1", "kind": "initramfs", "built_at": "2026-01-01T00:00:00+00:00"}))
    ssh = tmp_path / "ssh_config"
    ssh.write_text("Host *\n    User root\n")
    node = "r01-n01"
    for asked, want in ((None, "maintenance"), ("minimal", "minimal")):
        pick = ["--maintenance-image", asked] if asked else []
        res = racklife(tmp_path, "decommission", node, "--erase", "--dry-run", "--json", "--ssh-config", str(ssh),
                       "--images", str(images), *pick)
        plan = json.loads(res.stdout)["nodes"][0]
        assert any(f"maintenance boot of the {want} image" in line for line in plan["plan"]), plan["plan"]

"""The minimal image: built from Debian packages, reproducible, and really network-boots in QEMU."""

from __future__ import annotations

import gzip
import hashlib
import json
import shutil
import subprocess
import time
from datetime import timedelta
from pathlib import Path

import pytest

from lifecycle.drivers.boot.render import BootImage, chain_script, ipxe_script
from lifecycle.drivers.boot.server import BootServer
from lifecycle.imaging.build import build
from lifecycle.imaging.definition import DefinitionError, load_definition
from lifecycle.model.inventory import load_inventory
from lifecycle.store import Store
from lifecycle.store import boot as boot_store
from tests.boot.store_backend import StoreBackend


def read_newc(data: bytes) -> dict[str, tuple[int, bytes]]:
    """Parse a newc cpio archive: path -> (mode, data)."""
    out: dict[str, tuple[int, bytes]] = {}
    pos = 0
    while True:
        assert data[pos:pos + 6] == b"070701", f"bad magic at {pos}"
        fields = [int(data[pos + 6 + 8 * i: pos + 14 + 8 * i], 16) for i in range(13)]
        mode, size, namesize = fields[1], fields[6], fields[11]
        name = data[pos + 110: pos + 110 + namesize - 1].decode()
        pos += 110 + namesize
        pos += -pos % 4
        if name == "TRAILER!!!":
            return out
        out[name] = (mode, data[pos:pos + size])
        pos += size
        pos += -pos % 4


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, object]]:
    out = tmp_path_factory.mktemp("images")
    cache = tmp_path_factory.mktemp("debs")
    defn, defdir = load_definition("minimal")
    manifest = build(defn, defdir, out, cache)
    return out / "minimal-1", manifest | {"_cache": str(cache)}


def test_manifest_lists_packages_and_hashes(built: tuple[Path, dict[str, object]]) -> None:
    target, manifest = built
    assert manifest["name"] == "minimal" and manifest["version"] == "1"
    names = [p["name"] for p in manifest["packages"]]  # type: ignore[index, union-attr]
    assert names[0] == "busybox-static" and names[1].startswith("linux-image-6.")  # type: ignore[union-attr]
    assert str(manifest["kernel_version"]).endswith("-amd64")
    on_disk = json.loads((target / "manifest.json").read_text())
    assert on_disk == {k: v for k, v in manifest.items() if k != "_cache"}
    for name, meta in on_disk["artefacts"].items():
        assert hashlib.sha256((target / name).read_bytes()).hexdigest() == meta["sha256"]
        assert (target / name).stat().st_size == meta["size"]
    assert on_disk["builder"]["name"] == "racklife"


def test_initramfs_holds_init_busybox_and_the_nic_driver(built: tuple[Path, dict[str, object]]) -> None:
    target, _ = built
    files = read_newc(gzip.decompress((target / "initrd.img").read_bytes()))
    assert files["init"][1].startswith(b"#!/bin/busybox sh")
    assert files["init"][0] & 0o111
    assert files["bin/busybox"][1][:4] == b"\x7fELF"
    assert files["lib/modules/e1000.ko"][1][:4] == b"\x7fELF"
    assert files["etc/udhcpc.script"][0] & 0o111


def test_build_is_reproducible(built: tuple[Path, dict[str, object]], tmp_path: Path) -> None:
    target, first = built
    defn, defdir = load_definition("minimal")
    second = build(defn, defdir, tmp_path, Path(str(first["_cache"])))
    strip = ("built_at", "_cache")
    assert {k: v for k, v in first.items() if k not in strip} == {k: v for k, v in second.items() if k not in strip}
    assert (tmp_path / "minimal-1" / "initrd.img").read_bytes() == (target / "initrd.img").read_bytes()


def test_unknown_or_bad_definition(tmp_path: Path) -> None:
    with pytest.raises(DefinitionError, match=r"known: .*\bminimal\b"):
        load_definition("nope")
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: Bad Name\nversion: '1'\nkind: initramfs\n")
    with pytest.raises(DefinitionError, match="name"):
        load_definition(str(bad))


@pytest.mark.slow
def test_qemu_network_boots_the_minimal_image_and_phones_home(
    built: tuple[Path, dict[str, object]], tmp_path: Path, repo_dir: Path
) -> None:
    """iPXE (QEMU's e1000 ROM) → TFTP chain script → HTTP per-MAC script → kernel+initrd → phone-home."""
    qemu = shutil.which("qemu-system-x86_64")
    assert qemu, "qemu-system-x86 is not installed"
    target, _ = built
    store = Store(f"sqlite:///{tmp_path / 'rl.sqlite'}")
    inv = load_inventory(repo_dir / "examples" / "site-h100-2rack.yaml")
    store.import_inventory(inv)
    node = inv.node("r01-n01")
    backend = StoreBackend(store)
    tftp = tmp_path / "tftp"
    tftp.mkdir()
    with BootServer(backend, target.parent) as server:
        # The guest reaches the server only through this forward: restrict=on gives it no other route.
        server.advertise_as(f"http://10.0.2.100:{server.port}")
        image = BootImage("minimal", "1", server.image_url("minimal-1/vmlinuz"),
                          server.image_url("minimal-1/initrd.img"), None, None, ("console=ttyS0",))
        boot_store.issue_boot(store, node.name, node.boot_mac(), "run-vm", 1,
                              lambda t: ipxe_script(node, image, server.phone_home_url, t), timedelta(minutes=10))
        (tftp / "boot.ipxe").write_text(chain_script(server.url))
        log = tmp_path / "console.log"
        with log.open("wb") as console:
            vm = subprocess.Popen([
                qemu, "-machine", "pc", "-accel", "tcg", "-m", "256", "-nographic", "-no-reboot",
                "-netdev", f"user,id=n0,restrict=on,tftp={tftp},bootfile=boot.ipxe,"
                           f"guestfwd=tcp:10.0.2.100:{server.port}-tcp:127.0.0.1:{server.port}",
                "-device", f"e1000,netdev=n0,mac={node.boot_mac()}", "-boot", "n",
            ], stdout=console, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 240
            while not backend.reports and time.monotonic() < deadline and vm.poll() is None:
                time.sleep(0.5)
        finally:
            vm.kill()
            vm.wait(10)
    store.close()
    console_text = log.read_text(errors="replace")
    assert backend.reports, f"no phone-home; console tail:\n{console_text[-3000:]}"
    report = backend.reports[0]
    assert (report.node, report.image, report.image_version) == ("r01-n01", "minimal", "1")
    assert node.boot_mac() in report.macs
    assert "racklife: phoned home as r01-n01" in console_text or "udhcpc: lease" in console_text

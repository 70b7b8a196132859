"""The debian12-gpu image's phone-home agent (roles/netboot_node) against the real boot server.

The agent is what a network-booted Debian node runs after switch-root; here it
reads a kernel command line rendered by ``ipxe_script`` and a /sys/class/net
tree, and reports over real HTTP. A spent or forged token is refused, and the
token never shows in the agent's output.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from lifecycle.drivers.boot.render import BootImage, ipxe_script
from lifecycle.drivers.boot.server import BootServer
from lifecycle.model.inventory import Inventory, load_inventory
from lifecycle.store import Store
from lifecycle.store import boot as boot_store
from tests.boot.store_backend import StoreBackend

AGENT = Path(__file__).resolve().parents[2] / "roles" / "netboot_node" / "files" / "racklife-phone-home"
IMAGE = BootImage("debian12-gpu", "2026.11.1", "http://127.0.0.1:1/images/vmlinuz",
                  "http://127.0.0.1:1/images/initrd.img", None, None, ("console=ttyS0", "boot=live"))


@pytest.fixture
def served(tmp_path: Path, repo_dir: Path) -> Iterator[tuple[Store, Inventory, BootServer, StoreBackend]]:
    store = Store(f"sqlite:///{tmp_path / 'rl.sqlite'}")
    inv = load_inventory(repo_dir / "examples" / "site-h100-2rack.yaml")
    store.import_inventory(inv)
    backend = StoreBackend(store)
    with BootServer(backend, tmp_path) as server:
        yield store, inv, server, backend
    store.close()


def _net(root: Path, nics: dict[str, str]) -> Path:
    """A /sys/class/net: physical NICs have a ``device`` link, virtual ones (and lo) do not."""
    for name, mac in {**nics, "lo": "00:00:00:00:00:00", "br0": "02:00:00:00:00:01"}.items():
        (root / name).mkdir(parents=True)
        (root / name / "address").write_text(mac + "\n")
        if name in nics:
            (root / name / "device").mkdir()
    return root


def _agent(cmdline: Path, net: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(AGENT), "--cmdline", str(cmdline), "--net", str(net),
                           "--attempts", "2", "--interval", "0.1"],
                          capture_output=True, text=True, timeout=60, check=False)


def test_agent_reports_image_and_macs_once(served, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    store, inv, server, backend = served
    node = inv.node("r01-n02")
    tokens: list[str] = []
    boot_store.issue_boot(store, node.name, node.boot_mac(), "run-9", 1,
                          lambda t: (tokens.append(t), ipxe_script(node, IMAGE, server.phone_home_url, t))[1],
                          timedelta(minutes=5))
    script = boot_store.pending_script(store, node.boot_mac())
    assert script is not None
    kernel_line = next(line for line in script.splitlines() if line.startswith("kernel "))
    cmdline = tmp_path / "cmdline"
    cmdline.write_text("BOOT_IMAGE=vmlinuz " + kernel_line.split(" ", 2)[2] + "\n")
    net = _net(tmp_path / "net", {"enp1s0": node.boot_mac().upper(), "ibp2s0": "02:11:22:33:44:55"})

    first = _agent(cmdline, net)
    assert first.returncode == 0, first.stdout
    assert [(r.node, r.image, r.image_version, r.macs) for r in backend.reports] == [
        (node.name, "debian12-gpu", "2026.11.1", (node.boot_mac().lower(), "02:11:22:33:44:55"))]

    replay = _agent(cmdline, net)  # the token is single-use: a second boot with it is refused at once
    assert replay.returncode == 1 and "replay refused" in replay.stdout
    assert len(backend.reports) == 1
    for out in (first, replay):
        assert tokens[0] not in out.stdout + out.stderr


def test_agent_without_a_request_or_server(served, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    net = _net(tmp_path / "net", {"eth0": "02:00:00:00:00:09"})
    plain = tmp_path / "plain"
    plain.write_text("BOOT_IMAGE=vmlinuz root=/dev/sda1 quiet\n")
    res = _agent(plain, net)
    assert res.returncode == 2 and "missing node, image, image_version, phone_home, token" in res.stdout

    # A server that is gone: every attempt fails, the unit fails (exit 1), no traceback.
    down = tmp_path / "down"
    down.write_text("racklife.node=n racklife.image=i racklife.image_version=1 "
                    "racklife.phone_home=http://127.0.0.1:9/phone-home racklife.token=abc\n")
    res = _agent(down, net)
    assert res.returncode == 1 and "gave up after 2 attempts" in res.stdout and "Traceback" not in res.stderr


def test_a_root_image_is_published_with_live_boot_and_its_checksum(tmp_path: Path, repo_dir: Path) -> None:
    import json

    from lifecycle.drivers.boot.render import parse_ipxe_args
    from lifecycle.workflows.boot_images import published_images

    for rel, manifest in {
        "minimal-1": {"name": "minimal", "version": "1", "kind": "initramfs", "built_at": "2026-11-30T00:00:00+00:00",
                      "artefacts": {"vmlinuz": {"sha256": "1" * 64}, "initrd.img": {"sha256": "2" * 64}}},
        "debian12-gpu-2026.11.1": {"name": "debian12-gpu", "version": "2026.11.1", "kind": "rootfs",
                                   "built_at": "2026-11-30T00:00:00+00:00",
                                   "artefacts": {"root.squashfs": {"sha256": "c" * 64, "size": 1}}},
    }.items():
        (tmp_path / rel).mkdir()
        (tmp_path / rel / "manifest.json").write_text(json.dumps(manifest))
    images = published_images(tmp_path, "http://10.77.0.1:8069")
    assert images["minimal"].rootfs_url is None and images["minimal"].kernel_args == ("console=ttyS0",)
    root = "http://10.77.0.1:8069/images/debian12-gpu-2026.11.1/root.squashfs"
    deb = images["debian12-gpu"]
    assert images["debian12-gpu:2026.11.1"] == deb
    assert deb.kernel_args == ("console=ttyS0", "boot=live", f"fetch={root}")
    node = load_inventory(repo_dir / "examples" / "site-h100-2rack.yaml").node("r01-n01")
    script = ipxe_script(node, deb, "http://10.77.0.1:8069/phone-home", "tok")
    assert f"boot=live fetch={root} " in script
    args = parse_ipxe_args(script)
    assert args["root"] == root and args["root_sha256"] == "c" * 64 and args["image"] == "debian12-gpu"

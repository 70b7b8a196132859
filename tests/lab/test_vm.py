"""The QEMU node's command line and console bookkeeping (the boot itself: tests/e2e/test_vm_boot.py)."""

from __future__ import annotations

from pathlib import Path

from lifecycle.lab.netns import NodeNet
from lifecycle.lab.vm import IPXE_ROM, PHONED_HOME, VmNode, VmSpec

NET = NodeNet("vm-01", "rl-hub", "10.77.1.9", 16, "52:54:00:00:00:08", "t8")


def test_qemu_is_a_tcg_pc_on_the_lab_tap_with_the_ipxe_rom(tmp_path: Path) -> None:
    argv = VmNode(VmSpec("vm-01", memory_mb=192), NET, tmp_path).argv()
    assert argv[0].endswith("qemu-system-x86_64")
    pairs = dict(zip(argv[1::2], argv[2::2], strict=False))
    assert pairs["-accel"] == "tcg" and pairs["-machine"] == "pc" and pairs["-m"] == "192"
    assert pairs["-netdev"] == "tap,id=n0,ifname=t8,script=no,downscript=no"
    assert pairs["-device"] == f"e1000,netdev=n0,mac=52:54:00:00:00:08,romfile={IPXE_ROM}"
    assert pairs["-boot"] == "order=n"
    assert f"path={tmp_path / 'nodes' / 'vm-01' / 'console.log'}" in pairs["-chardev"]
    # One NVMe drive (the maintenance image lists it by this serial), backed by a file in the node's directory.
    assert pairs["-drive"] == f"file={tmp_path / 'nodes' / 'vm-01' / 'nvme0.img'},if=none,id=nvme0,format=raw"
    assert "-device" in argv and "nvme,serial=RLVM01N0,drive=nvme0" in argv


def test_phoned_home_counts_only_since_the_last_power_on(tmp_path: Path) -> None:
    vm = VmNode(VmSpec("vm-01"), NET, tmp_path)
    vm.prepare()
    assert not vm.phoned_home() and vm.state == "off" and vm.power_state == "Off"
    assert vm.nvme.stat().st_size == 64 << 20
    vm.console.write_text("--- racklife lab: power on (boot 1) at 1\n" + PHONED_HOME + "vm-01\n")
    assert vm.phoned_home()
    with vm.console.open("a") as f:
        f.write("--- racklife lab: power on (boot 2) at 2\nudhcpc: started\n")
    assert not vm.phoned_home()
    vm.prepare()  # a new lab starts with an empty console
    assert not vm.console.exists()

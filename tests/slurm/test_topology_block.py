"""Rendered topologies load in a real Slurm 24.11 (Debian 13), including ``topology/block``.

The lab's Slurm (Debian 12, 22.05) has no ``topology/block``; these tests run
slurmctld and scontrol from a cached trixie root (``lifecycle.lab.slurm_root``)
on what ``render`` writes, and check that ``scontrol show topology`` reports
the blocks (NVLink domains) and switches the inventory says. The first run
builds the root with debootstrap (minutes); later runs reuse it (seconds).
Needs root and the Debian package ``debootstrap``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from lifecycle.drivers.slurm.hostlist import expand
from lifecycle.drivers.slurm.render import Topology, block_sizes, render, slurm_nodes
from lifecycle.lab.slurm_root import RootedController, RootError, SlurmRoot, ensure_root, require_tools
from lifecycle.model.inventory import Inventory, parse_inventory

# One worker builds the root (the first run takes minutes); the others would wait on its lock.
pytestmark = [pytest.mark.root, pytest.mark.slow, pytest.mark.xdist_group("slurm-root")]

TRAYS_PER_RACK = 18
"""A GB200 NVL72 rack: 18 compute trays of 4 GPUs in one NVLink domain."""


@pytest.fixture(scope="module")
def slurm_root() -> SlurmRoot:
    assert os.geteuid() == 0, "the Slurm 24.11 topology tests need root (debootstrap, chroot)"
    try:
        require_tools()
        root = ensure_root()
    except RootError as exc:
        pytest.fail(f"cannot get the Debian 13 Slurm root: {exc}")
    assert root.slurm_version.startswith("24.11."), root.slurm_version
    return root


@pytest.fixture()
def ctl(slurm_root: SlurmRoot) -> Iterator[RootedController]:
    controller = RootedController(slurm_root)
    try:
        yield controller
    finally:
        controller.remove()


def gb200_inventory() -> Inventory:
    """Two NVL72 racks; rack b lends two trays to Kubernetes, so its block is the smaller one."""
    nodes = []
    for r, rack in enumerate(("a", "b")):
        for t in range(1, TRAYS_PER_RACK + 1):
            i = r * TRAYS_PER_RACK + t
            nodes.append({
                "name": f"gb-{rack}{t:02d}", "serial": f"GB{i:05d}", "rack": f"nvl72-{rack}",
                "u": 10 + t, "sku": "gb200-nvl72-tray",
                "pool": "inference" if rack == "b" and t > 16 else "training",
                "bmc": {"driver": "redfish", "address": f"https://10.30.0.{i}",
                        "credentials": "env:BMC_PASSWORD"},
                "nics": [{"name": "eno1", "mac": f"02:00:00:01:00:{i:02x}", "role": "boot"}],
                "mgmt_ip": f"10.40.0.{i}",
                "topology": {"leaf": f"leaf-{rack}", "spine": "spine-1",
                             "nvlink_block": f"nvl72-{rack}"},
            })
    return parse_inventory(yaml.safe_dump({
        "site": {"name": "lab-gb200"},
        "racks": [{"name": "nvl72-a", "units": 48}, {"name": "nvl72-b", "units": 48}],
        "pools": {"training": {"scheduler": "slurm", "partition": "train"},
                  "inference": {"scheduler": "kubernetes"}},
        "nodes": nodes,
    }))


def records(text: str, kind: str) -> dict[str, dict[str, str]]:
    """``scontrol show topology`` lines of one kind (``BlockName``/``SwitchName``), by name."""
    found: dict[str, dict[str, str]] = {}
    for line in text.splitlines():
        fields = dict(word.split("=", 1) for word in line.split() if "=" in word)
        if kind in fields:
            found[fields[kind]] = fields
    return found


def expected(inv: Inventory, label: str) -> dict[str, set[str]]:
    groups: dict[str, set[str]] = {}
    for node in slurm_nodes(inv):
        groups.setdefault(getattr(node.topology, label), set()).add(node.name)
    return groups


FIRST_START = ("state file", "Trying backup state save file")
"""What slurmctld says on a start with empty state; any other error means it disliked the files."""


def show_topology(ctl: RootedController, inv: Inventory, topology: Topology) -> str:
    files = render(inv, ctl.render_options(topology=topology)).files
    ctl.start(files)
    res = ctl.scontrol("show", "topology")
    assert res.returncode == 0, res.stderr
    complaints = [line for line in ctl.output().splitlines()
                  if ("error:" in line or "fatal:" in line) and not any(m in line for m in FIRST_START)]
    assert not complaints, ctl.output()
    return res.stdout


@pytest.mark.parametrize("which", ["site16", "gb200"])
def test_block_topology_loads(which: str, site16: Inventory, ctl: RootedController) -> None:
    inv = site16 if which == "site16" else gb200_inventory()
    out = show_topology(ctl, inv, "block")
    blocks = records(out, "BlockName")
    want = expected(inv, "nvlink_block")
    # The base blocks are the NVLink domains, each with exactly its nodes (the
    # higher levels are listed apart, as ``AggregatedBlock``).
    assert {name: set(expand(rec["Nodes"])) for name, rec in blocks.items()} == want, out
    config = ctl.scontrol("show", "config").stdout
    assert "topology/block" in config


def test_gb200_block_sizes(ctl: RootedController) -> None:
    inv = gb200_inventory()
    conf = render(inv, ctl.render_options(topology="block")).files["topology.conf"]
    # Rack b has 16 trays in Slurm: the base block size is the smaller rack.
    assert conf.splitlines()[1:] == [
        "BlockSizes=16,32",
        "BlockName=nvl72-a Nodes=gb-a[01-18]",
        "BlockName=nvl72-b Nodes=gb-b[01-16]",
    ]
    out = show_topology(ctl, inv, "block")
    assert {name: rec["BlockSize"] for name, rec in records(out, "BlockName").items()} == {
        "nvl72-a": "16", "nvl72-b": "16",
    }, out
    # The second level (32 nodes) joins both racks into one aggregated block.
    (upper,) = records(out, "AggregatedBlock").values()
    assert upper["BlockSize"] == "32", out
    assert set(expand(upper["Nodes"])) == {n.name for n in slurm_nodes(inv)}, out


def test_without_block_sizes_24_11_refuses_a_smaller_later_block(ctl: RootedController) -> None:
    """Why render writes BlockSizes: Slurm 24.11 otherwise takes the first block as the base."""
    files = render(gb200_inventory(), ctl.render_options(topology="block")).files
    topo = files["topology.conf"]
    files["topology.conf"] = "".join(
        line for line in topo.splitlines(keepends=True) if not line.startswith("BlockSizes=")
    )
    with pytest.raises(RootError, match="children count lower than bblock_node_cnt"):
        ctl.start(files)


@pytest.mark.parametrize("which", ["site16", "gb200"])
def test_tree_topology_loads(which: str, site16: Inventory, ctl: RootedController) -> None:
    inv = site16 if which == "site16" else gb200_inventory()
    out = show_topology(ctl, inv, "tree")
    switches = records(out, "SwitchName")
    leaves = expected(inv, "leaf")
    for leaf, nodes in leaves.items():
        assert set(expand(switches[leaf]["Nodes"])) == nodes, out
    spine = switches["spine-1"]
    assert set(expand(spine["Switches"])) == set(leaves), out
    assert set(expand(spine["Nodes"])) == {n.name for n in slurm_nodes(inv)}, out


def test_block_sizes_start_at_the_smallest_block_and_double() -> None:
    def sizes(*counts: int) -> list[int]:
        return block_sizes({f"b{i}": ["n"] * c for i, c in enumerate(counts)})

    assert sizes(18) == [18]
    assert sizes(8, 6) == [6, 12]
    assert sizes(18, 18, 18) == [18, 36]
    assert sizes(*[18] * 8) == [18, 36, 72, 144]


def test_a_cached_root_is_reused(slurm_root: SlurmRoot) -> None:
    manifest = slurm_root.path / "racklife-root.json"
    before = manifest.stat().st_mtime_ns
    again = ensure_root()
    assert again.path == slurm_root.path
    assert again.versions == slurm_root.versions
    assert manifest.stat().st_mtime_ns == before


def test_missing_debootstrap_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(RootError, match="apt-get install debootstrap"):
        ensure_root(cache=tmp_path / "cache")

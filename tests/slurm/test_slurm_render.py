"""Rendering Slurm's files from the inventory: content, determinism, topology forms."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from lifecycle.cli import app
from lifecycle.drivers.slurm.hostlist import compress, expand
from lifecycle.drivers.slurm.render import RenderError, RenderOptions, node_line, render
from lifecycle.model.inventory import Inventory, load_inventory


def test_render_is_byte_identical(inventory_path: Path) -> None:
    a = render(load_inventory(inventory_path))
    b = render(load_inventory(inventory_path))
    assert a.files == b.files
    assert set(a.files) == {"slurm.conf", "gres.conf", "topology.conf", "cgroup.conf", "slurmdbd.conf"}
    assert "slurmdbd.conf" not in render(load_inventory(inventory_path), RenderOptions(accounting=False)).files


def test_production_defaults_account_gpus_through_slurmdbd(site16: Inventory) -> None:
    files = render(site16).files
    conf = files["slurm.conf"].splitlines()
    assert "AccountingStorageType=accounting_storage/slurmdbd" in conf
    assert "AccountingStorageHost=slurmctld" in conf
    assert "AccountingStorageTRES=gres/gpu" in conf
    # configless and power saving share one SlurmctldParameters line (a second would replace the first).
    params = [line for line in conf if line.startswith("SlurmctldParameters=")]
    assert len(params) == 1 and params[0].split("=", 1)[1].split(",")[0] == "enable_configless"
    dbd = files["slurmdbd.conf"].splitlines()
    assert dbd[1:] == ["AuthType=auth/munge", "DbdHost=slurmctld", "SlurmUser=slurm",
                       "PidFile=/run/slurm/slurmdbd.pid", "LogFile=/var/log/slurm/slurmdbd.log",
                       "StorageType=accounting_storage/mysql", "StorageHost=localhost", "StorageUser=slurm",
                       "StorageLoc=slurm_acct_db"]
    assert not any(line.startswith("StoragePass") for line in dbd)  # the socket authenticates: no password


def test_backup_controller_is_a_second_slurmctld_host(site16: Inventory) -> None:
    conf = render(site16, RenderOptions(controller="ctl-a", controller_addr="10.0.0.1", backup_controller="ctl-b",
                                        backup_controller_addr="10.0.0.2", slurmctld_timeout_s=10)).files["slurm.conf"]
    hosts = [line for line in conf.splitlines() if line.startswith("SlurmctldHost=")]
    assert hosts == ["SlurmctldHost=ctl-a(10.0.0.1)", "SlurmctldHost=ctl-b(10.0.0.2)"]
    assert "SlurmctldTimeout=10" in conf.splitlines()
    with pytest.raises(RenderError, match="backup_controller: must differ"):
        render(site16, RenderOptions(controller="ctl-a", backup_controller="ctl-a"))
    with pytest.raises(RenderError, match="dbd_extra"):
        render(site16, RenderOptions(dbd_extra=("StoragePass=x\nPrologSlurmctld=/tmp/x",)))


def test_a_nodes_own_line_is_the_one_slurm_conf_defines_it_with(site16: Inventory) -> None:
    """The line a registration hook is handed (a node slurm.conf lacks: gpu-015, a Kubernetes node) is rendered
    as a training node's line is."""
    conf = render(site16).files["slurm.conf"]
    assert node_line(site16.node("gpu-001")) in conf.splitlines()
    line = node_line(site16.node("gpu-015"))
    assert line.startswith("NodeName=gpu-015 ") and "Gres=gpu:" in line and "\n" not in line


def test_node_order_does_not_change_output(site16: Inventory) -> None:
    shuffled = site16.model_copy(update={"nodes": list(reversed(site16.nodes))})
    assert render(shuffled).files == render(site16).files


def test_slurm_conf_nodes_and_partitions(site16: Inventory) -> None:
    conf = render(site16).files["slurm.conf"]
    node_lines = [line for line in conf.splitlines() if line.startswith("NodeName=")]
    # 12 training + 2 lendable nodes; the 2 Kubernetes nodes are not Slurm's.
    assert len(node_lines) == 14
    assert "NodeName=gpu-015" not in conf
    first = node_lines[0].split()
    assert first[:2] == ["NodeName=gpu-001", "NodeAddr=10.20.0.1"]
    assert "CPUs=224" in first
    assert "Gres=gpu:h100:8" in first
    assert f"RealMemory={int(2048 * 1024 * 0.95)}" in first
    assert "Feature=h100-sxm-8,h100,rack-r01,leaf-a,spine-1,nvl-1" in first
    assert "PartitionName=train Nodes=gpu-[001-012] Default=YES MaxTime=INFINITE State=UP" in conf
    assert "PartitionName=flex Nodes=gpu-[013-014] MaxTime=INFINITE State=UP" in conf
    assert "TopologyPlugin=topology/tree" in conf


def test_power_saving_only_for_lendable_nodes(site16: Inventory) -> None:
    conf = render(site16).files["slurm.conf"]
    cloud = [line.split()[0] for line in conf.splitlines() if line.endswith("State=CLOUD")]
    assert cloud == ["NodeName=gpu-013", "NodeName=gpu-014"]
    assert "SuspendExcNodes=gpu-[001-012]" in conf
    assert "ResumeProgram=/usr/libexec/racklife/slurm-resume" in conf
    no_lending = site16.model_copy(
        update={"pools": {k: v.model_copy(update={"lendable": False}) for k, v in site16.pools.items()}}
    )
    conf2 = render(no_lending).files["slurm.conf"]
    assert "ResumeProgram" not in conf2 and "State=CLOUD" not in conf2


def test_gres_conf_lists_device_files(site16: Inventory) -> None:
    gres = render(site16).files["gres.conf"].splitlines()
    assert gres[1:] == [
        "AutoDetect=nvml",
        "NodeName=gpu-[001-014] Name=gpu Type=h100 File=/dev/nvidia[0-7]",
    ]
    lab = render(site16, RenderOptions(gres_autodetect="off", gpu_device_dir="/tmp/x/dev"))
    assert "AutoDetect=off" in lab.files["gres.conf"]
    assert "File=/tmp/x/dev/nvidia[0-7]" in lab.files["gres.conf"]


def test_topology_tree_and_block(site16: Inventory) -> None:
    tree = render(site16).files["topology.conf"].splitlines()[1:]
    assert tree == [
        "SwitchName=leaf-a Nodes=gpu-[001-008]",
        "SwitchName=leaf-b Nodes=gpu-[009-014]",
        "SwitchName=spine-1 Switches=leaf-a,leaf-b",
    ]
    rendered = render(site16, RenderOptions(topology="block"))
    assert rendered.files["topology.conf"].splitlines()[1:] == [
        "BlockSizes=6,12",
        "BlockName=nvl-1 Nodes=gpu-[001-008]",
        "BlockName=nvl-2 Nodes=gpu-[009-014]",
    ]
    assert "TopologyPlugin=topology/block" in rendered.files["slurm.conf"]


def test_tree_joins_unlabelled_racks_under_core(site16: Inventory) -> None:
    bare = [n.model_copy(update={"topology": n.topology.model_copy(update={"leaf": None, "spine": None})})
            for n in site16.nodes]
    tree = render(site16.model_copy(update={"nodes": bare})).files["topology.conf"].splitlines()[1:]
    assert tree == [
        "SwitchName=rack-r01 Nodes=gpu-[001-008]",
        "SwitchName=rack-r02 Nodes=gpu-[009-014]",
        "SwitchName=core Switches=rack-r[01-02]",
    ]


def test_features_do_not_repeat_a_prefix(site16: Inventory) -> None:
    from lifecycle.drivers.slurm.render import features

    node = site16.node("gpu-001")
    bare = node.model_copy(update={"topology": node.topology.model_copy(update={"leaf": "ib1"})})
    assert features(node) == ["h100-sxm-8", "h100", "rack-r01", "leaf-a", "spine-1", "nvl-1"]
    assert "leaf-ib1" in features(bare)


def test_hostlist_round_trip() -> None:
    names = ["gpu-001", "gpu-002", "gpu-003", "gpu-007", "login", "n9", "n10"]
    text = compress(names)
    assert text == "gpu-[001-003,007],login,n9,n10"
    assert sorted(expand(text)) == sorted(names)
    assert expand("node[1433,1787,1889-1890]") == ["node1433", "node1787", "node1889", "node1890"]
    assert expand("r[1-2]-n[01-02]") == ["r1-n01", "r1-n02", "r2-n01", "r2-n02"]


def test_cli_render_writes_files_and_is_idempotent(inventory_path: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    first = runner.invoke(app, ["slurm", "render", "--inventory", str(inventory_path),
                                "--out", str(tmp_path), "--json"])
    assert first.exit_code == 0, first.output
    assert '"changed": [\n    "cgroup.conf"' in first.output
    second = runner.invoke(app, ["slurm", "render", "--inventory", str(inventory_path),
                                 "--out", str(tmp_path), "--json"])
    assert second.exit_code == 0
    assert '"changed": []' in second.output
    assert (tmp_path / "slurm.conf").read_text() == render(load_inventory(inventory_path)).files["slurm.conf"]

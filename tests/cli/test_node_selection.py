"""One way to name nodes: names and hostlists, racks, --rack/--pool/--all/--selector, checked against the store.

Before: `provision n1 n2 --rack R` but `accept RACK --nodes a,b`; `accept
node-04` answered "no nodes in rack 'node-04'"; `nodes list --pool bogus` was
an empty table with exit 0; no command took a hostlist.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import typer

from lifecycle.cli._select import select
from lifecycle.model.inventory import load_inventory
from lifecycle.store import Store

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "site-h100-2rack.yaml"
EXE = shutil.which("racklife") or str(Path(sys.executable).with_name("racklife"))


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    h = tmp_path_factory.mktemp("select")
    store = Store(f"sqlite:///{h / 'racklife.sqlite'}")
    store.import_inventory(load_inventory(EXAMPLE))
    store.close()
    (h / "ssh_config").write_text("Host *\n  BatchMode yes\n")
    return h


@pytest.fixture
def store(home: Path) -> Iterator[Store]:
    s = Store(f"sqlite:///{home / 'racklife.sqlite'}")
    yield s
    s.close()


def racklife(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RACKLIFE_")} | {"RACKLIFE_HOME": str(home)}
    return subprocess.run([EXE, *args], env=env, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)


def test_hostlists_racks_pools_and_selectors(store: Store) -> None:
    assert select(store, ["r01-n[01-03]", "r02-n08"]) == ["r01-n01", "r01-n02", "r01-n03", "r02-n08"]
    assert select(store, ["r01-n[07-08],r01-n07"]) == ["r01-n07", "r01-n08"]  # each once, in order
    assert select(store, ["r02"], racks_as_targets=True) == [f"r02-n0{i}" for i in range(1, 9)]
    assert select(store, pools=["inference"]) == ["r01-n07", "r01-n08", "r02-n07", "r02-n08"]
    assert select(store, racks=["r01"], pools=["inference"]) == ["r01-n07", "r01-n08"]
    assert select(store, selector="pool=inference,rack=r02") == ["r02-n07", "r02-n08"]
    assert len(select(store, all_=True)) == 16


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"targets": ["r09-n01"]}, "unknown node(s): r09-n01"),
    ({"targets": ["r01-n[01-02"]}, "not a node name or hostlist"),
    ({"racks": ["r09"]}, "unknown rack(s): r09 (racks in the store: r01, r02)"),
    ({"pools": ["gaming"]}, "unknown pool(s): gaming (pools in the store: inference, training)"),
    ({"selector": "colour=red"}, "KEY one of state, pool, rack, sku"),
    ({"selector": "state=in_service"}, "no node matches selector state=in_service"),
    ({"targets": ["r01-n01"], "racks": ["r01"]}, "name the nodes one way"),
    ({}, "name the nodes one way"),
])
def test_what_the_store_does_not_know_is_bad_input(store: Store, kwargs: dict[str, object],
                                                    message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(typer.Exit) as exc:
        select(store, **kwargs)  # type: ignore[arg-type]
    assert exc.value.exit_code == 2
    assert message in " ".join(capsys.readouterr().err.split())


def test_commands_take_the_same_names(home: Path) -> None:
    listed = racklife(home, "nodes", "list", "--pool", "gaming", "--json")
    assert listed.returncode == 2 and "unknown pool(s): gaming" in json.loads(listed.stdout)["error"]["message"]
    accept = racklife(home, "accept", "r09-n04", "--ssh-config", str(home / "ssh_config"))
    assert accept.returncode == 2 and "unknown node(s): r09-n04" in accept.stderr and "rack" not in accept.stderr
    prov = racklife(home, "provision", "r01-n[01-02]", "--rack", "r01")
    assert prov.returncode == 2 and "name the nodes one way" in prov.stderr
    leave = racklife(home, "slurm", "leave", "r01-n[01-02],r09-n01", "--dry-run")
    assert leave.returncode == 2 and "unknown node(s): r09-n01" in leave.stderr
    join = racklife(home, "slurm", "join", "--pool", "gaming")
    assert join.returncode == 2 and "unknown pool(s): gaming" in join.stderr


def test_the_commands_that_took_only_names_take_the_filters_too(home: Path) -> None:
    """kube join, role-swap, decommission, repair and upgrade took plain names (or --pool/--nodes) only."""
    (home / "kubeconfig").write_text("apiVersion: v1\nkind: Config\n")
    kube = ["--kubeconfig", str(home / "kubeconfig")]
    cases = [
        (["kube", "join", "--rack", "r09", *kube], "unknown rack(s): r09 (racks in the store: r01, r02)"),
        (["role-swap", "--pool", "gaming", "--to", "inference", *kube],
         "unknown pool(s): gaming (pools in the store: inference, training)"),
        (["decommission", "--selector", "colour=red", "--dry-run"], "KEY one of state, pool, rack, sku"),
        (["decommission", "r01-n[01-02]", "--rack", "r01", "--dry-run"], "name the nodes one way"),
        (["repair", "r01-n[01-02]", "--action", "reboot"], "repair takes one node at a time"),
        (["upgrade", "--rack", "r09", "--image", "minimal:2"], "unknown rack(s): r09"),
        (["upgrade", "--nodes", "r01-n[01-02],r09-n01", "--image", "minimal:2"], "unknown node(s): r09-n01"),
    ]
    for args, needle in cases:
        res = racklife(home, *args)
        assert res.returncode == 2 and needle in " ".join(res.stderr.split()), (args, res.stderr)
    # A filter that selects, through to the command's own checks: every node of rack r02 is only enrolled.
    swap = racklife(home, "role-swap", "--selector", "rack=r02,pool=inference", "--to", "training", "--dry-run",
                    "--json", *kube)
    assert swap.returncode == 5, swap.stderr
    assert [n["node"] for n in json.loads(swap.stdout)["nodes"]] == ["r02-n07", "r02-n08"]
    dec = racklife(home, "decommission", "r01-n[07-08]", "--dry-run", "--json")
    assert [n["node"] for n in json.loads(dec.stdout)["nodes"]] == ["r01-n07", "r01-n08"], dec.stderr


def test_an_empty_store_says_which_store(tmp_path: Path) -> None:
    res = racklife(tmp_path, "nodes", "list")
    assert res.returncode == 0 and f"no nodes in the store sqlite:///{tmp_path / 'racklife.sqlite'}" in res.stderr


def test_node_and_nodes_are_one_group(home: Path) -> None:
    listed = racklife(home, "node", "list", "--selector", "pool=inference,rack=r02", "-o", "name")
    assert listed.returncode == 0 and listed.stdout.split() == ["r02-n07", "r02-n08"]
    shown = json.loads(racklife(home, "nodes", "show", "r01-n01", "--json").stdout)
    assert shown["name"] == "r01-n01"
    assert racklife(home, "nodes", "history", "r01-n01", "--no-headers").stdout.startswith("20")

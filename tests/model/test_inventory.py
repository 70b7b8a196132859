"""Inventory validation: the good example loads; each bad input names its file, line and field."""

from __future__ import annotations

from pathlib import Path

import pytest

from lifecycle.model.inventory import InventoryError, load_inventory, parse_inventory

BASE = """\
site:
  name: lab1
racks:
  - name: r01
pools:
  training:
    scheduler: slurm
    partition: train
  inference:
    scheduler: kubernetes
    labels: {racklife.io/pool: inference}
images:
  - name: minimal
    version: "1"
nodes:
  - name: n01
    serial: SN-0001
    rack: r01
    u: 1
    sku: h100-sxm-8
    pool: training
    image: minimal
    bmc:
      driver: redfish
      address: https://127.0.0.1:8001
      credentials: env:BMC_CREDS
    nics:
      - {name: eno1, mac: "02:00:00:00:00:01", role: boot, ip: 10.0.0.1}
    mgmt_ip: 10.1.0.1
    topology: {leaf: leaf1, spine: spine1, nvlink_block: nvl1}
  - name: n02
    serial: SN-0002
    rack: r01
    u: 2
    sku: h100-sxm-8
    pool: inference
    bmc:
      driver: ipmi
      address: 127.0.0.1:6230
      credentials: file:/etc/racklife/bmc-n02
    nics:
      - {name: eno1, mac: "02:00:00:00:00:02", role: boot, ip: 10.0.0.2}
    mgmt_ip: 10.1.0.2
"""


def line_of(text: str, needle: str, nth: int = 0) -> int:
    hits = [i + 1 for i, line in enumerate(text.splitlines()) if needle in line]
    return hits[nth]


def test_base_is_valid() -> None:
    inv = parse_inventory(BASE, "base.yaml")
    assert [n.name for n in inv.nodes] == ["n01", "n02"]
    assert inv.nodes[1].bmc.host == "127.0.0.1"
    assert inv.pool("quarantine").scheduler == "none"
    assert inv.pool("training").min_nodes == 0 and inv.pool("training").retest_level == "quick"
    floor = parse_inventory(BASE.replace("    partition: train\n", "    partition: train\n    min_nodes: 1\n"))
    assert floor.pool("training").min_nodes == 1
    assert inv.pool("training").image is None
    imaged = parse_inventory(BASE.replace("    partition: train\n", "    partition: train\n    image: minimal\n"))
    assert imaged.pool("training").image == "minimal"


def test_example_site_loads(repo_dir: Path) -> None:
    inv = load_inventory(repo_dir / "examples" / "site-h100-2rack.yaml")
    assert len(inv.nodes) == 16
    assert {r.name for r in inv.racks} == {"r01", "r02"}
    assert all(n.sku == "h100-sxm-8" for n in inv.nodes)
    assert {n.pool for n in inv.nodes} == {"training", "inference"}
    assert len({n.boot_mac() for n in inv.nodes}) == 16


# (id, old text, new text, marker line text in the mutated file (nth occurrence), field, message part)
CASES = [
    ("dup-name", "  - name: n02\n", "  - name: n01\n", ("- name: n01", 1), "nodes[1](n01).name", "duplicate node name"),
    ("dup-serial", "serial: SN-0002", "serial: SN-0001", ("serial: SN-0001", 1), "nodes[1](n02).serial", "duplicate serial"),
    ("dup-mac", '"02:00:00:00:00:02"', '"02:00:00:00:00:01"', ("02:00:00:00:00:01", 1), "nodes[1](n02).nics[0](eno1).mac", "duplicate MAC"),
    ("dup-ip", "mgmt_ip: 10.1.0.2", "mgmt_ip: 10.1.0.1", ("mgmt_ip: 10.1.0.1", 1), "nodes[1](n02).mgmt_ip", "duplicate IP"),
    ("bad-mac", '"02:00:00:00:00:02"', '"02:00:00:00:00:zz"', ("00:zz", 0), "nodes[1](n02).nics[0](eno1).mac", "not a MAC address"),
    ("multicast-mac", '"02:00:00:00:00:02"', '"01:00:5e:00:00:02"', ("01:00:5e", 0), "nodes[1](n02).nics[0](eno1).mac", "multicast"),
    ("bad-ip", "mgmt_ip: 10.1.0.2", "mgmt_ip: 10.1.0.256", ("10.1.0.256", 0), "nodes[1](n02).mgmt_ip", "not an IP address"),
    ("shell-name", "  - name: n02\n", "  - name: \"n02;reboot\"\n", ("n02;reboot", 0), "nodes[1](n02;reboot).name", "RFC 1123"),
    ("upper-name", "  - name: n02\n", "  - name: Node02\n", ("Node02", 0), "nodes[1](Node02).name", "RFC 1123"),
    ("unknown-sku", "sku: h100-sxm-8\n    pool: inference", "sku: h100-sxm-9\n    pool: inference", ("h100-sxm-9", 0), "nodes[1](n02).sku", "unknown SKU"),
    ("unknown-pool", "    pool: inference\n", "    pool: inferense\n", ("inferense", 0), "nodes[1](n02).pool", "unknown pool 'inferense'"),
    ("unknown-image", "image: minimal", "image: golden", ("image: golden", 0), "nodes[0](n01).image", "unknown image 'golden'"),
    ("literal-password", "credentials: file:/etc/racklife/bmc-n02", "credentials: hunter2", ("credentials: hunter2", 0), "nodes[1](n02).bmc.credentials", "literal secret"),
    ("password-field", "      credentials: env:BMC_CREDS\n", "      credentials: env:BMC_CREDS\n      password: hunter2\n", ("password: hunter2", 0), "nodes[0](n01).bmc.password", "'password' is not allowed"),
    ("unknown-rack", "rack: r01\n    u: 2", "rack: r09\n    u: 2", ("rack: r09", 0), "nodes[1](n02).rack", "unknown rack 'r09'"),
    ("same-slot", "u: 2", "u: 1", ("u: 1", 1), "nodes[1](n02).u", "already taken"),
    ("bad-driver", "driver: ipmi", "driver: snmp", ("driver: snmp", 0), "nodes[1](n02).bmc.driver", "'redfish' or 'ipmi'"),
    ("missing-serial", "    serial: SN-0002\n", "", ("- name: n02", 0), "nodes[1](n02).serial", "Field required"),
    ("unknown-field", "    mgmt_ip: 10.1.0.2\n", "    mgmt_ip: 10.1.0.2\n    colour: red\n", ("colour: red", 0), "nodes[1](n02).colour", "unknown field"),
    ("duplicate-key", "    rack: r01\n    u: 2", "    rack: r01\n    rack: r01\n    u: 2", ("rack: r01", 2), "nodes[1](n02).rack", "duplicate key"),
    ("slurm-pool-no-partition", "    partition: train\n", "", ("training:", 0), "pools.training", "needs 'partition'"),
    ("floor-above-members", "    partition: train\n", "    partition: train\n    min_nodes: 2\n", ("min_nodes: 2", 0), "pools.training.min_nodes", "more than the 1 node(s)"),
    ("negative-floor", "    partition: train\n", "    partition: train\n    min_nodes: -1\n", ("min_nodes: -1", 0), "pools.training.min_nodes", "greater than or equal to 0"),
    ("floor-string", "    partition: train\n", "    partition: train\n    min_nodes: '1'\n", ("min_nodes: '1'", 0), "pools.training.min_nodes", "valid integer"),
    ("unknown-pool-image", "    partition: train\n", "    partition: train\n    image: golden\n", ("image: golden", 0), "pools.training.image", "unknown image 'golden'"),
    ("bad-retest-level", "    partition: train\n", "    partition: train\n    retest_level: soak\n", ("retest_level: soak", 0), "pools.training.retest_level", "'quick', 'standard' or 'full'"),
    ("firmware-relative-file", "    mgmt_ip: 10.1.0.1\n", "    mgmt_ip: 10.1.0.1\n    firmware:\n      - {component: BMC, version: 5.0.0, file: fw/bmc.tar}\n", ("file: fw/bmc.tar", 0), "nodes[0](n01).firmware[0].file", "absolute path"),
    ("firmware-twice", "    mgmt_ip: 10.1.0.1\n", "    mgmt_ip: 10.1.0.1\n    firmware:\n      - {component: BMC, version: 5.0.0, file: /fw/a.tar}\n      - {component: bmc, version: 5.0.1, file: /fw/b.tar}\n", ("firmware:", 0), "nodes[0](n01).firmware", "listed twice"),
    ("firmware-no-version", "    mgmt_ip: 10.1.0.1\n", "    mgmt_ip: 10.1.0.1\n    firmware:\n      - {component: BMC, file: /fw/a.tar}\n", ("component: BMC", 0), "nodes[0](n01).firmware[0].version", "Field required"),
    ("bad-bmc-address", "address: 127.0.0.1:6230", "address: 'host;id:6230'", ("host;id", 0), "nodes[1](n02).bmc.address", "not a host name"),
]


@pytest.mark.parametrize(("case", "old", "new", "marker", "field", "message"), CASES, ids=[c[0] for c in CASES])
def test_bad_inventory_reports_field_and_line(
    case: str, old: str, new: str, marker: tuple[str, int], field: str, message: str
) -> None:
    assert old in BASE, case
    text = BASE.replace(old, new, 1)
    with pytest.raises(InventoryError) as info:
        parse_inventory(text, "bad.yaml")
    expected_line = line_of(text, marker[0], marker[1])
    matching = [p for p in info.value.problems if p.field == field and message in p.message]
    assert matching, f"{case}: no problem for {field!r} containing {message!r}; got {info.value.problems}"
    assert matching[0].line == expected_line
    assert matching[0].file == "bad.yaml"
    assert str(matching[0]).startswith(f"bad.yaml:{expected_line}: {field}: ")


def test_every_problem_is_reported_at_once() -> None:
    text = (BASE.replace("serial: SN-0002", "serial: SN-0001")
            .replace("pool: inference", "pool: nowhere")
            .replace('"02:00:00:00:00:02"', '"not-a-mac"'))
    with pytest.raises(InventoryError) as info:
        parse_inventory(text, "bad.yaml")
    fields = {p.field for p in info.value.problems}
    assert {"nodes[1](n02).serial", "nodes[1](n02).pool", "nodes[1](n02).nics[0](eno1).mac"} <= fields


def test_literal_password_is_never_echoed() -> None:
    text = BASE.replace("credentials: env:BMC_CREDS", "credentials: S3cr3t-Pa55")
    with pytest.raises(InventoryError) as info:
        parse_inventory(text, "bad.yaml")
    assert "S3cr3t-Pa55" not in str(info.value)


@pytest.mark.parametrize("text", ["", "site: [\n", "- just\n- a list\n", "site: {name: x}\nracks: []\npools: {}\n"])
def test_garbage_is_a_clear_error(text: str) -> None:
    with pytest.raises(InventoryError) as info:
        parse_inventory(text, "g.yaml")
    assert info.value.problems
    assert all(str(p).startswith("g.yaml:") for p in info.value.problems)


def test_unreadable_file(tmp_path: Path) -> None:
    with pytest.raises(InventoryError, match="cannot read"):
        load_inventory(tmp_path / "nope.yaml")


def test_a_firmware_baseline_loads() -> None:
    text = BASE.replace("    mgmt_ip: 10.1.0.1\n", "    mgmt_ip: 10.1.0.1\n    firmware:\n"
                        "      - {component: BMC, version: 5.0.0, file: /srv/firmware/bmc-5.0.0.tar}\n", 1)
    [fw] = parse_inventory(text, "fw.yaml").node("n01").firmware
    assert (fw.component, fw.version, fw.file) == ("BMC", "5.0.0", "/srv/firmware/bmc-5.0.0.tar")
    assert parse_inventory(BASE, "base.yaml").node("n01").firmware == []

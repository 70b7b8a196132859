"""Hostile inventories (issue 14): each is refused at once, with file, line and field, never a traceback.

The probes named in the issue are here as regression cases (billion laughs,
20,000 nested brackets, raw NUL and ESC, one BMC spelt two ways, the
validation gaps), beside new ones of the same kinds.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from lifecycle.model import bmc_address, vocab
from lifecycle.model.inventory import MAX_BYTES, InventoryError, load_inventory, parse_inventory
from tests.model.test_inventory import BASE, line_of


def problems(text: str) -> list[str]:
    with pytest.raises(InventoryError) as info:
        parse_inventory(text, "bad.yaml")
    assert info.value.problems
    assert all(str(p).startswith("bad.yaml:") for p in info.value.problems)
    return [str(p) for p in info.value.problems]


# ------------------------------------------------------------------ resource exhaustion


def billion_laughs() -> str:
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, 10):
        prev, cur = chr(ord("a") + i - 1), chr(ord("a") + i)
        lines.append(f"{cur}: &{cur} [{','.join(['*' + prev] * 9)}]")
    return "\n".join(lines) + "\nsite: {name: *j}\n"


def test_billion_laughs_is_refused_quickly() -> None:
    text = billion_laughs()
    assert len(text) < 10_000
    start = time.monotonic()
    found = problems(text)
    assert time.monotonic() - start < 1.0
    assert any("aliases" in p and p.startswith("bad.yaml:2:") for p in found), found


def test_nesting_just_over_the_limit_is_refused() -> None:
    from lifecycle.model.strict_yaml import MAX_DEPTH

    text = BASE.replace("labels: {racklife.io/pool: inference}", "labels: " + "[" * MAX_DEPTH + "]" * MAX_DEPTH)
    assert any(f"nested deeper than {MAX_DEPTH} levels" in p for p in problems(text))


def test_a_single_alias_is_refused() -> None:
    text = BASE.replace("    mgmt_ip: 10.1.0.2\n", "    mgmt_ip: 10.1.0.2\n    labels: &l {}\n", 1) + "extra: *l\n"
    assert any("aliases" in p for p in problems(text))


def test_merge_key_is_refused() -> None:
    text = BASE.replace("    bmc:\n      driver: ipmi", "    bmc: &b\n      driver: ipmi", 1)
    text = text.replace("  - name: n02\n", "  - name: n03\n    bmc: {<<: *b}\n  - name: n02\n", 1)
    assert any("aliases" in p for p in problems(text))


@pytest.mark.parametrize("opening", ["[", "{a: "])
def test_twenty_thousand_nested_brackets(opening: str) -> None:
    closing = "]" if opening == "[" else "}"
    text = "site: " + opening * 20_000 + closing * 20_000 + "\n"
    start = time.monotonic()
    found = problems(text)
    assert time.monotonic() - start < 2.0
    # Our limit (32) or libyaml's (1,000), whichever the parser meets first: a clear error either way.
    assert any("nest" in p and p.startswith("bad.yaml:1: <yaml>: column ") for p in found), found


@pytest.mark.parametrize(("char", "name"), [("\x00", "NUL"), ("\x1b", "ESC"), ("\x7f", "DEL"), ("\u202e", "RIGHT-TO-LEFT"),
                                            ("\x85", "U+0085"), ("\u2028", "U+2028")])
def test_raw_control_character_with_line_and_column(char: str, name: str) -> None:
    text = BASE.replace("serial: SN-0002", f"serial: SN-{char}0002")
    found = problems(text)
    rows = text.split("\n")  # not splitlines(): it breaks lines at U+0085 and U+2028 too
    line = next(i for i, row in enumerate(rows, 1) if f"SN-{char}" in row)
    column = rows[line - 1].index(char) + 1
    assert any(p.startswith(f"bad.yaml:{line}: <text>: column {column}: control character") and name in p
               for p in found), found


@pytest.mark.parametrize("escape", [r"\e", r"\0", r"\n", r"\x07", r"\t"])
def test_control_character_through_yaml_escape(escape: str) -> None:
    text = BASE.replace('location: x', 'location: x').replace(
        "site:\n  name: lab1\n", f'site:\n  name: lab1\n  location: "hall{escape}2"\n')
    found = problems(text)
    assert any(p.startswith("bad.yaml:3: site.location: contains control character") for p in found), found


def test_many_control_characters_are_counted_not_listed() -> None:
    text = BASE + "# " + "\x1b" * 500 + "\n"
    found = problems(text)
    assert len(found) <= 21
    assert any("480 more control characters" in p for p in found), found


def test_huge_integer_is_a_problem_not_a_traceback() -> None:
    text = BASE.replace("u: 2", "u: " + "9" * 5000)
    assert any(p.startswith(f"bad.yaml:{line_of(text, 'u: 999')}: nodes[1](n02).u:") for p in problems(text))


def test_oversized_file_is_refused_without_reading_it(tmp_path: Path) -> None:
    big = tmp_path / "big.yaml"
    with big.open("wb") as f:
        f.write(BASE.encode())
        f.truncate(MAX_BYTES + 10)  # sparse: a 16 MiB file that costs nothing to make
    start = time.monotonic()
    with pytest.raises(InventoryError) as info:
        load_inventory(big)
    assert time.monotonic() - start < 1.0
    assert "the limit is" in str(info.value)


def test_a_fifo_or_device_is_not_read(tmp_path: Path) -> None:
    with pytest.raises(InventoryError, match="not a regular file"):
        load_inventory("/dev/zero")


def test_not_utf8_names_the_line(tmp_path: Path) -> None:
    bad = tmp_path / "latin1.yaml"
    bad.write_bytes(BASE.replace("lab1", "lab\xe91").encode("latin-1"))
    with pytest.raises(InventoryError) as info:
        load_inventory(bad)
    assert str(info.value).startswith(f"{bad}:2: <file>: not UTF-8")


# ------------------------------------------------------------------ canonical BMC identity


@pytest.mark.parametrize(("first", "second"), [
    ("driver: redfish\n      address: https://10.0.0.5", "driver: redfish\n      address: https://10.0.0.5:443/"),
    ("driver: redfish\n      address: https://10.0.0.5", "driver: ipmi\n      address: 10.0.0.5"),
    ("driver: redfish\n      address: https://BMC-7.example.com", "driver: redfish\n      address: bmc-7.example.com."),
    ("driver: redfish\n      address: https://[2001:db8::5]", "driver: ipmi\n      address: '[2001:db8:0::5]:623'"),
    ("driver: ipmi\n      address: 10.0.0.5:623", "driver: ipmi\n      address: ipmi://10.0.0.5"),
    ("driver: redfish\n      address: http://10.0.0.5/redfish/v1", "driver: redfish\n      address: HTTPS://10.0.0.5"),
], ids=["https-default-port", "ipmi-beside-redfish", "hostname-case", "ipv6-spellings", "ipmi-scheme", "http-https"])
def test_one_bmc_spelt_two_ways_is_refused(first: str, second: str) -> None:
    text = (BASE.replace("driver: redfish\n      address: https://127.0.0.1:8001", first)
            .replace("driver: ipmi\n      address: 127.0.0.1:6230", second))
    found = problems(text)
    line = line_of(text, "address:", 1)
    assert any(p.startswith(f"bad.yaml:{line}: nodes[1](n02).bmc.address: same BMC as nodes[0](n01)")
               for p in found), found


def test_emulators_on_one_host_with_their_own_ports_are_distinct() -> None:
    text = (BASE.replace("address: https://127.0.0.1:8001", "address: https://10.0.0.5:8001")
            .replace("address: 127.0.0.1:6230", "address: 10.0.0.5:6230"))
    assert len(parse_inventory(text, "ok.yaml").nodes) == 2


def test_one_bmc_two_redfish_systems_is_allowed_but_not_twice_the_same() -> None:
    two = (BASE.replace("address: https://127.0.0.1:8001", "address: https://10.0.0.5\n      system: tray1")
           .replace("driver: ipmi\n      address: 127.0.0.1:6230",
                    "driver: redfish\n      address: https://10.0.0.5/\n      system: tray2"))
    assert parse_inventory(two, "ok.yaml").nodes[1].bmc.endpoint == bmc_address.BmcEndpoint("https", "10.0.0.5", 443)
    assert any("same BMC" in p for p in problems(two.replace("system: tray2", "system: tray1")))


@pytest.mark.parametrize(("address", "message"), [
    ("https://admin:hunter2@10.0.0.5", "no user or password"),
    ("https://10.0.0.5/redfish?password=hunter2", "no query or fragment"),
    ("https://10.0.0.5#x", "no query or fragment"),
    ("ftp://10.0.0.5", "scheme must be https:// or http://"),
    ("https://010.0.0.5", "leading zeros"),
    ("https://10.0.0.5:99999", "invalid port"),
    ("https://2001:db8::5", "must be in brackets"),
    ("https://[10.0.0.5]", "not an IPv6 address"),
    ("'https://10.0.0.5 /x'", "white space"),
    ("https://10.0.0.5/a;reboot", "not a plain URL path"),
])
def test_bad_bmc_address(address: str, message: str) -> None:
    text = BASE.replace("address: https://127.0.0.1:8001", f"address: {address}")
    found = problems(text)
    line = line_of(text, "address: ")
    assert any(p.startswith(f"bad.yaml:{line}: nodes[0](n01).bmc.address: ") and message in p for p in found), found
    assert all("hunter2" not in p for p in found)


def test_ipmi_address_with_redfish_scheme() -> None:
    found = problems(BASE.replace("address: 127.0.0.1:6230", "address: https://127.0.0.1:6230"))
    assert any("nodes[1](n02).bmc.address: scheme must be ipmi://" in p for p in found), found


# ------------------------------------------------------------------ validation gaps


GAPS = [
    # (id, old, new, marker, field, message)
    ("pool-shell", "  training:\n", "  'train;rm -rf /':\n", "train;rm", "pools.train;rm -rf /", "RFC 1123"),
    ("pool-subst", "  inference:\n", "  '$(reboot)':\n", "$(reboot)", "pools.$(reboot)", "RFC 1123"),
    ("label-space", "labels: {racklife.io/pool: inference}", "labels: {'bad key': x}", "bad key",
     "pools.inference.labels.bad key", "not a Kubernetes label key"),
    ("label-semicolon", "labels: {racklife.io/pool: inference}", "labels: {a: 'x;reboot'}", "x;reboot",
     "pools.inference.labels.a", "not a Kubernetes label value"),
    ("label-subst", "labels: {racklife.io/pool: inference}", "labels: {a: '$(id)'}", "$(id)",
     "pools.inference.labels.a", "not a Kubernetes label value"),
    ("label-newline", "labels: {racklife.io/pool: inference}", 'labels: {a: "x\\ny"}', 'x\\ny',
     "pools.inference.labels.a", "control character"),
    ("label-prefix-upper", "labels: {racklife.io/pool: inference}", "labels: {Racklife.IO/pool: x}", "Racklife",
     "pools.inference.labels.Racklife.IO/pool", "prefix"),
    ("label-too-long", "labels: {racklife.io/pool: inference}", "labels: {a: " + "x" * 64 + "}", "xxxx",
     "pools.inference.labels.a", "not a Kubernetes label value"),
    ("label-number", "labels: {racklife.io/pool: inference}", "labels: {a: 3}", "{a: 3}",
     "pools.inference.labels.a", "valid string"),
    ("node-label", "    mgmt_ip: 10.1.0.2\n", "    mgmt_ip: 10.1.0.2\n    labels: {'a b': c}\n", "'a b'",
     "nodes[1](n02).labels.a b", "not a Kubernetes label key"),
    ("taint-no-effect", "labels: {racklife.io/pool: inference}",
     "labels: {racklife.io/pool: inference}\n    taints: ['racklife.io/pool=inference']", "taints:",
     "pools.inference.taints[0]", "is not a taint"),
    ("taint-bad-effect", "labels: {racklife.io/pool: inference}",
     "labels: {racklife.io/pool: inference}\n    taints: ['a=b:NoSuchEffect']", "taints:",
     "pools.inference.taints[0]", "is not a taint"),
    ("taint-bad-value", "labels: {racklife.io/pool: inference}",
     "labels: {racklife.io/pool: inference}\n    taints: ['a=$(id):NoSchedule']", "taints:",
     "pools.inference.taints[0]", "not a Kubernetes label value"),
    ("u-beyond-rack", "u: 2", "u: 43", "u: 43", "nodes[1](n02).u", "beyond rack r01's height (42 units)"),
    ("u-bool", "u: 2", "u: true", "u: true", "nodes[1](n02).u", "valid integer"),
    ("u-string", "u: 2", "u: '2'", "u: '2'", "nodes[1](n02).u", "valid integer"),
    ("units-bool", "  - name: r01\n", "  - name: r01\n    units: yes\n", "units: yes", "racks[0](r01).units",
     "valid integer"),
    ("verify-tls-string", "credentials: env:BMC_CREDS", "credentials: env:BMC_CREDS\n      verify_tls: 'false'",
     "verify_tls", "nodes[0](n01).bmc.verify_tls", "valid boolean"),
    ("ip-unspecified", "mgmt_ip: 10.1.0.2", "mgmt_ip: 0.0.0.0", "0.0.0.0", "nodes[1](n02).mgmt_ip", "unspecified"),
    ("ip-multicast", "mgmt_ip: 10.1.0.2", "mgmt_ip: 239.1.1.1", "239.1.1.1", "nodes[1](n02).mgmt_ip", "multicast"),
    ("ip-loopback", "ip: 10.0.0.2}", "ip: 127.0.0.2}", "127.0.0.2", "nodes[1](n02).nics[0](eno1).ip", "loopback"),
    ("ip-link-local", "mgmt_ip: 10.1.0.2", "mgmt_ip: 169.254.1.1", "169.254", "nodes[1](n02).mgmt_ip", "link-local"),
    ("ip-broadcast", "mgmt_ip: 10.1.0.2", "mgmt_ip: 255.255.255.255", "255.255", "nodes[1](n02).mgmt_ip",
     "broadcast"),
    ("ip6-multicast", "mgmt_ip: 10.1.0.2", "mgmt_ip: 'ff02::1'", "ff02", "nodes[1](n02).mgmt_ip", "multicast"),
    ("boot-ip-differs", "    mgmt_ip: 10.1.0.2\n", "    mgmt_ip: 10.1.0.2\n    boot_ip: 10.0.0.99\n", "boot_ip",
     "nodes[1](n02).boot_ip", "differs from the boot NIC's ip"),
    ("definition-escape", 'version: "1"', 'version: "1"\n    definition: ../../../../etc/shadow.yaml', "definition",
     "images[0](minimal).definition", "inside the repository"),
    ("definition-absolute", 'version: "1"', 'version: "1"\n    definition: /etc/passwd', "definition",
     "images[0](minimal).definition", "relative path"),
    ("definition-not-images", 'version: "1"', 'version: "1"\n    definition: roles/x.yaml', "definition",
     "images[0](minimal).definition", "under images/"),
    ("definition-dotdot-inside", 'version: "1"', 'version: "1"\n    definition: images/../../x.yaml', "definition",
     "images[0](minimal).definition", "inside the repository"),
    ("location-newline", "  name: lab1\n", '  name: lab1\n  location: "a\\u2028b"\n', "location",
     "site.location", "control character"),
    ("redfish-system-path", "credentials: env:BMC_CREDS", "credentials: env:BMC_CREDS\n      system: ../Managers",
     "system:", "nodes[0](n01).bmc.system", "Redfish resource id"),
    ("serial-case-dup", "serial: SN-0002", "serial: sn-0001", "sn-0001", "nodes[1](n02).serial", "duplicate serial"),
]


@pytest.mark.parametrize(("case", "old", "new", "marker", "field", "message"), GAPS, ids=[g[0] for g in GAPS])
def test_validation_gap_is_closed(case: str, old: str, new: str, marker: str, field: str, message: str) -> None:
    assert old in BASE, case
    text = BASE.replace(old, new, 1)
    found = problems(text)
    line = line_of(text, marker)
    assert any(p.startswith(f"bad.yaml:{line}: {field}: ") and message in p for p in found), found


# ------------------------------------------------------------------ one validator per vocabulary


def test_every_node_name_check_is_the_model_one() -> None:
    """The drivers, the lab and acceptance refuse exactly what the inventory refuses."""
    from acceptance import fanout, multinode
    from lifecycle.drivers.slurm import driver, role
    from lifecycle.lab import netns
    from lifecycle.workflows import elastic_worker

    for bad in ("Node01", "n01.example", "n_01", "-n01", "n" * 64):
        with pytest.raises(ValueError):
            vocab.node_name(bad)
        with pytest.raises(ValueError):
            driver._names([bad])
        with pytest.raises(ValueError):
            role.CommandRoleSwitch(("true",)).switch(bad, "slurm")
        with pytest.raises(ValueError):
            elastic_worker.spawn("lend", [bad])
        with pytest.raises(fanout.FanoutError):
            fanout.Target(bad, "10.0.0.1")
        with pytest.raises(multinode.MultiNodeError):
            multinode.Srun("job").argv([bad, "n02"])
        with pytest.raises(ValueError):
            netns.LabNet.__new__(netns.LabNet).add_tap(bad)


def test_dumped_inventory_reads_back_even_with_shared_values() -> None:
    """The inventory dumper never writes aliases (PyYAML's does for a shared object), which the parser refuses."""
    import yaml

    from lifecycle.model.inventory import _NoAliasDumper, dump_inventory

    shared = ["a", "b"]
    assert "*id" in yaml.safe_dump({"x": shared, "y": shared})
    assert "*id" not in yaml.dump({"x": shared, "y": shared}, Dumper=_NoAliasDumper)
    inv = parse_inventory(BASE, "base.yaml")
    assert parse_inventory(dump_inventory(inv), "dumped.yaml") == inv


# ------------------------------------------------------------------ fuzz: only ever an InventoryError

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_PIECES = ["\n", "  ", "- ", ": ", "{", "}", "[", "]", "&a ", "*a", "!!python/object:os.system", "!!binary ",
           "<<: ", "'", '"', "\\", "#", "\x00", "\x1b", "\t", "%YAML 1.1\n", "---\n", "...\n", "? ", "|", ">",
           "9" * 5000, "1e400", "0x1F", "~", "null", "yes", "2026-12-01", "\ufeff", "é", "\U0001f600"]
_YAMLISH = st.lists(st.one_of(st.sampled_from(_PIECES), st.text(max_size=8)), max_size=30).map("".join)
_FIELDS = ["  name: lab1", "    serial: SN-0002", "    u: 2", "    pool: inference", "      address: 127.0.0.1:6230",
           "labels: {racklife.io/pool: inference}", '    version: "1"', "    mgmt_ip: 10.1.0.2"]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=_YAMLISH)
def test_any_text_is_an_inventory_or_a_list_of_problems(text: str) -> None:
    try:
        parse_inventory(text, "fuzz.yaml")
    except InventoryError as exc:
        assert exc.problems and all(p.file == "fuzz.yaml" and p.field for p in exc.problems)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(field=st.sampled_from(_FIELDS), value=_YAMLISH)
def test_any_value_in_a_field_is_accepted_or_a_problem_on_its_line(field: str, value: str) -> None:
    key = field.split(":", 1)[0]
    text = BASE.replace(field, f"{key}: {value}", 1)
    try:
        parse_inventory(text, "fuzz.yaml")
    except InventoryError as exc:
        assert exc.problems and all(p.file == "fuzz.yaml" and p.field for p in exc.problems)

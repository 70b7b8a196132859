"""The boot server over real HTTP: per-MAC scripts, byte ranges, and single-use phone-home tokens."""

from __future__ import annotations

import hashlib
import http.client
import json
from datetime import timedelta
from pathlib import Path

import pytest

from lifecycle.drivers.boot.render import BootImage, RenderError, dnsmasq_conf, ipxe_script, parse_ipxe_args
from lifecycle.drivers.boot.server import BootServer, parse_range
from lifecycle.model.inventory import load_inventory
from lifecycle.store import Store
from lifecycle.store import boot as boot_store
from tests.boot.store_backend import StoreBackend


def request(server: BootServer, method: str, path: str, body: bytes | None = None,
            headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    host, port = server.url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


IMAGE = BootImage("minimal", "1", "http://127.0.0.1:1/images/vmlinuz", "http://127.0.0.1:1/images/initrd.img",
                  "http://127.0.0.1:1/images/root.squashfs", "a" * 64)


@pytest.fixture
def env(tmp_path: Path, repo_dir: Path):  # type: ignore[no-untyped-def]
    store = Store(f"sqlite:///{tmp_path / 'rl.sqlite'}")
    inv = load_inventory(repo_dir / "examples" / "site-h100-2rack.yaml")
    store.import_inventory(inv)
    images = tmp_path / "images"
    images.mkdir()
    (images / "root.squashfs").write_bytes(bytes(range(256)) * 40)
    backend = StoreBackend(store)
    with BootServer(backend, images) as server:
        yield store, inv, server, backend
    store.close()


def test_ipxe_script_carries_token_and_checksum(repo_dir: Path) -> None:
    node = load_inventory(repo_dir / "examples" / "site-h100-2rack.yaml").node("r01-n01")
    script = ipxe_script(node, IMAGE, "http://127.0.0.1:1/phone-home", "tok-123")
    assert script.startswith("#!ipxe\n")
    args = parse_ipxe_args(script)
    assert args == {"node": "r01-n01", "image": "minimal", "image_version": "1",
                    "phone_home": "http://127.0.0.1:1/phone-home", "token": "tok-123",
                    "root": "http://127.0.0.1:1/images/root.squashfs", "root_sha256": "a" * 64}
    with pytest.raises(RenderError):
        ipxe_script(node, IMAGE, "http://x/phone-home; reboot", "t")
    with pytest.raises(RenderError):
        ipxe_script(node, IMAGE, "http://127.0.0.1:1/p", "tok with space")


def test_dnsmasq_conf_has_a_reservation_per_node(repo_dir: Path) -> None:
    inv = load_inventory(repo_dir / "examples" / "site-h100-2rack.yaml")
    conf = dnsmasq_conf(inv, interface="br-lab", boot_base_url="http://10.99.0.1:8080",
                        dhcp_range=("10.20.0.100", "10.20.0.200"))
    hosts = [line for line in conf.splitlines() if line.startswith("dhcp-host=")]
    assert len(hosts) == 16
    assert "dhcp-host=3c:ec:ef:01:01:00,r01-n01,10.20.1.11" in hosts
    assert "port=0" in conf.splitlines()
    assert "dhcp-boot=tag:ipxe,http://10.99.0.1:8080/boot.ipxe" in conf
    assert conf == dnsmasq_conf(inv, interface="br-lab", boot_base_url="http://10.99.0.1:8080",
                                dhcp_range=("10.20.0.100", "10.20.0.200"))
    with pytest.raises(RenderError):
        dnsmasq_conf(inv, interface="eth0\nport=53", boot_base_url="http://x", dhcp_range=("10.0.0.1", "10.0.0.2"))


@pytest.mark.parametrize(("header", "size", "want"), [
    ("bytes=0-9", 100, (0, 9)), ("bytes=90-", 100, (90, 99)), ("bytes=-10", 100, (90, 99)),
    ("bytes=50-500", 100, (50, 99)), ("bytes=100-", 100, None), ("bytes=9-3", 100, None),
    ("bytes=-0", 100, None), ("items=0-1", 100, None), ("bytes=-", 100, None),
])
def test_parse_range(header: str, size: int, want: tuple[int, int] | None) -> None:
    assert parse_range(header, size) == want


def test_range_requests(env) -> None:  # type: ignore[no-untyped-def]
    _, _, server, _ = env
    full = bytes(range(256)) * 40
    status, headers, body = request(server, "GET", "/images/root.squashfs")
    assert status == 200 and body == full and headers["accept-ranges"] == "bytes"
    status, headers, body = request(server, "GET", "/images/root.squashfs", headers={"Range": "bytes=100-199"})
    assert status == 206 and body == full[100:200] and headers["content-range"] == f"bytes 100-199/{len(full)}"
    status, headers, _ = request(server, "GET", "/images/root.squashfs", headers={"Range": "bytes=999999-"})
    assert status == 416 and headers["content-range"] == f"bytes */{len(full)}"
    assert request(server, "GET", "/images/../rl.sqlite")[0] == 404
    assert request(server, "GET", "/images/%2e%2e/rl.sqlite")[0] == 404


def test_script_by_mac_then_single_use_phone_home(env) -> None:  # type: ignore[no-untyped-def]
    store, inv, server, backend = env
    node = inv.node("r01-n03")
    assert request(server, "GET", f"/boot/{node.boot_mac()}.ipxe")[0] == 404  # nothing pending
    boot_store.issue_boot(store, node.name, node.boot_mac(), "run-1", 1,
                          lambda t: ipxe_script(node, IMAGE, server.phone_home_url, t), timedelta(minutes=5))
    status, _, body = request(server, "GET", f"/boot/{node.boot_mac().upper()}.ipxe")
    assert status == 200
    args = parse_ipxe_args(body.decode())
    with store.engine.connect() as conn:
        stored = [r[0] for r in conn.exec_driver_sql("SELECT token_sha256 FROM racklife_boot_tokens")]
    assert stored == [hashlib.sha256(args["token"].encode()).hexdigest()]

    def phone(token: str, name: str = node.name) -> tuple[int, dict[str, object]]:
        payload = json.dumps({"token": token, "node": name, "image": "minimal", "image_version": "1",
                              "macs": [node.boot_mac()]}).encode()
        status, _, body = request(server, "POST", "/phone-home", payload, {"Content-Type": "application/json"})
        return status, json.loads(body)

    assert phone("forged-token") == (403, {"accepted": False, "reason": "unknown token"})
    assert phone(args["token"], "r01-n04")[0] == 403  # someone else's token
    assert phone(args["token"]) == (200, {"accepted": True})
    assert backend.signalled == [("run-1", 1)]
    assert phone(args["token"]) == (403, {"accepted": False, "reason": "token already used (replay refused)"})
    assert backend.signalled == [("run-1", 1)]
    assert request(server, "GET", f"/boot/{node.boot_mac()}.ipxe")[0] == 404  # spent: no script any more
    with store.engine.connect() as conn:
        scripts = [r[0] for r in conn.exec_driver_sql("SELECT script FROM racklife_boot_tokens")]
    assert scripts == [""]


def test_a_new_attempt_supersedes_the_old_token(env) -> None:  # type: ignore[no-untyped-def]
    store, inv, server, _ = env
    node = inv.node("r01-n05")
    tokens = []
    for attempt in (1, 2):
        boot_store.issue_boot(store, node.name, node.boot_mac(), "run-2", attempt,
                              lambda t: (tokens.append(t), ipxe_script(node, IMAGE, server.phone_home_url, t))[1],
                              timedelta(minutes=5))
    assert boot_store.redeem(store, tokens[0], node.name, {}).reason == "token already used (replay refused)"
    assert boot_store.redeem(store, tokens[1], node.name, {}).accepted


def test_malformed_phone_home_is_400(env) -> None:  # type: ignore[no-untyped-def]
    _, _, server, _ = env
    assert request(server, "POST", "/phone-home", b"{not json", {"Content-Type": "application/json"})[0] == 400
    assert request(server, "POST", "/phone-home", b'{"node": "x"}')[0] == 400


def test_effects_are_claimed_once(env) -> None:  # type: ignore[no-untyped-def]
    store, _, _, _ = env
    assert boot_store.claim_effect(store, "run-3:power_cycle:1", "r01-n01", "power_cycle")
    assert not boot_store.claim_effect(store, "run-3:power_cycle:1", "r01-n01", "power_cycle")
    assert boot_store.effects(store, "r01-n01") == [("run-3:power_cycle:1", "power_cycle")]

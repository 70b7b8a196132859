"""Provisioning's journal: one commit per phase, one power cycle per attempt, prompt wake-ups.

The pieces the provisioning workflow's fewer, larger steps rest on, against a
real SQLite store: moves that commit together and replay as a whole, a power
cycle claimed together with its token (a re-run keeps the token the node may
already hold), a spent token that always carries its signal, and the watch
that wakes a waiting run when its token is spent, and a Redfish inspection
that reads what it compares and skips the rest.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Literal

import pytest

from lifecycle.drivers.bmc.base import Credentials
from lifecycle.drivers.bmc.redfish import RedfishDriver
from lifecycle.lab.redfish_emulator import BmcConfig, ExtraHardware, RedfishEmulator
from lifecycle.model.inventory import load_inventory
from lifecycle.model.states import Actor, IllegalTransition, State
from lifecycle.store import Store
from lifecycle.store import boot as boot_store
from lifecycle.workflows.provision import PhoneHomeWatch

NODE = "r01-n01"
TTL = timedelta(minutes=10)


@pytest.fixture
def store(tmp_path: Path, repo_dir: Path) -> Iterator[Store]:
    s = Store(f"sqlite:///{tmp_path / 'rl.sqlite'}")
    s.import_inventory(load_inventory(repo_dir / "examples" / "site-h100-2rack.yaml"))
    yield s
    s.close()


def boot_mac(store: Store) -> str:
    return store.get(NODE).node().boot_mac()


def issue(store: Store, run: str, attempt: int) -> str:
    """Issue the boot of (run, attempt); return its token."""
    tokens: list[str] = []

    def render(token: str) -> str:
        tokens.append(token)
        return f"#!ipxe\nkernel vmlinuz token={token}\n"

    boot_store.issue_boot(store, NODE, boot_mac(store), run, attempt, render, TTL)
    return tokens[-1]


def test_moves_commit_together_and_replay_as_a_whole(store: Store) -> None:
    store.transition(NODE, "inspect", Actor.WORKFLOW, "starts with inspection", run_id="run-1")
    moves = [("inspect_done", "BMC inventory matches"), ("provision", "provision with image minimal")]
    assert store.transitions(NODE, moves, Actor.WORKFLOW, run_id="run-1").target is State.PROVISIONING
    # The step cut off after its commit runs again: nothing is applied twice.
    again = store.transitions(NODE, moves, Actor.WORKFLOW, run_id="run-1")
    assert again.target is State.PROVISIONING and again.reason == "provision with image minimal"
    assert [t.event for t in store.history(NODE)] == ["enroll", "inspect", "inspect_done", "provision"]
    # Another run replaying the same moves is not a replay: the state machine refuses it.
    with pytest.raises(IllegalTransition):
        store.transitions(NODE, moves, Actor.WORKFLOW, run_id="run-2")


def test_moves_are_all_or_nothing(store: Store) -> None:
    store.transition(NODE, "inspect", Actor.WORKFLOW, "starts with inspection", run_id="run-1")
    with pytest.raises(IllegalTransition):
        store.transitions(NODE, [("inspect_done", "matches"), ("provision_done", "not from available")],
                          Actor.WORKFLOW, run_id="run-1")
    assert store.get(NODE).state is State.INSPECTING
    assert [t.event for t in store.history(NODE)] == ["enroll", "inspect"]


def test_power_cycle_is_claimed_once_with_its_token(store: Store) -> None:
    mac = boot_mac(store)
    issued: list[str] = []

    def render(token: str) -> str:
        issued.append(token)
        return f"token={token}"

    def claim() -> bool:
        return boot_store.claim_boot(store, "run-1:power_cycle:1", NODE, mac, "run-1", 1, render, TTL)

    assert claim()
    script = boot_store.pending_script(store, mac)
    assert script == f"token={issued[0]}"
    # A re-run of the boot step: no second cycle, and the node keeps the token it may hold.
    assert not claim()
    assert boot_store.pending_script(store, mac) == script
    assert len(issued) == 1
    assert boot_store.effects(store, NODE) == [("run-1:power_cycle:1", "power_cycle")]
    # The next attempt is a new claim with a new token, which supersedes the first.
    assert boot_store.claim_boot(store, "run-1:power_cycle:2", NODE, mac, "run-1", 2, render, TTL)
    assert boot_store.pending_script(store, mac) == f"token={issued[1]}"


def test_the_report_is_stored_with_the_spent_token(store: Store) -> None:
    token = issue(store, "run-1", 1)
    assert boot_store.phoned_home(store, "run-1", 1) == (False, None)
    assert boot_store.spent(store, {"run-1"}) == set()
    report = {"image": "minimal", "image_version": "1", "macs": ["02:00:00:00:00:01"]}
    got = boot_store.redeem(store, token, NODE, report)
    assert got.accepted and (got.run_id, got.attempt) == ("run-1", 1)
    assert boot_store.phoned_home(store, "run-1", 1) == (True, report)
    assert boot_store.spent(store, {"run-1", "run-9"}) == {("run-1", 1)}
    replay = boot_store.redeem(store, token, NODE, {"image": "other"})
    assert not replay.accepted and "replay" in replay.reason
    assert boot_store.phoned_home(store, "run-1", 1) == (True, report)  # the replay changed nothing


def test_a_superseded_boot_is_spent_without_a_report(store: Store) -> None:
    issue(store, "run-1", 1)
    issue(store, "run-2", 1)  # a later boot of the same node
    assert boot_store.phoned_home(store, "run-1", 1) == (True, None)
    assert boot_store.phoned_home(store, "run-2", 1) == (False, None)


def test_watch_wakes_the_run_whose_token_is_spent(store: Store) -> None:
    token = issue(store, "run-1", 1)
    watch = PhoneHomeWatch(interval_s=0.01, store_of=lambda: store)
    woke: list[bool] = []
    waiter = threading.Thread(target=lambda: woke.append(watch.wait("run-1", 1, 60)))
    waiter.start()
    assert boot_store.redeem(store, token, NODE, {}).accepted  # e.g. by a boot server elsewhere
    waiter.join(60)
    assert woke == [True]


def test_watch_times_out_without_a_phone_home(store: Store) -> None:
    issue(store, "run-1", 1)
    watch = PhoneHomeWatch(interval_s=0.01, store_of=lambda: store)
    assert watch.wait("run-1", 1, 0.1) is False
    assert watch.wait("run-1", 1, 0) is False


def test_boot_server_in_process_wakes_the_run_at_once(store: Store) -> None:
    watch = PhoneHomeWatch(interval_s=0.01, store_of=lambda: store)
    woke: list[bool] = []
    waiter = threading.Thread(target=lambda: woke.append(watch.wait("run-1", 1, 60)))
    waiter.start()
    # No token is spent in the store: only arrived() can wake it.
    while waiter.is_alive():
        watch.arrived("run-1", 1)
        waiter.join(0.01)
    assert woke == [True]


@pytest.mark.parametrize(("tree", "source"), [("openbmc-stock", "processors"),
                                              ("dmtf-public-rackmount1", "pcie")])
def test_inspection_reads_what_it_compares_with_fewer_requests(
        fixtures_dir: Path, tree: str, source: Literal["processors", "pcie"]) -> None:
    hw = ExtraHardware(gpus=8, gpu_source=source, drives=2, system_serial="SN-1",
                       nic_macs=("02:4c:00:00:01:01",))
    bmc = BmcConfig("bmc", fixtures_dir / "redfish" / tree, "admin", "pw", hardware=hw)
    with RedfishEmulator([bmc]) as emu:
        full_driver = RedfishDriver(emu.urls["bmc"], Credentials("admin", "pw"))
        inspect_driver = RedfishDriver(emu.urls["bmc"], Credentials("admin", "pw"))
        try:
            full = full_driver.inventory()
            seen = inspect_driver.inspect()
            assert (seen.system, seen.cpus, seen.memory_gib, seen.nics, seen.gpus) == \
                (full.system, full.cpus, full.memory_gib, full.nics, full.gpus)
            assert seen.system.serial == "SN-1" and len(seen.gpus) == 8
            assert "02:4c:00:00:01:01" in {n.mac for n in seen.nics}
            assert full.drives and full.firmware and not seen.drives and not seen.firmware
            assert inspect_driver.transport.calls < full_driver.transport.calls
        finally:
            full_driver.close()
            inspect_driver.close()


def test_a_reimage_change_names_an_image_the_boot_server_does_not_publish() -> None:
    from lifecycle.workflows.changes import ImageChange
    from lifecycle.workflows.provision import ProvisionSettings

    typed = ProvisionSettings(boot_url="http://10.0.0.1:8069", images={}, default_image="minimal")
    assert "image 'golden' is not published" in ImageChange("golden", typed).precheck()

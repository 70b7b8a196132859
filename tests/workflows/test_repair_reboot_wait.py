"""After a repair's power cycle, the run waits for the node to answer over SSH (a real sshd), or fails.

A re-test started while the node is still booting would fail and quarantine a
node that only needed a minute more; a node that never comes back must fail
the reboot (and be quarantined, never rejoined as it was).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from lifecycle.workflows.repair_actions import BOOT_ID, RebootChange, await_ssh, boot_id
from tests.acceptance.test_fanout import Sshd, ssh_config, sshd

__all__ = ["sshd"]  # the module-scoped sshd fixture, shared with the fan-out tests


def test_a_node_that_answers_is_ready_and_one_that_does_not_times_out(
        sshd: Sshd, tmp_path: Path, free_port: Callable[[], int]) -> None:
    config = ssh_config(sshd, tmp_path, sshd.client_key, sshd.known_hosts,
                        {"node-up": sshd.port, "node-down": free_port()})
    assert await_ssh("node-up", str(config), 30.0) == ""
    t0 = time.monotonic()
    why = await_ssh("node-down", str(config), 3.0)
    assert "did not answer over SSH within 3 s of the power cycle" in why, why
    assert 3.0 <= time.monotonic() - t0 < 30.0


def test_a_node_still_on_the_boot_before_the_power_cycle_is_not_back(
        sshd: Sshd, tmp_path: Path, free_port: Callable[[], int]) -> None:
    # A BMC takes the power cycle at once and the node goes down after it: asked too soon, it still answers
    # from the boot before, and a re-test begun then met the node going down under it ("authentication
    # failed"). The wait counts only an answer from another boot (here the sshd's host: one boot).
    config = ssh_config(sshd, tmp_path, sshd.client_key, sshd.known_hosts,
                        {"node-up": sshd.port, "node-down": free_port()})
    before = boot_id("node-up", str(config))
    assert before == Path(BOOT_ID).read_text().strip()
    assert boot_id("node-down", str(config)) == ""  # nothing to compare with: any boot that answers counts
    why = await_ssh("node-up", str(config), 3.0, before)
    assert f"still the boot from before the power cycle (boot id {before})" in why, why
    assert await_ssh("node-up", str(config), 30.0, "00000000-0000-4000-8000-000000000000") == ""


def test_a_reboot_cannot_be_undone() -> None:
    # A failed reboot leaves the node in no known state: the cycle quarantines it rather than rejoining it.
    assert RebootChange("/nonexistent").undo("node-x") is None


def test_a_probe_that_gets_no_answer_is_given_up_on_not_waited_for(
        sshd: Sshd, tmp_path: Path, free_port: Callable[[], int]) -> None:
    # A node going down under an open session can leave the SSH client waiting for an answer that never
    # comes; here a peer accepts the connection and says nothing. The probe gives up at its own limit.
    import socket
    import threading

    from lifecycle.workflows.repair_actions import _probe

    port = free_port()
    silent = socket.create_server(("127.0.0.1", port))
    held: list[socket.socket] = []
    threading.Thread(target=lambda: held.append(silent.accept()[0]), daemon=True).start()
    config = ssh_config(sshd, tmp_path, sshd.client_key, sshd.known_hosts, {"node-mute": port})
    try:
        t0 = time.monotonic()
        assert _probe("node-mute", str(config), 2.0) == "no answer within 2 s"
        assert time.monotonic() - t0 < 10.0  # paramiko's own banner wait is 15 s
    finally:
        for c in held:
            c.close()
        silent.close()

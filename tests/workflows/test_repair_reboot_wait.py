"""After a repair's power cycle, the run waits for the node to answer over SSH (a real sshd), or fails.

A re-test started while the node is still booting would fail and quarantine a
node that only needed a minute more; a node that never comes back must fail
the reboot (and be quarantined, never rejoined as it was).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from lifecycle.workflows.repair import RebootChange, await_ssh
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


def test_a_reboot_cannot_be_undone() -> None:
    # A failed reboot leaves the node in no known state: the cycle quarantines it rather than rejoining it.
    assert RebootChange("/nonexistent").undo("node-x") is None

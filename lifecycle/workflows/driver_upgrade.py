"""An NVIDIA driver upgrade of one node: the site's install hook, a reboot through the BMC, the node's own word.

The ``driver`` row of ``workflows/changes.py``: inside the node's cycle
(out of its scheduler under the pool's policy), the site's hook installs
the version (``drivers/nvidia_driver``: ``$RACKLIFE_DRIVER_INSTALL_CMD NODE
VERSION``, one journaled step, never repeated by the retry layer), the node
is power-cycled through its BMC (the repair's ``reboot``: any BMC racklife
drives can do it, IPMI included) so that the new kernel modules load, and
SSH has to answer again from a new boot (a boot id other than the one read
before the cycle). Neither the hook's exit status nor the reboot
proves anything about the driver: the change names the version the re-test
must read (``ChangeResult.expect_driver``) and acceptance fails a node whose
gpu check (NVML, or ``nvidia-smi -q -x``) reports another version, or none
(``acceptance.judge``'s ``result.driver``). Such a node is quarantined like
any node that fails its re-test, and counts against the upgrade's halt
threshold.

Not taken back: the old driver's packages are gone once the new ones are
installed, so a node that did not come back on the new driver is
quarantined with the reason, never rejoined on a driver nobody asked for.

A node already on the version (its last acceptance read it) is left out of
an upgrade, as a node on the image or firmware asked for is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lifecycle.drivers import nvidia_driver
from lifecycle.drivers.errors import DriverError
from lifecycle.store import Store, observations, shared_store
from lifecycle.workflows.node_cycle import ChangeResult, now
from lifecycle.workflows.retry import step
from lifecycle.workflows.waiting import waiting

BOOT_WAIT_S = 900.0
"""How long the node has to answer over SSH after its power cycle."""


def reported_driver(store: Store, node: str) -> str | None:
    """The driver version the node reported at its latest acceptance (its ``gpu.driver`` finding), if any;
    the newest record that says nothing of the driver (or two versions) is unknown, not an older record's word."""
    records = store.acceptance_records(node)  # newest first
    return observations.reported_driver(records[0]) if records else None


@step(idempotent=True)  # reads only
def last_driver(node: str) -> str | None:
    return reported_driver(shared_store(), node)


@step(idempotent=False)  # an install is run once; a failed or lost one fails the node
def install_driver(node: str, version: str) -> dict[str, Any]:
    """Run the site's install hook for ``node`` and ``version``; what it said (redacted), for the record."""
    hook = nvidia_driver.InstallHook.from_env()
    with waiting(node, "driver", f"the site's driver install hook ({version}, up to {hook.timeout_s:.0f} s)"):
        said = hook.install(node, version)
    return {"version": version, "output": said, "at": now()}


@dataclass(frozen=True)
class DriverChange:
    """Install ``version`` through the site's hook, power-cycle the node through its BMC, wait for SSH; the
    re-test must then read ``version`` from the node's GPUs."""

    version: str
    ssh_config: str
    wait_s: float = BOOT_WAIT_S
    name: str = "driver"

    def precheck(self) -> str:
        try:
            nvidia_driver.check_version(self.version)
        except ValueError as exc:
            return str(exc)
        return nvidia_driver.no_hook_reason() or ""

    def apply(self, node: str) -> ChangeResult:
        from lifecycle.workflows.repair_actions import await_ssh, bmc_power_cycle, boot_id  # imports changes.py

        try:
            done = install_driver(node, self.version)
        except (DriverError, ValueError) as exc:
            why = exc.message if isinstance(exc, DriverError) else str(exc)
            return ChangeResult(False, f"the driver install hook failed: {why}")
        before = boot_id(node, self.ssh_config)
        try:
            done["power_was"] = bmc_power_cycle(node)
        except DriverError as exc:
            return ChangeResult(False, f"driver {self.version} installed, but the power cycle through the BMC "
                                       f"failed: {exc.message}", done)
        why = await_ssh(node, self.ssh_config, self.wait_s, before)
        if why:
            return ChangeResult(False, f"driver {self.version} installed and the node power cycled, but {why}", done)
        return ChangeResult(True, f"driver {self.version} installed by the site's hook; power cycled through the BMC "
                                  f"(was {done['power_was']}); answering over SSH; the re-test must read "
                                  f"{self.version}", done, expect_driver=self.version)

    def undo(self, node: str) -> ChangeResult | None:
        return None  # the old driver's packages are replaced: a node not on the new one is quarantined

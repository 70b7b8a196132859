"""Power a node back on that was powered off out of band, and wait for its scheduler to have it again.

The plan's fix for `power` drift on a node racklife believes in service. It
moves no state (the node never left ``in_service`` in racklife's books); it
asks the BMC for power only when the BMC says the node is off (setting power
to the state it is in is success), then waits for Slurm to return the node
(``ReturnToService=2`` brings a node back when its slurmd registers).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from dbos import DBOS

from lifecycle.drivers.bmc.base import PowerAction, PowerState
from lifecycle.drivers.errors import DriverError
from lifecycle.store import shared_store
from lifecycle.workflows.leasing import release_leases, take_leases
from lifecycle.workflows.retry import step
from lifecycle.workflows.slurm_pool import wait_for_slurm


@dataclass(frozen=True)
class PowerOnSettings:
    scheduler_wait_s: float = 300.0  # how long Slurm may take to have the node back


@dataclass
class PowerOutcome:
    node: str
    ok: bool
    was: str = ""
    reason: str = ""


@step(idempotent=True)
def bmc_power_on(node: str) -> str:
    """Power the node on if the BMC says it is off; return the power state found first."""
    from lifecycle.workflows.bmc_calls import open_bmc  # vendor SDKs only when a BMC is used

    bmc = open_bmc(node)
    try:
        was = bmc.power_state()
        if was in (PowerState.OFF, PowerState.POWERING_OFF):
            bmc.power(PowerAction.ON)
        return was.value
    finally:
        bmc.close()


@step(idempotent=True)
def await_slurm(node: str, wait_s: float) -> str:
    """Wait until Slurm has the node responding and not down; "" when it does, else why not."""
    store = shared_store()
    if store.pool(store.get(node).pool).scheduler != "slurm":
        return ""
    last = wait_for_slurm(node, wait_s, "power on", "Slurm to have the node responding after power on",
                          lambda st: st.responding and st.base != "down" and not st.powered_down)
    return f"Slurm did not have the node back within {wait_s:.0f} s (last: {last})" if last else ""


@DBOS.workflow(name="power_on_node")
def power_on_node(node: str, cfg: PowerOnSettings) -> dict[str, Any]:
    held = take_leases([node], "power_on_node")
    if held:
        return asdict(PowerOutcome(node, False, reason=held[node]))
    try:
        out = PowerOutcome(node, False)
        try:
            out.was = bmc_power_on(node)
        except DriverError as exc:
            out.reason = f"bmc: {exc.message}"
            return asdict(out)
        out.reason = await_slurm(node, cfg.scheduler_wait_s)
        out.ok = not out.reason
        return asdict(out)
    finally:
        release_leases()

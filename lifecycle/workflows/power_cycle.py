"""A power action on a node in service, as one durable run that keeps the store and the scheduler agreeing.

`racklife bmc power cycle --force` of an in-service node used to go straight
to the BMC: Slurm saw the node vanish and held it down, the store still said
``in_service``, and the next `slurm join` moved it to ``join_failed``. Here
the action is a run holding the node's lease:

1. leave the node's scheduler the way every workflow does (racklife's own
   drain or cordon, the leave policy and deadline asked for, every job or pod
   reported; a node held by someone else is refused and nothing is done);
2. the power action through the node's BMC (recorded once: never repeated on
   replay);
3. ``cycle``, ``reset`` (and ``on``): wait until the node is back where the
   action puts it — Slurm has a slurmd that started after the action
   (``SlurmdStartTime`` moved) and answers, or the kubelet reports another boot
   id and Ready — then rejoin, which lifts racklife's own drain or cordon only;
4. ``off``, ``graceful-off``: the node stays ``drained`` (Slurm: racklife's
   drain, down while off) and the outcome says how to bring it back.

A node that does not come back within the wait is quarantined with the reason
and held by racklife's drain or cordon: never left out of service silently.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any

from dbos import DBOS

from lifecycle.drivers.bmc.base import PowerAction
from lifecycle.drivers.errors import DriverError
from lifecycle.drivers.slurm.driver import SlurmDriver
from lifecycle.drivers.slurm.runner import CommandRunner
from lifecycle.model.vocab import KeepJobsPolicy
from lifecycle.workflows import kube_pool, node_cycle
from lifecycle.workflows.leasing import release_leases, take_leases
from lifecycle.workflows.node_ops import node_pool, node_state
from lifecycle.workflows.retry import step
from lifecycle.workflows.waiting import waiting

WORKFLOW = "power_in_service"

# The actions after which the node is expected back in service, and those that leave it out.
COMES_BACK = frozenset({PowerAction.CYCLE, PowerAction.RESET, PowerAction.ON})
STAYS_OFF = frozenset({PowerAction.OFF, PowerAction.GRACEFUL_OFF})


@dataclass(frozen=True)
class PowerSettings:
    action: str  # a PowerAction value
    operator: str
    policy: KeepJobsPolicy | None = None  # Slurm leave (default: the pool's)
    deadline_s: float | None = None  # how long the leave waits (default: the pool's drain deadline)
    back_wait_s: float = 600.0  # how long the node may take to be back after cycle/reset/on
    settle_s: float = 5.0  # how long it must answer without a break before it counts as back
    kube: kube_pool.KubeSettings | None = None


@dataclass
class PowerCycleOutcome:
    node: str
    action: str
    ok: bool = False
    refused: bool = False
    state: str = ""
    reason: str = ""
    hint: str = ""
    leave: dict[str, Any] = field(default_factory=dict)
    power: dict[str, Any] = field(default_factory=dict)
    back: str = ""
    join: dict[str, Any] = field(default_factory=dict)
    rollback: dict[str, Any] = field(default_factory=dict)


# ------------------------------------------------------------------ steps


@step(idempotent=True)
def slurmd_started(node: str) -> str:
    """When Slurm says the node's slurmd last started ("" if it does not say): the mark a reboot moves."""
    return SlurmDriver(CommandRunner()).node(node).slurmd_start or ""


@step(idempotent=False)  # a cycle or a reset done twice is two reboots: never repeated
def bmc_power(node: str, action: str) -> dict[str, Any]:
    from lifecycle.workflows.bmc_calls import open_bmc  # vendor SDKs only when a BMC is used

    bmc = open_bmc(node)
    try:
        before = bmc.power_state()
        bmc.power(PowerAction(action))
        return {"before": before.value, "action": action, "at": time.time()}
    finally:
        bmc.close()


@step(idempotent=True)
def kubelet_booted(node: str, s: kube_pool.KubeSettings) -> str:
    """The boot id the node's kubelet reports ("" if none): the mark a reboot moves."""
    kube = kube_pool.driver(s)
    try:
        return kube.node(node).boot_id
    finally:
        kube_pool.close(kube)


@step(idempotent=False)  # a wait to a deadline: a retry would extend it
def await_kubelet_restart(node: str, before: str, wait_s: float, s: kube_pool.KubeSettings) -> str:
    """Wait until the node's kubelet reports a boot id other than ``before`` and Ready; "" or why not."""
    kube = kube_pool.driver(s)
    deadline = time.monotonic() + wait_s
    last = "unknown"
    try:
        with waiting(node, "power", "the kubelet to report a new boot and Ready after the power action") as say:
            while True:
                try:
                    seen = kube.node(node)
                    last = f"ready {seen.ready}, boot id {seen.boot_id or 'unknown'}"
                    if seen.boot_id and seen.boot_id != before and seen.ready:
                        return ""
                except DriverError as exc:
                    last = exc.message
                if time.monotonic() >= deadline:
                    return (f"the node's kubelet was not back within {wait_s:.0f} s of the power action "
                            f"(last: {last})")
                say(f"the kubelet to report a new boot and Ready after the power action (now: {last})")
                time.sleep(s.poll_s)
    finally:
        kube_pool.close(kube)


@step(idempotent=False)  # a wait to a deadline: a retry would extend it
def await_slurmd_restart(node: str, before: str, wait_s: float, settle_s: float) -> str:
    """Wait until Slurm has a slurmd on the node that started after ``before`` and answers; "" or why not.

    It must answer for ``settle_s`` without a break: slurmctld's ping of the slurmd that died can fail
    after the new one registered, and mark the node not responding until its next ping (lab: 10 s).
    """
    driver = SlurmDriver(CommandRunner())
    deadline = time.monotonic() + wait_s
    last = "unknown"
    since: float | None = None
    with waiting(node, "power", "a new slurmd on the node answering Slurm after the power action") as say:
        while True:
            try:
                seen = driver.node(node)
                last = f"{seen.state}, slurmd started {seen.slurmd_start or 'unknown'}"
                back = bool(seen.slurmd_start and seen.slurmd_start != before and seen.state.responding
                            and seen.state.base != "down" and not seen.state.powered_down)
            except DriverError as exc:
                last, back = exc.message, False
            if not back:
                since = None
            elif since is None:
                since = time.monotonic()
            elif time.monotonic() - since >= settle_s:
                return ""
            if time.monotonic() >= deadline:
                return f"the node was not back in Slurm within {wait_s:.0f} s of the power action (last: {last})"
            say(f"a new slurmd on the node answering Slurm after the power action (now: {last})")
            time.sleep(1.0)


# ------------------------------------------------------------------ the run


@DBOS.workflow(name=WORKFLOW)
def power_in_service(node: str, s: PowerSettings) -> dict[str, Any]:
    """Leave, power, wait for the node to be back, rejoin (or stay out, powered off), holding the node."""
    out = PowerCycleOutcome(node, s.action)
    held = take_leases([node], WORKFLOW)
    if held:
        out.refused, out.state, out.reason = True, node_state(node), held[node]
        return asdict(out)
    try:
        return asdict(_body(node, s, out))
    finally:
        release_leases()


def _body(node: str, s: PowerSettings, out: PowerCycleOutcome) -> PowerCycleOutcome:
    action = PowerAction(s.action)
    out.state = node_state(node)
    if out.state != "in_service":
        out.refused = True
        out.reason = f"node is {out.state}; this run powers a node in service (others: racklife bmc power)"
        return out
    slurm = node_cycle.scheduler_of(node_pool(node)) == "slurm"
    if not slurm and s.kube is None:
        out.refused = True
        out.reason = "the node serves a Kubernetes pool: give --kubeconfig (or set RACKLIFE_KUBECONFIG)"
        return out
    why = f"power {action.value.replace('_', '-')} by {s.operator}"
    spec = node_cycle.LeaveSpec(why, s.policy, s.deadline_s)
    left = node_cycle.leave(node, spec, s.kube)
    out.leave = asdict(left)
    if not left.ok:
        out.refused = left.state == "in_service"  # held by someone else, or nothing started: nothing was done
        out.reason = f"leaving pool {node_pool(node)} failed, power not changed: {left.reason}"
        cycle = node_cycle.CycleOutcome(node, reason=out.reason)
        if node_state(node) == "draining":
            node_cycle.undo_leave(node, s.kube, cycle, spec)
        out.state, out.rollback = cycle.state or node_state(node), cycle.rollback
        return out
    mark = slurmd_started(node) if slurm else kubelet_booted(node, s.kube) if s.kube is not None else ""
    try:
        out.power = bmc_power(node, action.value)
    except DriverError as exc:
        out.reason = f"bmc: {exc.message}; the node is drained by racklife, power as it was"
        _rejoin(node, s, out)
        return out
    if action in STAYS_OFF:
        out.ok, out.state = True, node_state(node)
        out.reason = f"powered {action.value.replace('_', '-')}; out of service ({out.state}, racklife's drain)"
        out.hint = (f"to bring it back: racklife bmc power on {node}, then racklife "
                    f"{'slurm join' if slurm else 'kube join'} {node}")
        return out
    if slurm:
        out.back = await_slurmd_restart(node, mark, s.back_wait_s, s.settle_s)
    elif s.kube is not None:
        out.back = await_kubelet_restart(node, mark, s.back_wait_s, s.kube)
    if out.back:
        out.reason = out.back
        cycle = node_cycle.CycleOutcome(node, reason=out.reason)
        node_cycle.quarantine(node, cycle, f"{why}: {out.back}", s.kube)
        out.state, out.rollback = cycle.state, cycle.rollback
        out.hint = f"racklife repair {node} or racklife accept {node} once it is back"
        return out
    _rejoin(node, s, out)  # the join waits for Slurm's idle, or the kubelet's Ready with every GPU
    return out


def _rejoin(node: str, s: PowerSettings, out: PowerCycleOutcome) -> None:
    try:
        joined = node_cycle.join(node, s.kube)
    except DriverError as exc:
        out.reason = (out.reason + "; " if out.reason else "") + f"rejoining failed: {exc.message}"
        out.state = node_state(node)
        return
    out.join = asdict(joined)
    out.state = joined.state
    if joined.ok and not out.reason:
        out.ok = True
        out.reason = f"power {out.action.replace('_', '-')} done; in service in pool {node_pool(node)} again"
    elif not joined.ok:
        out.reason = (out.reason + "; " if out.reason else "") + f"rejoining failed: {joined.reason}"

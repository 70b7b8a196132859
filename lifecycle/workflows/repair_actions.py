"""What each repair action does to a node that is out of service: one table from action to change.

A repair is the node cycle (:mod:`lifecycle.workflows.node_cycle`) whose
change is the action; this module holds those changes and the table
(:data:`ACTIONS`) the repair run builds them from, so an action is added in
one place and a test can check that every action of the repair table
(:mod:`lifecycle.workflows.repair_table`) is either built or refused with a
reason:

- ``reboot``: the node moves to ``repairing``, its boot id is read over SSH,
  a BMC power cycle through its driver, then a wait for SSH to answer, as
  the re-test reaches it, from a boot other than the one before;
- ``reset-gpu``: the node moves to ``repairing``, its clock is read
  (``date --iso-8601=ns`` over SSH, journaled), then ``nvidia-smi -r`` over SSH
  (every GPU of the node; the driver refuses while a process uses one, and
  a GPU that has fallen off the bus cannot be reset: both fail the repair).
  A reset leaves the kernel log as it was, Xid lines included, so the
  re-test judges only the log's lines from that clock reading on.
  Refused before the node leaves where its SKU cannot reset its GPUs on its
  own (``Sku.gpu_reset``);
- ``reimage``: the reimage of a rolling upgrade (``changes.ImageChange``:
  ``reprovisioning`` through the boot server, phone-home verified) with the
  node's image (else its pool's) or the one asked for.

None can be undone: a node whose action failed is in no known state, so it is
quarantined with the reason, never put back into service as it was.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from burnin.parsers.xid import instant
from lifecycle.drivers.bmc.base import PowerAction
from lifecycle.drivers.errors import TemporaryError
from lifecycle.model.skus import SKUS
from lifecycle.model.states import Actor, State
from lifecycle.store import shared_store
from lifecycle.workflows.changes import ImageChange
from lifecycle.workflows.node_cycle import Change, ChangeResult
from lifecycle.workflows.node_ops import current_run_id
from lifecycle.workflows.provision import ProvisionSettings
from lifecycle.workflows.repair_table import RepairAction
from lifecycle.workflows.retry import retrier, step
from lifecycle.workflows.waiting import waiting

RESET_TIMEOUT_S = 600.0


@step(idempotent=True)  # this run's transition replays as done
def begin_repair(node: str, action: str) -> str:
    """Move a drained or quarantined node to ``repairing`` for ``action``; return where the node is."""
    store = shared_store()
    state = store.get(node).state
    if state in (State.DRAINED, State.QUARANTINED):
        state = store.transition(node, "repair", Actor.WORKFLOW, f"repair: {action}", run_id=current_run_id()).target
    return state.value


@step(idempotent=False)  # a second power cycle is a second outage: never retried blindly
def bmc_power_cycle(node: str) -> str:
    """Power-cycle the node through its BMC; return the power state found first."""
    from lifecycle.workflows.bmc_calls import open_bmc  # vendor SDKs only when a BMC is used

    bmc = open_bmc(node)
    try:
        was = bmc.power_state()
        bmc.power(PowerAction.CYCLE)
        return was.value
    finally:
        bmc.close()


@dataclass(frozen=True)
class Answer:
    """What one command over SSH said; ``exit_code`` None: no answer in time (or no connection)."""

    exit_code: int | None
    stdout: str
    stderr: str
    unreachable: bool = False  # the connection failed or broke off: nothing here is the command's answer


def ssh_run(node: str, ssh_config: str, argv: list[str], limit_s: float) -> Answer:
    """Run ``argv`` on ``node`` over SSH (as burn-in reaches it), giving up after ``limit_s`` whatever happens.

    A session opened just as a node goes down can wait for its channel forever (paramiko waits for the
    server's answer without a deadline), so the command runs in a thread this gives up on: the transport
    is closed, which ends the wait, and the next call opens a new one.
    """
    import threading

    from acceptance.fanout import Target
    from acceptance.ssh_fabric import FabricSSH  # fabric and paramiko: only when SSH is used

    transport = FabricSSH(Path(ssh_config))
    target = Target(node, node)
    got: list[Answer] = []

    def call() -> None:
        try:
            res = transport.run(target, argv, timeout_s=max(1.0, limit_s - 1.0))
        except Exception as exc:  # one failed call is an answer like any other: the caller judges it
            got.append(Answer(None, "", f"{type(exc).__name__}: {exc}"[:300], unreachable=True))
            return
        got.append(Answer(res.exit_code, res.stdout.decode("utf-8", "replace"), res.stderr, res.unreachable))

    worker = threading.Thread(target=call, name=f"ssh-{node}", daemon=True)
    worker.start()
    worker.join(limit_s)
    transport.close()
    if worker.is_alive():
        worker.join(5.0)
        return Answer(None, "", f"no answer within {limit_s:.0f} s")
    return got[0] if got else Answer(None, "", "no answer", unreachable=True)


class _NoAnswer(TemporaryError):
    """The command's own answer did not come back over SSH; ``answer``: what came instead."""

    def __init__(self, node: str, answer: Answer) -> None:
        super().__init__(node, answer.stderr.strip()[-200:] or "no answer")
        self.answer = answer


def ssh_run_again(node: str, ssh_config: str, argv: list[str], limit_s: float, *,
                  silent_too: bool = False) -> tuple[Answer, int]:
    """:func:`ssh_run` for a command that is harmless run twice, tried again under the steps' retry policy
    (:mod:`lifecycle.workflows.retry`) while the connection itself failed, and also while no answer came in
    time when ``silent_too``; the last answer and how many tries it took.

    A drained node under repair is not going down on its own, so an SSH connection that failed (an sshd
    slow under load, a handshake dropped more often than the transport tries it again) is the control
    path's, not the node's: taking it for the command's answer quarantined a node whose GPUs were never
    reset. The command's own answer, whatever it says, is never asked again.
    """
    tries = 0

    def once() -> Answer:
        nonlocal tries
        tries += 1
        got = ssh_run(node, ssh_config, argv, limit_s)
        if got.unreachable or (silent_too and got.exit_code is None):
            raise _NoAnswer(node, got)
        return got

    once.__name__ = f"ssh {argv[0]}"  # what the retrier's log lines name
    try:
        return retrier().call(once), tries
    except _NoAnswer as exc:
        return exc.answer, tries


BOOT_ID = "/proc/sys/kernel/random/boot_id"
"""The kernel's id of the boot it is running (a new random UUID at each boot): what a reboot moves."""


@step(idempotent=True)  # reads only
def boot_id(node: str, ssh_config: str) -> str:
    """The node's boot id over SSH ("" when it does not answer with one: down, hung, or no such file)."""
    return _read_boot_id(node, ssh_config, PROBE_S)[0]


def _read_boot_id(node: str, ssh_config: str, limit_s: float) -> tuple[str, str]:
    """The node's boot id and "", or "" and why it did not say one."""
    got = ssh_run(node, ssh_config, ["cat", BOOT_ID], limit_s)
    if got.exit_code != 0:
        return "", got.stderr.strip()[-200:] or f"exit {got.exit_code}"
    said = got.stdout.strip()
    try:
        uuid.UUID(said)
    except ValueError:
        return "", f"{BOOT_ID} said {said[:80]!r}, not a boot id"
    return said, ""


@step(idempotent=True)  # reads only
def await_ssh(node: str, ssh_config: str, wait_s: float, before: str = "") -> str:
    """Wait until the node answers over SSH as the re-test will reach it, from a boot other than ``before``
    (its boot id read before the power cycle; "" when there was none to read); "" when it does, else why not.

    A BMC takes a power cycle at once and the node goes down after it: a node asked too soon still
    answers from the boot before, and a re-test begun then runs into the node going down under it.
    """
    deadline = time.monotonic() + wait_s
    with waiting(node, "reboot", f"the node to answer over SSH after the power cycle (up to {wait_s:.0f} s)"):
        while True:
            last = _probe(node, ssh_config, PROBE_S, before)
            if last is None:
                return ""
            if time.monotonic() >= deadline:
                return f"the node did not answer over SSH within {wait_s:.0f} s of the power cycle (last: {last})"
            time.sleep(2.0)


PROBE_S = 12.0


def _probe(node: str, ssh_config: str, limit_s: float, before: str = "") -> str | None:
    """One read of the boot id over SSH within ``limit_s``: None when it answered from a boot other than
    ``before``, else why not."""
    seen, why = _read_boot_id(node, ssh_config, limit_s)
    if why:
        return why
    if before and seen == before:
        return f"still the boot from before the power cycle (boot id {seen})"
    return None


NODE_CLOCK_S = 30.0


@step(idempotent=True)  # reads only; journaled, so a replayed run re-tests from the time it first read
def node_clock(node: str, ssh_config: str) -> dict[str, Any]:
    """The node's own clock (``date --iso-8601=ns`` over SSH, the clock its ``dmesg --time-format iso`` uses):
    ``now`` when it answered with a time, else ``error``."""
    got, tries = ssh_run_again(node, ssh_config, ["date", "--iso-8601=ns"], NODE_CLOCK_S, silent_too=True)
    said = got.stdout.strip()
    if got.exit_code == 0 and instant(said) is not None:
        return {"now": said, "error": ""}
    why = f"exit {got.exit_code}" if got.exit_code is not None else "no answer"
    return {"now": None, "tries": tries,
            "error": f"date --iso-8601=ns {why} ({tries} tries): {(said + ' ' + got.stderr).strip()[-200:]!r}"}


@step(idempotent=True)  # a second reset of a drained node's GPUs is harmless
def gpu_reset(node: str, ssh_config: str, timeout_s: float) -> dict[str, Any]:
    """``nvidia-smi -r`` on the node over SSH: its exit status and what it said (tried again only while the
    connection failed: a reset that may still be running is not started beside it)."""
    got, tries = ssh_run_again(node, ssh_config, ["nvidia-smi", "-r"], timeout_s)
    said = (got.stdout + got.stderr).strip()
    return {"exit_code": got.exit_code, "output": said[-500:], "timed_out": got.exit_code is None,
            "unreachable": got.unreachable, "tries": tries}


def gpu_reset_refusal(sku: str) -> str:
    """Why a node of ``sku`` cannot have its GPUs reset on its own ("" when it can)."""
    s = SKUS.get(sku)
    if s is None:
        return f"SKU {sku!r} is not known: whether it can reset its GPUs is unknown (fail closed)"
    return "" if s.gpu_reset else f"a {sku} node cannot reset its GPUs on its own: {s.gpu_reset_note}"


@dataclass(frozen=True)
class RebootChange:
    """A BMC power cycle of the drained node, then SSH answering; the re-test says whether it came back sound."""

    ssh_config: str
    wait_s: float = 900.0
    name: str = "reboot"

    def precheck(self) -> str:
        return ""

    def apply(self, node: str) -> ChangeResult:
        state = begin_repair(node, self.name)
        if state != State.REPAIRING.value:
            return ChangeResult(False, f"node is {state}; a repair needs it drained or quarantined")
        before = boot_id(node, self.ssh_config)
        was = bmc_power_cycle(node)
        why = await_ssh(node, self.ssh_config, self.wait_s, before)
        if why:
            return ChangeResult(False, why, {"power_was": was})
        return ChangeResult(True, f"power cycled through the BMC (was {was}); answering over SSH",
                            {"power_was": was})

    def undo(self, node: str) -> ChangeResult | None:
        return None  # a node whose reboot failed is in no known state: quarantined, never rejoined as it was


@dataclass(frozen=True)
class GpuResetChange:
    """``nvidia-smi -r`` of every GPU of the drained node; the re-test says whether the fault is gone."""

    ssh_config: str
    sku: str
    timeout_s: float = RESET_TIMEOUT_S
    name: str = "reset_gpu"

    def precheck(self) -> str:
        return gpu_reset_refusal(self.sku)

    def apply(self, node: str) -> ChangeResult:
        state = begin_repair(node, "reset-gpu")
        if state != State.REPAIRING.value:
            return ChangeResult(False, f"node is {state}; a repair needs it drained or quarantined")
        # The kernel log keeps the Xid this repair is for: the re-test judges only what is logged from now on.
        clock = node_clock(node, self.ssh_config)
        if clock["now"] is None:
            return ChangeResult(False, f"the node's clock could not be read, so the re-test could not tell the "
                                       f"repaired Xid from a new one: {clock['error']}", clock)
        got = gpu_reset(node, self.ssh_config, self.timeout_s)
        if got["exit_code"] != 0:
            how = ("could not be run over SSH" if got.get("unreachable") else "timed out" if got["timed_out"]
                   else f"exited {got['exit_code']}")
            return ChangeResult(False, f"nvidia-smi -r {how}: {got['output'][-300:]}", got, clock["now"])
        return ChangeResult(True, f"every GPU reset (nvidia-smi -r); the re-test judges the kernel log since "
                                  f"{clock['now']}", got, clock["now"])

    def undo(self, node: str) -> ChangeResult | None:
        return None  # a GPU that could not be reset is not put back to work: quarantined


@dataclass(frozen=True)
class ActionContext:
    """What a repair action needs from its run's settings."""

    ssh_config: str
    sku: str
    boot_wait_s: float
    image: str | None
    provision: ProvisionSettings | None


def _reboot(c: ActionContext) -> Change:
    return RebootChange(c.ssh_config, c.boot_wait_s)


def _reset(c: ActionContext) -> Change:
    return GpuResetChange(c.ssh_config, c.sku)


def _reimage(c: ActionContext) -> Change:
    if c.image is None:
        raise ValueError("a reimage needs an image: neither the node nor its pool names one, none was asked for")
    if c.provision is None:
        raise ValueError("a reimage needs the boot server (built images), which this run was not given")
    return ImageChange(c.image, c.provision)


# The actions that change the node and re-test it; ``rma`` (quarantine) and ``none`` are not changes.
ACTIONS: dict[RepairAction, Callable[[ActionContext], Change]] = {
    RepairAction.REBOOT: _reboot,
    RepairAction.RESET_GPU: _reset,
    RepairAction.REIMAGE: _reimage,
}

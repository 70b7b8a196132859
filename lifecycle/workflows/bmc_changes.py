"""Firmware and BIOS changes on one node, through its BMC, verified by reading them back.

Why it exists: these are the per-node change kinds a rolling upgrade applies (after the node
has left its scheduler, before acceptance), and what ``racklife bmc firmware update`` and
``racklife bmc bios set`` do on one node. Both end in a read-back, because a BMC's "done" is
not evidence: a firmware update must change the version the FirmwareInventory reports
(``drivers/bmc/firmware.py``), and BIOS settings must read back from the live ``Bios`` after
the reboot that applies them. Whether a node can take either change at all is known from
its inventory entry before anything is planned (``check``): IPMI has no firmware or BIOS
interface, and a step asked anyway refuses with that reason, sending nothing.

``update_firmware(node, file, component)`` and ``set_bios(node, attrs)`` are the workflow
steps (journaled, the node's BMC from the store); ``FirmwareChange`` and ``BiosChange`` wrap
them as changes of a node's cycle (the ``firmware`` and ``bios`` rows of
``workflows/changes.py``, which the rolling upgrade runs); ``apply_bios`` and
``coerce_bios`` are the driver-level pieces the CLI shares.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Protocol

from lifecycle.drivers.bmc.base import (
    BiosApplyTime,
    BiosInterface,
    BmcDriver,
    Capability,
    FirmwareInterface,
    PowerAction,
    PowerState,
    UpdateMethod,
    require,
)
from lifecycle.drivers.bmc.bios_text import typed_like
from lifecycle.drivers.bmc.firmware import update_firmware as verified_update
from lifecycle.drivers.errors import DriverError, NotSupported, OperationFailed
from lifecycle.model.inventory import Node
from lifecycle.workflows.node_cycle import ChangeResult
from lifecycle.workflows.retry import step
from lifecycle.workflows.waiting import waiting


class Clock(Protocol):
    def monotonic(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...


class _SystemClock:
    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


# What each change kind needs of the node's BMC: the planner asks before planning it.
CHANGE_NEEDS: dict[str, Capability] = {"firmware": Capability.FIRMWARE, "bios": Capability.BIOS}


def check(node: Node, kind: str) -> str | None:
    """None when ``node``'s BMC can take a ``kind`` change; else why not (no I/O)."""
    from lifecycle.drivers.bmc.factory import unsupported_reason

    return unsupported_reason(node, CHANGE_NEEDS[kind])


@dataclass(frozen=True)
class FirmwareSettings:
    serve_host: str = "127.0.0.1"  # where the controller serves the image for SimpleUpdate
    method: UpdateMethod | None = None  # None: pull where the BMC offers it, else push
    expect_version: str | None = None


@dataclass(frozen=True)
class BiosSettings:
    apply_time: BiosApplyTime | None = None  # None: OnReset where offered, else Immediate
    reboot: bool = True  # OnReset: reset the node now and read back (False: stage only)
    timeout_s: float = 900.0  # for the reboot and the read-back
    poll_s: float = 5.0


@dataclass
class BiosResult:
    changed: dict[str, object]
    apply_time: str
    applied: bool  # read back from the live Bios
    rebooted: bool
    pending: dict[str, object] = field(default_factory=dict)


def coerce_bios(current: dict[str, object], raw: dict[str, str], target: str) -> dict[str, object]:
    """``KEY=VALUE`` strings typed like the attribute they set (int, bool, string)."""
    unknown = sorted(set(raw) - set(current))
    if unknown:
        raise OperationFailed(target, f"unknown BIOS attribute(s): {', '.join(unknown)}")
    try:
        return {key: typed_like(current[key], key, text) for key, text in raw.items()}
    except ValueError as exc:
        raise OperationFailed(target, str(exc)) from None


def apply_bios(bmc: BmcDriver, attributes: dict[str, object], settings: BiosSettings,
               clock: Clock | None = None) -> BiosResult:
    """Stage ``attributes``, reboot when they apply on reset, and read them back.

    Already set: nothing is rebooted, and nothing is sent unless a different value of one of them is
    still staged (pending), which is overwritten with the live one. Raises ``OperationFailed`` when the
    live Bios does not show them within ``timeout_s`` (with what is still pending).
    """
    bios = require(bmc, BiosInterface)
    clock = clock or _SystemClock()
    current = bios.bios_attributes()
    if all(current.get(k, object()) == v for k, v in attributes.items()):
        # Live already; a value of these staged earlier that never applied is overwritten with the live one
        # (undoing a change whose reboot did not apply it), or a later reboot would apply it unasked.
        stale = {k: v for k, v in bios.bios_pending_attributes().items() if k in attributes}
        changed = bios.set_bios_attributes(attributes, apply_time=settings.apply_time).changed if stale else {}
        return BiosResult(changed, (settings.apply_time or BiosApplyTime.ON_RESET).value, True, False)
    staged = bios.set_bios_attributes(attributes, apply_time=settings.apply_time)
    rebooted = False
    if staged.apply_time is BiosApplyTime.ON_RESET:
        if not settings.reboot:
            return BiosResult(staged.changed, staged.apply_time.value, False, False,
                              bios.bios_pending_attributes())
        on = bmc.power_state() in (PowerState.ON, PowerState.POWERING_ON)
        bmc.power(PowerAction.RESET if on else PowerAction.ON)
        rebooted = True
    deadline = clock.monotonic() + settings.timeout_s
    wrong: dict[str, object] = dict(attributes)
    while True:
        if bmc.power_state() is PowerState.ON:
            live = bios.bios_attributes()
            wrong = {k: live.get(k) for k, v in attributes.items() if live.get(k) != v}
            if not wrong:
                return BiosResult(staged.changed, staged.apply_time.value, True, rebooted)
        if clock.monotonic() >= deadline:
            pending = bios.bios_pending_attributes()
            raise OperationFailed(bmc.target, f"BIOS does not read back {_pairs(attributes)} "
                                  f"{settings.timeout_s:.0f}s after applying (it reads "
                                  f"{_pairs(wrong)}; pending: {_pairs(pending) or 'nothing'})")
        clock.sleep(settings.poll_s)


def _pairs(values: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(values.items()))


# --- workflow steps: the node's BMC from the store --------------------------------------------

def _node_bmc(node: str, capability: Capability) -> BmcDriver:
    from lifecycle.drivers.bmc.factory import unsupported_reason
    from lifecycle.store import shared_store
    from lifecycle.workflows.bmc_calls import open_bmc

    spec = shared_store().get(node).node()
    reason = unsupported_reason(spec, capability)
    if reason is not None:
        raise NotSupported(node, reason)
    return open_bmc(node)


def _serve(host: str) -> Callable[[Path], Any]:
    from lifecycle.drivers.boot.image_serve import serve_image

    return partial(serve_image, host=host)


@step(idempotent=False)
def update_firmware(node: str, file: str, component: str,
                    settings: FirmwareSettings | None = None) -> dict[str, object]:
    """Update ``component`` of ``node`` from ``file`` and verify the version changed.

    With ``settings.expect_version``, a component already at that version is done (nothing is
    sent). Not idempotent otherwise: an update is never repeated by the retry layer.
    """
    settings = settings or FirmwareSettings()
    bmc = _node_bmc(node, Capability.FIRMWARE)
    try:
        fw = require(bmc, FirmwareInterface)
        if settings.expect_version is not None:
            from lifecycle.drivers.bmc.firmware import find_component

            found = find_component(fw.firmware_inventory(), component, fw.target)
            if found.version == settings.expect_version:
                return {"component": found.name, "before": found.version,
                        "after": found.version, "changed": False}
        with waiting(node, "firmware", f"the BMC's update task of {component} and the version read back"):
            result = verified_update(fw, component, Path(file), serve=_serve(settings.serve_host),
                                     method=settings.method, expect_version=settings.expect_version)
        return {"component": result.component, "before": result.before, "after": result.after,
                "method": result.method.value, "task": result.task.task_id, "changed": True}
    finally:
        bmc.close()


@step(idempotent=True)
def set_bios(node: str, attrs: dict[str, object],
             settings: BiosSettings | None = None) -> dict[str, object]:
    """Set BIOS attributes on ``node``, reboot it if they apply on reset, read them back.

    Idempotent: attributes already set send nothing and reboot nothing.
    """
    bmc = _node_bmc(node, Capability.BIOS)
    try:
        with waiting(node, "bios", "the BMC to apply the BIOS settings (reboot, power state, read-back)"):
            return asdict(apply_bios(bmc, attrs, settings or BiosSettings()))
    finally:
        bmc.close()


@step(idempotent=True)  # reads only
def bios_values(node: str, keys: list[str]) -> dict[str, object]:
    """The live values of ``keys`` on ``node`` (what a BIOS change would be undone to)."""
    bmc = _node_bmc(node, Capability.BIOS)
    try:
        live = require(bmc, BiosInterface).bios_attributes()
        return {k: live[k] for k in keys if k in live}
    finally:
        bmc.close()


@step(idempotent=True)  # reads only
def firmware_version(node: str, component: str) -> str:
    """The version ``node``'s BMC reports for ``component`` now."""
    from lifecycle.drivers.bmc.firmware import find_component

    bmc = _node_bmc(node, Capability.FIRMWARE)
    try:
        fw = require(bmc, FirmwareInterface)
        return find_component(fw.firmware_inventory(), component, fw.target).version
    finally:
        bmc.close()


# --- as changes of a node's cycle (workflows/changes.py: the rolling upgrade) -------------

@dataclass
class FirmwareChange:
    """A firmware update as one change of a node's cycle, verified by the version read back."""

    component: str
    file: str
    settings: FirmwareSettings = field(default_factory=FirmwareSettings)
    name: str = "firmware"

    def precheck(self) -> str:
        return "" if Path(self.file).is_file() else f"{self.file}: no such firmware image"

    def apply(self, node: str) -> ChangeResult:
        try:
            done = update_firmware(node, self.file, self.component, self.settings)
        except DriverError as exc:
            return ChangeResult(False, exc.message)
        return ChangeResult(True, "", done)

    def undo(self, node: str) -> ChangeResult | None:
        return None  # the old image is not kept: a node whose update failed is quarantined


@dataclass
class BiosChange:
    """BIOS attributes (``KEY=VALUE`` strings, typed like the live attribute) as one change of
    a node's cycle; undone by setting the values read before it back (journaled, so a
    recovered run undoes to the same values)."""

    attributes: dict[str, str]
    settings: BiosSettings = field(default_factory=BiosSettings)
    name: str = "bios"
    before: dict[str, object] = field(default_factory=dict)
    ssh_config: str | None = None
    """How the re-test reaches the node: after a reboot the change waits for SSH from the new boot (None:
    no wait; the re-test finds the node as it is)."""

    def precheck(self) -> str:
        return "" if self.attributes else "no BIOS attributes to set"

    def apply(self, node: str) -> ChangeResult:
        from lifecycle.workflows.repair_actions import await_ssh, boot_id  # imports changes.py

        try:
            self.before = bios_values(node, sorted(self.attributes))
            wanted = coerce_bios(self.before, self.attributes, node)
            booted = boot_id(node, self.ssh_config) if self.ssh_config else ""
            done = set_bios(node, wanted, self.settings)
        except DriverError as exc:
            return ChangeResult(False, exc.message)
        if done.get("rebooted") and self.ssh_config:
            # The BMC reads the values back once the reset has applied them; the host may still be going
            # down or booting, and a re-test begun then fails a node that only needed a minute more.
            why = await_ssh(node, self.ssh_config, self.settings.timeout_s, booted)
            if why:
                return ChangeResult(False, f"the BIOS reads back its values, but {why}", done)
        return ChangeResult(True, "", done)

    def undo(self, node: str) -> ChangeResult | None:
        if not self.before:
            return ChangeResult(True, "nothing was changed")
        try:
            return ChangeResult(True, "", set_bios(node, self.before, self.settings))
        except DriverError as exc:
            return ChangeResult(False, exc.message)


def has_firmware(node: str, component: str, version: str | None) -> bool:
    """Whether ``node`` reads ``version`` for ``component``. Unknown (no version asked for, a
    BMC that does not answer) is "not yet": the change runs and proves itself."""
    if version is None:
        return False
    try:
        return firmware_version(node, component) == version
    except DriverError:
        return False


def has_bios(node: str, attributes: dict[str, str]) -> bool:
    """Whether ``node``'s live BIOS reads every attribute already (unknown: not yet)."""
    try:
        live = bios_values(node, sorted(attributes))
        return coerce_bios(live, attributes, node) == live
    except DriverError:
        return False

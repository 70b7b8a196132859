"""The changes a serving node can be put through, as one table, and the one run per node that makes one.

A rolling upgrade and ``racklife apply`` of a changed inventory change nodes
the same way: leave, change, re-test, rejoin (:mod:`lifecycle.workflows.
node_cycle`). What differs is the change, so the change is a row of
``KINDS``: how to build it from a typed request (:class:`ChangeSpec`), how to
tell whether a node already has it, and what it needs from the process that
runs it, and which BMC interface it needs (a node whose BMC lacks it — IPMI
for firmware and BIOS — is left out of an upgrade with that reason, before
anything is planned).

``image``: a reimage — a drained node is reprovisioned (``drained →
reprovisioning → provisioned``) through the same boot attempts, claimed
power cycle and phone-home verification as a first provisioning
(``provision.boot_into``), with the image and version the request names.
A reimage cannot be taken back: a node whose reimage failed is quarantined.

``firmware``: a Redfish firmware update of one component (target: the
component; params: ``file`` and, optionally, ``version``), verified by the
version read back from FirmwareInventory; not taken back (quarantine).
``bios``: BIOS attributes (target: ``K=V,…``; params: the pairs) staged,
applied by a reboot and read back; undone by setting the old values back.
Both: ``workflows/bmc_changes.py``.

``slurm``: Slurm itself (target: the version). Its control plane goes first,
once per run, in Slurm's order (``before``: slurmdbd, then slurmctld); then
each node's slurmd restarts onto the version while the node is out of
service, proven by its new start time and the version it registers with
(``workflows/slurm_upgrade.py``); not taken back (quarantine).

``driver``: the NVIDIA driver (target: the version). The site's install hook
(``$RACKLIFE_DRIVER_INSTALL_CMD``), a power cycle through the node's BMC
(any BMC: the row needs only its power interface), and the re-test must read
the version from the node's GPUs (``workflows/driver_upgrade.py``); not taken
back (quarantine). A node whose last acceptance read the version is already
on it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any

from dbos import DBOS

from lifecycle.drivers.bmc.base import Capability
from lifecycle.model.inventory import Node
from lifecycle.model.states import Actor, State
from lifecycle.model.vocab import KeepJobsPolicy
from lifecycle.store import Store, observations, shared_store
from lifecycle.workflows import accept, bmc_changes, driver_upgrade, provision, slurm_upgrade
from lifecycle.workflows.kube_pool import KubeSettings
from lifecycle.workflows.leasing import release_leases, take_leases
from lifecycle.workflows.node_cycle import Change, ChangeResult, CycleOutcome, LeaveSpec, cycle, summary
from lifecycle.workflows.node_ops import current_run_id, node_pool, node_state
from lifecycle.workflows.retry import step


class ChangeKind(StrEnum):
    IMAGE = "image"
    FIRMWARE = "firmware"
    BIOS = "bios"
    SLURM = "slurm"
    DRIVER = "driver"


@dataclass(frozen=True)
class ChangeSpec:
    """One change asked for: its kind and its target (image: ``NAME`` or ``NAME:VERSION``)."""

    kind: ChangeKind
    target: str
    params: tuple[tuple[str, str], ...] = ()
    """What a kind needs beyond its target (firmware: ``file``, ``version``; bios: the pairs)."""

    def describe(self) -> str:
        version = dict(self.params).get("version") if self.kind is ChangeKind.FIRMWARE else None
        return f"{self.kind.value} {self.target}" + (f" {version}" if version else "")


@dataclass(frozen=True)
class ChangeContext:
    """What the process running the change provides (an argument of the run, so a recovered run has it)."""

    provision: provision.ProvisionSettings | None = None
    """The boot server's provisioning settings: image changes need it."""
    ssh_config: str | None = None
    """How the controller reaches the nodes over SSH (a driver or BIOS change waits for SSH after its reboot)."""
    bios_timeout_s: float | None = None
    """How long a BIOS change waits for the live Bios to read its values back (None: ``BiosSettings``'s)."""


# ------------------------------------------------------------------ image


def split_image(target: str) -> tuple[str, str | None]:
    name, _, version = target.partition(":")
    return name, version or None


@step(idempotent=True)  # this run's transition replays as done
def begin_reimage(node: str, label: str) -> str:
    """Move a drained (or quarantined) node to ``reprovisioning``; return where the node is."""
    store = shared_store()
    state = store.get(node).state
    if state in (State.DRAINED, State.QUARANTINED):
        state = store.transition(node, "reprovision", Actor.WORKFLOW, f"reimage with {label}",
                                 run_id=current_run_id()).target
    return state.value


@dataclass(frozen=True)
class ImageChange:
    """Reprovision the node with ``target`` (published by the boot server that ``provision`` describes)."""

    target: str
    provision: provision.ProvisionSettings
    name: str = "reimage"

    def precheck(self) -> str:
        try:
            self.provision.image(self.target)
        except KeyError as exc:
            return str(exc.args[0])
        return ""

    def apply(self, node: str) -> ChangeResult:
        cfg = self.provision
        try:
            image = cfg.image(self.target)
        except KeyError as exc:
            return ChangeResult(False, str(exc.args[0]))
        state = begin_reimage(node, f"{image.name} {image.version}")
        if state != State.REPROVISIONING.value:
            return ChangeResult(False, f"node is {state}; a reimage needs it drained (out of service)")
        done = provision.boot_into(node, image, cfg, State.REPROVISIONING, provision.Outcome(node, False, state))
        return ChangeResult(done.ok, done.reason, {"image": image.name, "version": image.version,
                                                   "state": done.state, "steps": done.steps})

    def undo(self, node: str) -> ChangeResult | None:
        return None  # the old image is gone from the node's disk: a failed reimage is quarantined


def _image(spec: ChangeSpec, ctx: ChangeContext) -> Change:
    if ctx.provision is None:
        raise ValueError("an image change needs the boot server (no built images given)")
    return ImageChange(spec.target, ctx.provision)


def _has_image(store: Store, node: str, spec: ChangeSpec) -> bool:
    """The node last booted the image (and version, when one is named)."""
    last = observations.last_boot(store, node)
    if last is None:
        return False
    name, version = split_image(spec.target)
    return last[0].get("image") == name and (version is None or last[0].get("image_version") == version)


# ------------------------------------------------------------------ firmware and BIOS (Redfish)


def _firmware(spec: ChangeSpec, ctx: ChangeContext) -> Change:
    p = dict(spec.params)
    if "file" not in p:
        raise ValueError("a firmware change needs the image file")
    return bmc_changes.FirmwareChange(spec.target, p["file"],
                                      bmc_changes.FirmwareSettings(expect_version=p.get("version")))


def _has_firmware(store: Store, node: str, spec: ChangeSpec) -> bool:
    return bmc_changes.has_firmware(node, spec.target, dict(spec.params).get("version"))


def _bios(spec: ChangeSpec, ctx: ChangeContext) -> Change:
    if not spec.params:
        raise ValueError("a BIOS change needs KEY=VALUE attributes")
    settings = bmc_changes.BiosSettings() if ctx.bios_timeout_s is None else \
        bmc_changes.BiosSettings(timeout_s=ctx.bios_timeout_s)
    return bmc_changes.BiosChange(dict(spec.params), settings, ssh_config=ctx.ssh_config)


def _has_bios(store: Store, node: str, spec: ChangeSpec) -> bool:
    return bmc_changes.has_bios(node, dict(spec.params))


def _slurm(spec: ChangeSpec, ctx: ChangeContext) -> Change:
    return slurm_upgrade.SlurmdChange(spec.target)


def _has_slurm(store: Store, node: str, spec: ChangeSpec) -> bool:
    """racklife moved this node's slurmd onto the version (a slurmd that merely runs it is restarted too)."""
    return any(c.kind == ChangeKind.SLURM.value and c.new == spec.target and ": done;" in c.reason
               for c in store.changes(node))


def _driver(spec: ChangeSpec, ctx: ChangeContext) -> Change:
    if ctx.ssh_config is None:
        raise ValueError("a driver change needs the SSH config that reaches the nodes")
    return driver_upgrade.DriverChange(spec.target, ctx.ssh_config)


def _has_driver(store: Store, node: str, spec: ChangeSpec) -> bool:
    """The node's last acceptance read the version from its GPUs (unknown: not yet; the change proves itself)."""
    return driver_upgrade.reported_driver(store, node) == spec.target


@dataclass(frozen=True)
class Kind:
    build: Callable[[ChangeSpec, ChangeContext], Change]
    current: Callable[[Store, str, ChangeSpec], bool]
    """Whether the node already has the change (an upgrade skips it; reads only)."""
    phase: str
    """The phase name the change's time is recorded under."""
    needs: Capability | None = None
    """The BMC interface the change needs (``factory.supports`` answers from the inventory)."""
    before: Callable[[ChangeSpec], tuple[bool, str, list[dict[str, Any]]]] | None = None
    """What the upgrade run does once, before its first batch (Slurm's control plane): (ok, why not, records)."""


KINDS: dict[ChangeKind, Kind] = {
    ChangeKind.IMAGE: Kind(_image, _has_image, "reimage"),
    ChangeKind.FIRMWARE: Kind(_firmware, _has_firmware, "firmware", Capability.FIRMWARE),
    ChangeKind.BIOS: Kind(_bios, _has_bios, "bios", Capability.BIOS),
    ChangeKind.SLURM: Kind(_slurm, _has_slurm, "slurmd", before=lambda spec: slurm_upgrade.control_plane(spec.target)),
    ChangeKind.DRIVER: Kind(_driver, _has_driver, "driver", Capability.POWER),
}


def unsupported(node: Node, spec: ChangeSpec) -> str | None:
    """None when ``node`` can take ``spec``; else why not (no I/O: its BMC's hardware type)."""
    from lifecycle.drivers.bmc.factory import unsupported_reason

    needs = KINDS[spec.kind].needs
    return unsupported_reason(node, needs) if needs is not None else None


def build(spec: ChangeSpec, ctx: ChangeContext) -> Change:
    return KINDS[spec.kind].build(spec, ctx)


def has(store: Store, node: str, spec: ChangeSpec) -> bool:
    """Whether ``node`` already has the change ``spec`` asks for (reads only)."""
    return KINDS[spec.kind].current(store, node, spec)


# ------------------------------------------------------------------ one run per node


@dataclass(frozen=True)
class ChangeSettings:
    """One node's change request; an argument of the run, so a recovered run has exactly what it started with."""

    changes: tuple[ChangeSpec, ...]
    operator: str
    accept: accept.AcceptSettings
    """The re-test: acceptance of the one node, at its pool's ``retest_level``."""
    context: ChangeContext
    kube: KubeSettings | None = None
    policy: KeepJobsPolicy | None = None
    """Slurm leave policy (default: the pool's); an upgrade's, which never cancels a job."""
    deadline_s: float | None = None
    why: str = ""


@dataclass
class ChangeOutcome(CycleOutcome):
    pool: str = ""
    wanted: list[str] | None = None


@step(idempotent=True)
def record_node_change(node: str, kind: str, old: str | None, new: str, line: str) -> None:
    shared_store().record_change(node, kind, old, new, Actor.WORKFLOW, f"run {current_run_id()}: {line}",
                                 run_id=current_run_id())


@step(idempotent=True)  # reads only
def last_image(node: str) -> str | None:
    last = observations.last_boot(shared_store(), node)
    return f"{last[0].get('image')}:{last[0].get('image_version')}" if last else None


@DBOS.workflow(name="change_node")
def change_node(node: str, s: ChangeSettings) -> dict[str, Any]:
    """Leave, change, re-test and rejoin one node as a run that holds it (one run per node)."""
    held = take_leases([node], "change_node")
    if held:
        return asdict(ChangeOutcome(node, state=node_state(node), reason=held[node]))
    try:
        out = ChangeOutcome(node, state=node_state(node), wanted=[c.describe() for c in s.changes])
        if out.state != State.IN_SERVICE.value:
            out.reason = f"refused, nothing changed: node is {out.state}; a change needs it in service"
            return asdict(out)
        try:
            steps = [build(c, s.context) for c in s.changes]
        except ValueError as exc:
            out.reason = f"refused, nothing changed: {exc}"
            return asdict(out)
        before = last_image(node)
        drivers = any(c.kind is ChangeKind.DRIVER for c in s.changes)
        driver_before = driver_upgrade.last_driver(node) if drivers else None  # only then: runs replay as before
        why = s.why or ", ".join(c.describe() for c in s.changes)
        cycle(node, LeaveSpec(why, s.policy, s.deadline_s), steps, s.accept, s.kube, out)
        out.pool = node_pool(node)
        for c in s.changes:
            old = before if c.kind is ChangeKind.IMAGE else driver_before if c.kind is ChangeKind.DRIVER else None
            record_node_change(node, c.kind.value, old, c.target, summary(out))
        return asdict(out)
    finally:
        release_leases()

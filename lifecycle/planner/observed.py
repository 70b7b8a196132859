"""What each source said about a node, when, and how that differs from what the inventory wants.

The store's ``state`` is racklife's belief; the observation is what the BMC,
the boot server, Slurm, Kubernetes and the acceptance records say now. Drift
is a row of ``RULES``: a source, a name, and a check of (observation,
desired) that returns why the two disagree, or None. A source that could not
be read is drift too (fail closed): nothing is inferred from silence.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import TypeAdapter

from lifecycle.drivers.bmc.base import Capability
from lifecycle.drivers.bmc.bios_text import as_text, typed_like
from lifecycle.drivers.bmc.factory import unsupported_reason
from lifecycle.drivers.slurm.types import NodeState
from lifecycle.model.inventory import FirmwareBaseline, Node, Pool
from lifecycle.model.states import State


class Source(StrEnum):
    BMC = "bmc"
    BOOT = "boot"
    SLURM = "slurm"
    KUBE = "kube"
    ACCEPTANCE = "acceptance"


@dataclass(frozen=True)
class BmcSeen:
    power: str  # the driver's PowerState: on | off | powering_on | powering_off | unknown
    firmware: dict[str, str] = field(default_factory=dict)  # component -> version; empty when not read
    components: tuple[tuple[str, str, str], ...] = ()
    """Every component read as (name, its id's last part, version): names repeat on some BMCs."""
    bios: dict[str, bool | int | str] | None = None
    """The live Bios's values of the attributes the inventory names (one it lacks is absent); None: not read."""


@dataclass(frozen=True)
class BootSeen:
    image: str | None  # what the node last phoned home with; None: never booted by racklife
    version: str | None
    at: datetime | None


@dataclass(frozen=True)
class SlurmSeen:
    state: str  # as Slurm prints it: IDLE+DRAIN, ALLOCATED, …
    drained: bool
    down: bool
    reason: str
    owner: str  # racklife | other | none
    owner_run: str | None
    owner_user: str | None
    partitions: tuple[str, ...]
    jobs: tuple[str, ...] = ()  # active jobs on the node


@dataclass(frozen=True)
class KubeSeen:
    registered: bool
    ready: bool = False
    cordoned: bool = False
    cordon_owner: str = "none"  # racklife | other | none
    cordon_run: str | None = None
    labels: dict[str, str] = field(default_factory=dict)
    taints: tuple[str, ...] = ()  # key[=value]:Effect


@dataclass(frozen=True)
class AcceptanceSeen:
    present: bool
    passed: bool = False
    unexpired: bool = False
    newer_than_provisioning: bool = False
    record: str | None = None
    expires_at: datetime | None = None
    driver: str | None = None
    """The NVIDIA driver version the node's GPUs reported in the newest record; None: none, or two."""

    @property
    def valid(self) -> bool:
        return self.present and self.passed and self.unexpired and self.newer_than_provisioning


@dataclass(frozen=True)
class Observation:
    """One node, every source that applies to it, seen at ``at``."""

    node: str
    at: datetime
    state: State  # the store's belief at the time
    pool: str
    bmc: BmcSeen | None = None
    boot: BootSeen | None = None
    slurm: SlurmSeen | None = None
    kube: KubeSeen | None = None
    acceptance: AcceptanceSeen | None = None
    errors: dict[Source, str] = field(default_factory=dict)  # a source that could not be read, and why

    def to_json(self) -> dict[str, Any]:
        return _ADAPTER.dump_python(self, mode="json")  # type: ignore[no-any-return]

    @staticmethod
    def from_json(doc: Mapping[str, Any]) -> Observation:
        return _ADAPTER.validate_python(doc)


_ADAPTER: TypeAdapter[Observation] = TypeAdapter(Observation)


@dataclass(frozen=True)
class Desired:
    """What the inventory wants of the node (the parts refresh compares)."""

    node: Node
    pool: Pool
    image: str | None  # the image name the node should run, None: no opinion
    image_version: str | None

    @property
    def driver(self) -> str | None:
        """The NVIDIA driver version the node should run (its own, else its pool's); None: no opinion."""
        return self.node.driver or self.pool.driver

    @property
    def bios(self) -> dict[str, bool | int | str]:
        """The BIOS attributes the node's BMC should read: its pool's, and its own over them."""
        return {**self.pool.bios, **self.node.bios}


@dataclass(frozen=True)
class Drift:
    node: str
    source: Source
    kind: str  # a short name from RULES
    message: str

    def to_json(self) -> dict[str, str]:
        return {k: str(v) for k, v in asdict(self).items()}


# States in which racklife expects the node's power on and its OS the one it booted.
POWERED = frozenset({State.PROVISIONED, State.BURNING_IN, State.ACCEPTED, State.QUARANTINED, State.JOINING,
                     State.IN_SERVICE, State.DRAINING, State.DRAINED, State.LENDING, State.LENT,
                     State.RECLAIMING})
# States in which the node must hold a valid acceptance record.
ACCEPTED = frozenset({State.ACCEPTED, State.JOINING, State.IN_SERVICE})
# States in which the node should serve its pool's scheduler.
SERVING = frozenset({State.IN_SERVICE})


def _power(o: Observation, d: Desired) -> str | None:
    if o.bmc is None or o.state not in POWERED or o.bmc.power == "on":
        return None
    return f"the BMC says power {o.bmc.power}; racklife believes the node is {o.state} (powered off out of band?)"


def _image(o: Observation, d: Desired) -> str | None:
    if o.boot is None or o.state not in POWERED or d.image is None:
        return None
    if o.boot.image is None:
        return f"the boot server has no record of the node booting; the inventory wants {d.image}"
    if o.boot.image != d.image or (d.image_version and o.boot.version != d.image_version):
        return (f"last booted {o.boot.image} {o.boot.version}; the inventory wants "
                f"{d.image} {d.image_version or '(any version)'}")
    return None


def _powered_off(o: Observation) -> bool:
    return o.bmc is not None and o.bmc.power == "off"


def _foreign_drain(o: Observation, d: Desired) -> str | None:
    if o.slurm is None or not (o.slurm.drained or o.slurm.down) or o.slurm.owner == "racklife":
        return None
    if o.slurm.down and not o.slurm.drained and _powered_off(o):
        return None  # Slurm's answer to the power loss: see _down_powered_off
    who = o.slurm.owner_user or "someone else"
    return f"{'drained' if o.slurm.drained else 'down'} in Slurm by {who} ({o.slurm.reason!r}): not racklife's"


def _down_powered_off(o: Observation, d: Desired) -> str | None:
    if o.slurm is None or not o.slurm.down or o.slurm.drained or not _powered_off(o):
        return None
    return (f"down in Slurm ({o.slurm.reason!r}) while its BMC says off: Slurm returns it when it is "
            "powered on and its slurmd registers (ReturnToService=2)")


def _down_powered_on(o: Observation, d: Desired) -> str | None:
    # Slurm's answer to a power cycle lasts until the node's slurmd registers again (ReturnToService=2), and
    # looks like anyone's down meanwhile; an apply looks again before it holds the down against the node.
    if o.slurm is None or not o.slurm.down or o.slurm.drained or _powered_off(o) or o.slurm.owner == "racklife":
        return None
    return (f"down in Slurm ({o.slurm.reason!r}) while its BMC does not say off: a node just power-cycled is "
            "down until its slurmd registers again (ReturnToService=2); apply looks again for a while before "
            "it holds the down against the node")


# States racklife provisions a node from: its first step power-cycles the node.
UNPROVISIONED = frozenset({State.ENROLLED, State.AVAILABLE, State.INSPECT_FAILED, State.PROVISION_FAILED})


def _slurm_working(o: Observation, d: Desired) -> str | None:
    """Slurm runs work on a node racklife would provision (power-cycle): the node is not racklife's to take."""
    if o.slurm is None or o.state not in UNPROVISIONED:
        return None
    if not o.slurm.jobs and not NodeState.from_scontrol(o.slurm.state).busy:
        return None
    jobs = f": jobs {', '.join(o.slurm.jobs)}" if o.slurm.jobs else ""
    return (f"Slurm runs work on it ({o.slurm.state}{jobs}) while racklife has it {o.state}: provisioning "
            "power-cycles a node, so racklife leaves it until Slurm's jobs on it are done")


def _own_drain(o: Observation, d: Desired) -> str | None:
    if o.slurm is None or o.state not in SERVING or o.slurm.owner != "racklife":
        return None
    if not (o.slurm.drained or o.slurm.down):
        return None
    return f"drained in Slurm by racklife run {o.slurm.owner_run} while racklife believes it in service"


def _partition(o: Observation, d: Desired) -> str | None:
    if o.slurm is None or o.state not in SERVING or not d.pool.partition:
        return None
    if d.pool.partition in o.slurm.partitions:
        return None
    return f"not in Slurm partition {d.pool.partition} (in: {', '.join(o.slurm.partitions) or 'none'})"


def _kube_labels(o: Observation, d: Desired) -> str | None:
    # A registered Node of a Kubernetes pool carries the pool's labels whatever racklife's state.
    if o.kube is None or o.state not in POWERED or not o.kube.registered:
        return None
    missing = {k: v for k, v in d.pool.labels.items() if o.kube.labels.get(k) != v}
    if not missing:
        return None
    return "pool labels missing or changed: " + ", ".join(
        f"{k}={v} (has {o.kube.labels.get(k, 'none')})" for k, v in sorted(missing.items()))


def _kube_taints(o: Observation, d: Desired) -> str | None:
    if o.kube is None or o.state not in SERVING or not o.kube.registered:
        return None
    missing = [t for t in d.pool.taints if t not in o.kube.taints]
    return f"pool taints missing: {', '.join(missing)}" if missing else None


def _kube_node(o: Observation, d: Desired) -> str | None:
    if o.kube is None or o.state not in SERVING:
        return None
    if not o.kube.registered:
        return "no Node object in Kubernetes"
    return None if o.kube.ready else "the Node is not Ready"


def seen_version(o: Observation, component: str) -> str | None:
    """The version the BMC reported for ``component`` (its name or its id's last part, any case, as
    ``racklife bmc firmware`` matches it); None: not reported, or not by one component alone."""
    if o.bmc is None:
        return None
    wanted = component.lower()
    found = [v for name, ident, v in o.bmc.components if wanted in (name.lower(), ident.lower())] or [
        v for name, v in o.bmc.firmware.items() if name.lower() == wanted]
    return found[0] if len(found) == 1 else None


def firmware_behind(o: Observation, d: Desired) -> list[FirmwareBaseline]:
    """The baseline's components the BMC reports at another version (not those it does not report)."""
    return [f for f in d.node.firmware if (v := seen_version(o, f.component)) is not None and v != f.version]


def _firmware(o: Observation, d: Desired) -> str | None:
    behind = firmware_behind(o, d) if unsupported_reason(d.node, Capability.FIRMWARE) is None else []
    if not behind:
        return None
    return "firmware differs from the baseline: " + ", ".join(
        f"{f.component} is {seen_version(o, f.component)}, the baseline says {f.version}" for f in behind)


def _firmware_unknown(o: Observation, d: Desired) -> str | None:
    if o.bmc is None or not d.node.firmware or unsupported_reason(d.node, Capability.FIRMWARE) is not None:
        return None
    missing = [f.component for f in d.node.firmware if seen_version(o, f.component) is None]
    if not missing:
        return None
    return (f"the BMC reports no one firmware component for {', '.join(missing)} of the baseline (it reports: "
            f"{', '.join(sorted(o.bmc.firmware)) or 'none'})")


def _firmware_unsupported(o: Observation, d: Desired) -> str | None:
    if not d.node.firmware:
        return None
    why = unsupported_reason(d.node, Capability.FIRMWARE)
    return None if why is None else f"the inventory gives it a firmware baseline, but {why}"


def driver_seen(o: Observation) -> tuple[str | None, str]:
    """(the driver version the node's GPUs last reported, or None with why it is not known)."""
    a = o.acceptance
    if a is None or not a.present:
        return None, "no acceptance record: nothing has read the driver from its GPUs"
    if not a.newer_than_provisioning:
        return None, f"its newest acceptance record ({a.record}) predates its last provisioning"
    if a.driver is None:
        return None, f"its newest acceptance record ({a.record}) reports no one driver version from its GPUs"
    return a.driver, ""


def _driver(o: Observation, d: Desired) -> str | None:
    if d.driver is None or o.state not in ACCEPTED:
        return None
    seen, _why = driver_seen(o)
    if seen is None or seen == d.driver:
        return None
    return (f"the node's GPUs report driver {seen} (acceptance record {o.acceptance.record if o.acceptance else ''});"
            f" the inventory says {d.driver}")


def _driver_unknown(o: Observation, d: Desired) -> str | None:
    # Only once the node has been accepted: before that, its acceptance is what reads the driver.
    if d.driver is None or o.state not in ACCEPTED:
        return None
    seen, why = driver_seen(o)
    return None if seen is not None else f"the inventory wants driver {d.driver}, but {why} (run `racklife accept`)"


def bios_behind(o: Observation, d: Desired) -> dict[str, tuple[bool | int | str, bool | int | str]] | str:
    """Each wanted attribute the live Bios reads otherwise, as (live, wanted); or why they cannot be compared
    (an attribute the BMC lacks, a value not of the attribute's type, a Bios not read)."""
    if o.bmc is None or o.bmc.bios is None:
        return "the BMC's BIOS attributes were not read"
    live = o.bmc.bios
    missing = sorted(k for k in d.bios if k not in live)
    if missing:
        return f"the BMC's Bios has no attribute {', '.join(missing)}"
    out: dict[str, tuple[bool | int | str, bool | int | str]] = {}
    for key, want in sorted(d.bios.items()):
        try:
            typed = typed_like(live[key], key, as_text(want))
        except ValueError as exc:
            return f"the BMC's Bios: {exc}"
        if typed != live[key]:
            out[key] = (live[key], typed)
    return out


def _bios(o: Observation, d: Desired) -> str | None:
    if not d.bios or unsupported_reason(d.node, Capability.BIOS) is not None:
        return None
    behind = bios_behind(o, d)
    if isinstance(behind, str) or not behind:
        return None
    return "BIOS differs from the inventory: " + ", ".join(
        f"{k} is {as_text(now)}, the inventory says {as_text(want)}" for k, (now, want) in behind.items())


def _bios_unknown(o: Observation, d: Desired) -> str | None:
    if o.bmc is None or not d.bios or unsupported_reason(d.node, Capability.BIOS) is not None:
        return None
    behind = bios_behind(o, d)
    return behind if isinstance(behind, str) else None


def _bios_unsupported(o: Observation, d: Desired) -> str | None:
    if not d.bios:
        return None
    why = unsupported_reason(d.node, Capability.BIOS)
    return None if why is None else f"the inventory gives it BIOS attributes, but {why}"


def _foreign_cordon(o: Observation, d: Desired) -> str | None:
    if o.kube is None or not o.kube.cordoned or o.kube.cordon_owner == "racklife":
        return None
    return "cordoned in Kubernetes by someone else (no racklife annotation)"


def _acceptance(o: Observation, d: Desired) -> str | None:
    a = o.acceptance
    if a is None or o.state not in ACCEPTED or a.valid:
        return None
    if not a.present:
        return f"no acceptance record, and racklife believes the node {o.state}"
    if not a.passed:
        return f"the newest acceptance record ({a.record}) did not pass"
    if not a.unexpired:
        return f"the acceptance record {a.record} expired at {a.expires_at}"
    return f"the acceptance record {a.record} predates the node's last provisioning"


@dataclass(frozen=True)
class Rule:
    source: Source
    kind: str
    check: Callable[[Observation, Desired], str | None]


RULES: tuple[Rule, ...] = (
    Rule(Source.BMC, "power", _power),
    Rule(Source.BMC, "firmware", _firmware),
    Rule(Source.BMC, "firmware-unknown", _firmware_unknown),
    Rule(Source.BMC, "firmware-unsupported", _firmware_unsupported),
    # Before BIOS: a node's steps are planned in apply's order (update-driver, then set-bios).
    Rule(Source.ACCEPTANCE, "driver", _driver),
    Rule(Source.ACCEPTANCE, "driver-unknown", _driver_unknown),
    Rule(Source.BMC, "bios", _bios),
    Rule(Source.BMC, "bios-unknown", _bios_unknown),
    Rule(Source.BMC, "bios-unsupported", _bios_unsupported),
    Rule(Source.BOOT, "image", _image),
    Rule(Source.SLURM, "foreign-drain", _foreign_drain),
    Rule(Source.SLURM, "down-powered-off", _down_powered_off),
    Rule(Source.SLURM, "down-powered-on", _down_powered_on),
    Rule(Source.SLURM, "own-drain", _own_drain),
    Rule(Source.SLURM, "slurm-working", _slurm_working),
    Rule(Source.SLURM, "partition", _partition),
    Rule(Source.KUBE, "node", _kube_node),
    Rule(Source.KUBE, "labels", _kube_labels),
    Rule(Source.KUBE, "taints", _kube_taints),
    Rule(Source.KUBE, "foreign-cordon", _foreign_cordon),
    Rule(Source.ACCEPTANCE, "acceptance", _acceptance),
)


def drift(o: Observation, d: Desired) -> list[Drift]:
    """Every way the node differs from the inventory, each with the source that shows it."""
    out = [Drift(o.node, src, "unreadable", f"could not read: {why}") for src, why in sorted(o.errors.items())]
    for rule in RULES:
        why = rule.check(o, d)
        if why is not None:
            out.append(Drift(o.node, rule.source, rule.kind, why))
    return out

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

from lifecycle.model.inventory import Node, Pool
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
    Rule(Source.BOOT, "image", _image),
    Rule(Source.SLURM, "foreign-drain", _foreign_drain),
    Rule(Source.SLURM, "down-powered-off", _down_powered_off),
    Rule(Source.SLURM, "own-drain", _own_drain),
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

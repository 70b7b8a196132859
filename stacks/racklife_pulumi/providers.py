"""racklife's Pulumi dynamic providers: a bare-metal node, its pool membership, its Slurm registration.

Each operation is the planner's plan and apply for the part of the node the
resource owns (``engine.converge``), or the planner's refresh (``read``):

| resource | create | update | delete |
|---|---|---|---|
| ``BareMetalNode`` | enrol, provision, accept | image: reimage; firmware: update; else re-import | decommission |
| ``PoolMembership`` | join the scheduler (then the firmware baseline) | pool: role swap | leave (racklife's drain) |
| ``SlurmNodeRegistration`` | into slurm.conf and its partition (site hook) | the same | drain, out of slurm.conf |

A step racklife has no workflow for yet (a pool's labels) or a blocker (an
IPMI BMC asked for a firmware baseline, a foreign drain) is refused before
anything changes, with the planner's words. A firmware baseline
(``spec.firmware``, the inventory's) is planned for a node in service only, so
a node created with one reaches it in its membership's create, right after
the join.
``SlurmNodeRegistration`` is Slurm's configuration of a training node: its
create and update put the node's ``NodeName=`` line and partition membership
into slurm.conf through the site's registration hook (``RACKLIFE_SLURM_ADD_CMD``,
:mod:`lifecycle.workflows.slurm_conf`) when slurmctld does not list it there
yet, then check, through the planner's refresh, that slurmctld lists it in
the partition and no one else holds it (serving is the membership's
``in_service``). Its delete is refused while jobs run on the node; otherwise
racklife's drain takes a serving node out first, and the decommission's
slurm.conf hook (``RACKLIFE_SLURM_CONF_CMD``) takes it out of the file.

The classes are pickled into the stack's state by reference, so the provider
host imports them from this installed module. A provider has no constructor
arguments (they would be pickled into the state): its settings come from the
stack's configuration (``racklife:…``) or the environment, in ``configure``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import pulumi
from pulumi.dynamic import (
    CheckFailure,
    CheckResult,
    ConfigureRequest,
    CreateResult,
    DiffResult,
    ReadResult,
    Resource,
    ResourceProvider,
    UpdateResult,
)
from pydantic import ValidationError

from lifecycle.model.inventory import Inventory, Pool
from lifecycle.model.redact import redact
from lifecycle.model.states import State
from lifecycle.model.vocab import node_name
from lifecycle.planner.observed import Observation, Source
from lifecycle.planner.plan import Action
from stacks.racklife_pulumi import engine
from stacks.racklife_pulumi.inputs import one_node_inventory, problems_of, wire_ints, with_node, without_nodes

# The planner's actions each resource carries out.
BUILD = frozenset({Action.ENROLL, Action.PROVISION, Action.POWER_ON, Action.ACCEPT})
REIMAGE = frozenset({Action.POWER_ON, Action.LEAVE, Action.REIMAGE, Action.ACCEPT, Action.JOIN, Action.JOIN_KUBE})
FIRMWARE = frozenset({Action.UPDATE_FIRMWARE})  # one run: leave, update, read back, re-test, rejoin
MEMBERSHIP = frozenset({Action.MOVE_POOL, Action.JOIN, Action.JOIN_KUBE}) | FIRMWARE
DECOMMISSION = frozenset({Action.DECOMMISSION})

# BareMetalNode: inputs whose change is another server or another slot (a replacement).
NODE_REPLACES = ("node", "spec.serial", "spec.sku", "spec.rack", "spec.u")
NODE_IGNORED = ("spec.pool", "pools")  # the pool is PoolMembership's
# BareMetalNode: inputs whose change the planner converges on (no re-import: a scheduler may be using the node).
NODE_CONVERGED = ("spec.image", "images", "spec.firmware")


class _Provider(ResourceProvider):
    """Settings from ``configure`` (the stack's racklife:… keys), else the environment alone."""

    serialize_as_secret_always = False  # it holds nothing: settings arrive in configure, in the host
    _settings: engine.EngineSettings | None = None

    def configure(self, req: ConfigureRequest) -> None:
        self._settings = engine.settings_from(req.config.get, os.environ)

    @property
    def settings(self) -> engine.EngineSettings:
        if self._settings is None:
            self._settings = engine.settings_from(lambda _k: None, os.environ)
        return self._settings


def _get(props: Mapping[str, Any], path: str) -> Any:
    value: Any = props
    for part in path.split("."):
        value = value.get(part) if isinstance(value, Mapping) else None
    return value


def _spec_changes(olds: Mapping[str, Any], news: Mapping[str, Any]) -> list[str]:
    old, new = olds.get("spec") or {}, news.get("spec") or {}
    keys = sorted(set(old) | set(new))
    out = [f"spec.{k}" for k in keys if old.get(k) != new.get(k)]
    out += [k for k in ("site", "rack", "images", "pools", "node") if olds.get(k) != news.get(k)]
    return out


def _observed_node(o: Observation | None) -> dict[str, Any]:
    if o is None:
        return {"state": "absent"}
    acc = o.acceptance
    return {"state": o.state.value, "observed_pool": o.pool,
            "power": o.bmc.power if o.bmc else None,
            "booted_image": o.boot.image if o.boot else None,
            "booted_version": o.boot.version if o.boot else None,
            "firmware": dict(o.bmc.firmware) if o.bmc else {},  # read for a node with a baseline only
            "acceptance_record": acc.record if acc is not None and acc.valid else None,
            "observed_at": o.at.isoformat(),
            "errors": {k.value: redact(v) for k, v in o.errors.items()}}  # outputs reach the state in plain


class BareMetalNodeProvider(_Provider):
    """One server: enrolled, provisioned and accepted; reimaged on an image change; decommissioned on delete."""

    def check(self, _olds: dict[str, Any], news: dict[str, Any]) -> CheckResult:
        name = f"BareMetalNode {news.get('node')}"
        return CheckResult(news, [CheckFailure(p.prop, p.reason) for p in problems_of(news, name)])

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        changed = [k for k in _spec_changes(olds, news) if k not in NODE_IGNORED]
        replaces = [k for k in changed if k in NODE_REPLACES]
        return DiffResult(changes=bool(changed), replaces=replaces, stables=["node"], delete_before_replace=True)

    def _inventory(self, props: Mapping[str, Any]) -> Inventory:
        """The inputs as an inventory, in the pool the node is in now (the pool is PoolMembership's)."""
        inv = one_node_inventory(props, f"BareMetalNode {props['node']}")
        o = engine.observed(self.settings, inv.nodes[0].name)
        return with_node(inv, pool=o.pool) if o is not None else inv

    def _outs(self, props: Mapping[str, Any]) -> dict[str, Any]:
        return {**props, **_observed_node(engine.observed(self.settings, str(props["node"])))}

    def create(self, props: dict[str, Any]) -> CreateResult:
        inv = self._inventory(props)
        engine.converge(self.settings, inv, inv.nodes[0].name, BUILD, say=pulumi.log.info)
        outs = self._outs(props)
        if not outs.get("acceptance_record"):
            raise engine.FleetError(f"{inv.nodes[0].name}: no valid acceptance record after apply "
                                    f"(state {outs['state']}): it cannot join a scheduler")
        return CreateResult(inv.nodes[0].serial, outs)

    def read(self, id_: str, props: dict[str, Any]) -> ReadResult:
        o = engine.observed(self.settings, str(props.get("node")))
        if o is None or o.state is State.DECOMMISSIONED:
            return ReadResult("", {})  # not in the fleet (any more): gone
        return ReadResult(id_, {**props, **_observed_node(o)})

    def update(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> UpdateResult:
        inv = self._inventory(news)
        node = inv.nodes[0].name
        changed = [k for k in _spec_changes(olds, news) if k not in NODE_IGNORED]
        if [k for k in changed if k not in NODE_CONVERGED]:
            engine.reimport(self.settings, inv)
        only = (REIMAGE if {"spec.image", "images"} & set(changed) else frozenset()) | \
            (FIRMWARE if "spec.firmware" in changed else frozenset())
        if only:
            engine.converge(self.settings, inv, node, only, say=pulumi.log.info)
        return UpdateResult(self._outs(news))

    def delete(self, _id: str, props: dict[str, Any]) -> None:
        """Decommission (no erase): the planner's step for a node the inventory no longer lists; its
        pre-checks refuse while jobs or pods run, or while someone else's drain or cordon holds it."""
        node = str(props["node"])
        o = engine.observed(self.settings, node)
        if o is None or o.state is State.DECOMMISSIONED:
            return  # not in the fleet: nothing to decommission
        engine.converge(self.settings, without_nodes(one_node_inventory(props, f"BareMetalNode {node}")), node,
                        DECOMMISSION, say=pulumi.log.info)


def _pool_problems(props: Mapping[str, Any]) -> list[CheckFailure]:
    pools = props.get("pools")
    if not isinstance(pools, Mapping) or not pools:
        return [CheckFailure("pools", "required: the inventory's pools (name → definition)")]
    out: list[CheckFailure] = []
    for name, spec in pools.items():
        try:
            Pool.model_validate(wire_ints(spec))
        except ValidationError as exc:
            out += [CheckFailure(".".join(["pools", name, *map(str, e["loc"])]), e["msg"])
                    for e in exc.errors(include_url=False)]
    if props.get("pool") not in pools:
        out.append(CheckFailure("pool", f"unknown pool {props.get('pool')!r} (known: {', '.join(sorted(pools))})"))
    return out


class PoolMembershipProvider(_Provider):
    """The pool a node serves in: joined on create; a pool change is a role swap; delete drains it out."""

    def check(self, _olds: dict[str, Any], news: dict[str, Any]) -> CheckResult:
        failures = [CheckFailure(p.prop, p.reason) for p in problems_of(news, f"PoolMembership {news.get('node')}")]
        failures += _pool_problems(news)
        gate = news.get("acceptance_record")
        if gate is not None and not (isinstance(gate, str) and gate):  # None: not known until the node exists
            failures.append(CheckFailure("acceptance_record", "must be the BareMetalNode's acceptance_record "
                                                              "output: a node joins a scheduler only once accepted"))
        return CheckResult(news, failures)

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        replaces = ["node"] if olds.get("node") != news.get("node") else []
        changes = bool(replaces) or olds.get("pool") != news.get("pool")
        return DiffResult(changes=changes, replaces=replaces, stables=["node"], delete_before_replace=True)

    def _join(self, props: Mapping[str, Any]) -> dict[str, Any]:
        node = str(props["node"])
        if not props.get("acceptance_record"):
            raise engine.FleetError(f"{node}: no acceptance record given: a node joins a scheduler only once "
                                    "accepted (fail closed)")
        inv = with_node(one_node_inventory(props, f"PoolMembership {node}"), pool=str(props["pool"]))
        engine.converge(self.settings, inv, node, MEMBERSHIP, say=pulumi.log.info)
        return self._outs(props)

    def _outs(self, props: Mapping[str, Any]) -> dict[str, Any]:
        o = engine.observed(self.settings, str(props["node"]))
        scheduler = (props.get("pools") or {}).get(props.get("pool"), {}).get("scheduler")
        return {**props, "scheduler": scheduler, "state": o.state.value if o else "absent",
                "observed_pool": o.pool if o else None,
                "in_service": bool(o and o.state.value == "in_service" and o.pool == props.get("pool"))}

    def create(self, props: dict[str, Any]) -> CreateResult:
        return CreateResult(f"{props['node']}/{props['pool']}", self._join(props))

    def read(self, id_: str, props: dict[str, Any]) -> ReadResult:
        if engine.observed(self.settings, str(props.get("node"))) is None:
            return ReadResult("", {})
        return ReadResult(id_, self._outs(props))

    def update(self, _id: str, _olds: dict[str, Any], news: dict[str, Any]) -> UpdateResult:
        return UpdateResult(self._join(news))

    def delete(self, _id: str, props: dict[str, Any]) -> None:
        node = str(props["node"])
        if engine.observed(self.settings, node) is None:
            return
        engine.leave(self.settings, node, f"pulumi: {node} leaves pool {props.get('pool')}")


class SlurmNodeRegistrationProvider(_Provider):
    """Slurm's view of a training node: listed by slurmctld, in the partition, in service, held by no one else."""

    def check(self, _olds: dict[str, Any], news: dict[str, Any]) -> CheckResult:
        failures: list[CheckFailure] = []
        for key in ("node", "partition"):
            try:
                node_name(str(news.get(key) or ""))  # a partition name follows the same grammar
            except ValueError as exc:
                failures.append(CheckFailure(key, str(exc)))
        return CheckResult(news, failures)

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        replaces = [k for k in ("node", "partition") if olds.get(k) != news.get(k)]
        return DiffResult(changes=bool(replaces) or olds.get("membership") != news.get("membership"),
                          replaces=replaces, stables=["node"], delete_before_replace=True)

    @staticmethod
    def _seen(o: Observation | None) -> dict[str, Any]:
        s = o.slurm if o is not None else None
        if s is None:
            return {"slurm_state": None, "partitions": [], "owner": None}
        return {"slurm_state": s.state, "partitions": list(s.partitions), "owner": s.owner}

    def _verified(self, props: Mapping[str, Any]) -> dict[str, Any]:
        node, partition = str(props["node"]), str(props["partition"])
        done = engine.register_slurm(self.settings, node, partition)
        pulumi.log.info(done)
        o = engine.observed_in_slurm(self.settings, node)
        problems = _registration_problems(o, partition)
        if problems:
            raise engine.FleetError(f"{node}: Slurm registration not as wanted: {'; '.join(problems)}")
        return {**props, **self._seen(o)}

    def create(self, props: dict[str, Any]) -> CreateResult:
        return CreateResult(f"{props['node']}@{props['partition']}", self._verified(props))

    def read(self, id_: str, props: dict[str, Any]) -> ReadResult:
        o = engine.observed_in_slurm(self.settings, str(props.get("node")))
        if o is None or o.slurm is None:
            return ReadResult("", {})  # Slurm does not list it (or racklife does not know it): gone
        return ReadResult(id_, {**props, **self._seen(o)})

    def update(self, _id: str, _olds: dict[str, Any], news: dict[str, Any]) -> UpdateResult:
        return UpdateResult(self._verified(news))

    def delete(self, _id: str, props: dict[str, Any]) -> None:
        node = str(props["node"])
        o = engine.observed_in_slurm(self.settings, node)
        if o is not None and o.slurm is not None and o.slurm.jobs:
            raise engine.FleetError(f"{node}: Slurm job(s) {', '.join(o.slurm.jobs)} running on it: it leaves "
                                    "Slurm's configuration only when idle")
        if o is not None and o.state is State.IN_SERVICE and o.slurm is not None:
            engine.leave(self.settings, node, f"pulumi: {node} leaves Slurm's configuration")
        pulumi.log.info(engine.unregister_slurm(self.settings, node))


def _registration_problems(o: Observation | None, partition: str) -> Sequence[str]:
    if o is None:
        return ["racklife's store does not know the node"]
    if o.slurm is None:
        why = o.errors.get(Source.SLURM)
        return [f"Slurm does not list it{f' ({why})' if why else ''}"]
    out = []
    if partition not in o.slurm.partitions:
        out.append(f"not in partition {partition} (in: {', '.join(o.slurm.partitions) or 'none'})")
    if o.slurm.owner == "other":
        out.append(f"held by someone else: {o.slurm.state} ({o.slurm.reason})")
    return out


class BareMetalNode(Resource, module="racklife", name="BareMetalNode"):
    """A server from the inventory, built to ``accepted`` (the acceptance gate for its pool membership)."""

    node: pulumi.Output[str]
    state: pulumi.Output[str]
    acceptance_record: pulumi.Output[str]

    def __init__(self, name: str, props: Mapping[str, Any], opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(BareMetalNodeProvider(), name,
                         {**props, "state": None, "acceptance_record": None, "observed_pool": None}, opts)


class PoolMembership(Resource, module="racklife", name="PoolMembership"):
    """The pool a node serves in; its ``acceptance_record`` input is the node's output (the gate)."""

    node: pulumi.Output[str]
    pool: pulumi.Output[str]
    in_service: pulumi.Output[bool]

    def __init__(self, name: str, props: Mapping[str, Any], opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(PoolMembershipProvider(), name, {**props, "in_service": None, "state": None}, opts)


class SlurmNodeRegistration(Resource, module="racklife", name="SlurmNodeRegistration"):
    """A training node as slurmctld lists it, in its partition."""

    node: pulumi.Output[str]
    partition: pulumi.Output[str]
    slurm_state: pulumi.Output[str]

    def __init__(self, name: str, props: Mapping[str, Any], opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(SlurmNodeRegistrationProvider(), name,
                         {**props, "slurm_state": None, "partitions": None, "owner": None}, opts)

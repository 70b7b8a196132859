"""The cluster as Pulumi components, assembled from the inventory: racks of nodes, pools, schedulers.

``Cluster`` builds, per inventory node, a ``BareMetalNode`` (in its
``Rack``) and a ``PoolMembership`` whose ``acceptance_record`` input is the
node's output of that name: the membership cannot be created before the node
is accepted, and Pulumi's dependency graph shows the gate. Training nodes get
a ``SlurmNodeRegistration`` (in ``SlurmCluster``) after their membership;
inference pools get the GPU Operator and the pool's labels and taints
(``InferenceCluster``); ``SlinkySlurm`` (optional) runs Slurm in Kubernetes.
Components never read configuration: ``__main__.py`` reads it once and
passes the values in.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pulumi
from pydantic import BaseModel

from lifecycle.model.inventory import Inventory, Node
from stacks.racklife_pulumi.kube import InferenceCluster, InferenceClusterArgs, SlinkySlurm, SlinkySlurmArgs
from stacks.racklife_pulumi.providers import BareMetalNode, PoolMembership, SlurmNodeRegistration

TOKEN = "racklife:index:"  # noqa: S105 (Pulumi type tokens)


def node_props(inv: Inventory, node: Node) -> dict[str, Any]:
    """A node's inventory entry and its context, as a node resource's inputs (references, never secrets).

    Without the fields left unset: Pulumi drops null inputs, so a diff of old and new inputs would
    otherwise differ by them.
    """
    rack = next(r for r in inv.racks if r.name == node.rack)
    images = [i for i in inv.images if i.name == node.image]
    return {"node": node.name, "site": _data(inv.site), "rack": _data(rack),
            "pools": {k: _data(v) for k, v in inv.pools.items()},
            "images": [_data(i) for i in images], "spec": _data(node)}


def _data(model: BaseModel) -> dict[str, Any]:
    return model.model_dump(mode="json", exclude_none=True)


@dataclass(frozen=True)
class RackArgs:
    inventory: Inventory
    rack: str


class Rack(pulumi.ComponentResource):
    """One rack's servers, each a ``BareMetalNode``."""

    nodes: dict[str, BareMetalNode]

    def __init__(self, name: str, args: RackArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(f"{TOKEN}Rack", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        self.nodes = {n.name: BareMetalNode(f"{name}-{n.name}", node_props(args.inventory, n), child)
                      for n in args.inventory.nodes if n.rack == args.rack}
        self.register_outputs({"nodes": {k: v.state for k, v in self.nodes.items()}})


@dataclass(frozen=True)
class SlurmClusterArgs:
    inventory: Inventory
    memberships: Mapping[str, PoolMembership]  # node -> its membership (training nodes only are used)


class SlurmCluster(pulumi.ComponentResource):
    """Slurm's side of the training pools: each member's registration in its partition."""

    registrations: dict[str, SlurmNodeRegistration]

    def __init__(self, name: str, args: SlurmClusterArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(f"{TOKEN}SlurmCluster", name, None, opts)
        inv = args.inventory
        self.registrations = {}
        for n in inv.nodes:
            pool = inv.pool(n.pool)
            if pool.scheduler != "slurm" or n.name not in args.memberships:
                continue
            member = args.memberships[n.name]
            self.registrations[n.name] = SlurmNodeRegistration(
                f"{name}-{n.name}", {"node": n.name, "partition": pool.partition, "membership": member.pool},
                pulumi.ResourceOptions(parent=self, depends_on=[member]))
        self.register_outputs({"registrations": {k: v.slurm_state for k, v in self.registrations.items()}})


@dataclass(frozen=True)
class ClusterArgs:
    inventory: Inventory
    kubeconfig: str | None = None  # a path; None: no Kubernetes objects (GPU Operator, labels, Slinky)
    gpu_operator: bool = True
    slinky: bool = False
    slinky_secrets: Mapping[str, pulumi.Input[str]] = field(default_factory=dict)  # secret name -> value


class Cluster(pulumi.ComponentResource):
    """The whole site from the inventory: racks, pool memberships behind each node's acceptance, schedulers."""

    racks: dict[str, Rack]
    memberships: dict[str, PoolMembership]

    def __init__(self, name: str, args: ClusterArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(f"{TOKEN}Cluster", name, None, opts)
        inv = args.inventory
        child = pulumi.ResourceOptions(parent=self)
        self.racks = {r.name: Rack(f"{name}-{r.name}", RackArgs(inv, r.name), child) for r in inv.racks}
        nodes = {k: v for rack in self.racks.values() for k, v in rack.nodes.items()}
        self.memberships = {}
        for n in inv.nodes:
            built = nodes[n.name]
            props = {**node_props(inv, n), "pool": n.pool, "acceptance_record": built.acceptance_record}
            self.memberships[n.name] = PoolMembership(f"{name}-{n.name}-pool", props,
                                                      pulumi.ResourceOptions(parent=self, depends_on=[built]))
        self.slurm = SlurmCluster(f"{name}-slurm", SlurmClusterArgs(inv, self.memberships), child)
        self.inference: InferenceCluster | None = None
        self.slinky: SlinkySlurm | None = None
        if args.kubeconfig is not None:
            self.inference = InferenceCluster(f"{name}-inference", InferenceClusterArgs(
                inv, self.memberships, args.kubeconfig, args.gpu_operator), child)
            if args.slinky:
                self.slinky = SlinkySlurm(f"{name}-slinky", SlinkySlurmArgs(
                    inv, args.kubeconfig, args.slinky_secrets), child)
        self.register_outputs({
            "nodes": {k: v.state for k, v in nodes.items()},
            "pools": {k: v.pool for k, v in self.memberships.items()},
            "in_service": {k: v.in_service for k, v in self.memberships.items()},
        })

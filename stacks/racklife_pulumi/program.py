"""The stack program's one reading of configuration, and the cluster it builds from it.

``stacks/cluster/__main__.py`` calls :func:`main`; tests call :func:`build`
with a :class:`StackConfig` of their own (Pulumi's config is not there in a
unit test). Only here is configuration read; components take values.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pulumi

from lifecycle.model.inventory import load_inventory
from stacks.racklife_pulumi.components import Cluster, ClusterArgs

SLINKY_SECRET_KEYS = {"slurm-auth-slurm": "slinkySlurmKey", "slurm-auth-jwt": "slinkyJwtKey",
                      "slurm-sssd-conf": "slinkySssdConf", "slurm-mariadb-password": "slinkyDbPassword"}
"""Slinky's Secret names (release ``slurm``) and the secret config keys their values come from."""


@dataclass(frozen=True)
class StackConfig:
    inventory: Path
    kubeconfig: str | None = None
    gpu_operator: bool = True
    slinky: bool = False
    slinky_secrets: Mapping[str, pulumi.Input[str]] = field(default_factory=dict)


def read_config(cfg: pulumi.Config) -> StackConfig:
    slinky = cfg.get_bool("slinky") or False
    secrets = {name: value for name, key in SLINKY_SECRET_KEYS.items()
               if (value := cfg.get_secret(key)) is not None} if slinky else {}
    # racklife:kubeconfig also reaches the providers (their Kubernetes joins); kubernetesObjects: false keeps
    # the stack's own Kubernetes objects out (the lab's stand-in serves no server-side apply).
    objects = cfg.get_bool("kubernetesObjects") is not False
    return StackConfig(Path(cfg.require("inventory")), cfg.get("kubeconfig") if objects else None,
                       cfg.get_bool("gpuOperator") is not False, slinky, secrets)


def build(cfg: StackConfig) -> Cluster:
    inv = load_inventory(cfg.inventory)
    cluster = Cluster(inv.site.name, ClusterArgs(inv, cfg.kubeconfig, cfg.gpu_operator, cfg.slinky,
                                                 cfg.slinky_secrets))
    pulumi.export("pools", {k: v.pool for k, v in cluster.memberships.items()})
    pulumi.export("in_service", {k: v.in_service for k, v in cluster.memberships.items()})
    return cluster


def main() -> None:
    build(read_config(pulumi.Config("racklife")))

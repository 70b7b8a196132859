"""Slinky slurm-operator resources for the training pools, from the inventory.

With Slinky, Slurm runs in Kubernetes: ``slurmctld`` is a ``Controller``,
each set of compute nodes a ``NodeSet`` whose pods run ``slurmd``, plus a
``LoginSet`` (login pods with sackd/sshd), a ``RestApi`` (slurmrestd) and an
``Accounting`` (slurmdbd). racklife renders them as typed objects (the same
shape the project's ``slurm`` Helm chart v1.2.1 produces), from the facts the
inventory holds:

- one NodeSet per training pool (``scheduler: slurm``), in DaemonSet mode:
  one slurmd pod on every Kubernetes node labelled ``racklife.io/pool=<pool>``
  (the label racklife's pool change sets), tolerating the pool's taints;
  the pod's hostname prefix is the pool's name, which Slinky uses as the
  Slurm NodeSet name;
- the GRES from the pool's SKU: slurmd's ``--conf "Gres=gpu:h100:8
  Features=h100-sxm-8,h100"``, and a container limit of ``nvidia.com/gpu: 8``
  (the device plugin of the GPU Operator hands the pod every GPU of its node);
  a pool mixing SKUs cannot be one NodeSet and is refused;
- the partitions, as in ``racklife slurm render``: one per pool ``partition``
  (pools sharing a partition share it), the largest one the default;
- ``gres.conf`` with ``AutoDetect=nvidia`` in a ConfigMap the Controller
  mounts, and ``GresTypes=gpu``.

Keys are never rendered: the Controller, Accounting and LoginSet refer to
Secrets by name, and ``Rendered.secrets`` lists each one the stack must
create from the site's secret store before these objects are applied.
Slinky's slurmd does not tolerate racklife's maintenance taint on purpose: a
node racklife holds cordoned gets no new slurmd pod (Slinky itself drains the
Slurm node of a cordoned Kubernetes node).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lifecycle.drivers.kube.manifests.common import (
    MANAGED_BY,
    RenderError,
    RenderProblem,
    pool_taints,
    toleration,
)
from lifecycle.drivers.kube.manifests.meta import dns1123_label
from lifecycle.drivers.kube.manifests.objects import Manifest, Rendered, SecretKeyRef
from lifecycle.drivers.kube.types import GPU_RESOURCE, POOL_LABEL
from lifecycle.model.inventory import Inventory, Node
from lifecycle.model.skus import SKUS

API_VERSION = "slinky.slurm.net/v1beta1"
RELEASE = "v1.2.1"
SLURM_TAG = "26.05-ubuntu26.04"  # the images of the slurm chart v1.2.1
_LINUX = {"kubernetes.io/os": "linux"}


@dataclass(frozen=True)
class SlinkyOptions:
    """Site choices the inventory does not hold. Names follow the chart's (``slurm``, ``slurm-worker-…``)."""

    namespace: str = "slurm"
    release: str = "slurm"
    registry: str = "ghcr.io/slinkyproject"
    slurm_tag: str = SLURM_TAG
    sidecar_image: str = "docker.io/library/alpine:latest"
    """The logfile and initconf sidecars (the chart's default image)."""
    login_replicas: int = 1
    restapi_replicas: int = 1
    accounting: bool = True
    accounting_db_host: str = "mariadb"
    accounting_db_port: int = 3306
    accounting_db_user: str = "slurm"
    accounting_db_name: str = "slurm_acct_db"
    controller_storage: str = "4Gi"


def _container(image: str, **extra: Any) -> dict[str, Any]:
    return {"image": image, "imagePullPolicy": "IfNotPresent", **extra}


def _template(node_selector: dict[str, str], tolerations: list[dict[str, str]] | None = None,
              hostname: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"nodeSelector": node_selector}
    if tolerations:
        spec["tolerations"] = tolerations
    if hostname:
        spec["hostname"] = hostname
    return {"metadata": {"labels": dict(MANAGED_BY)}, "spec": spec}


def _key(ref: SecretKeyRef) -> dict[str, str]:
    return {"name": ref.name, "key": ref.key}


@dataclass(frozen=True)
class _Secrets:
    slurm: SecretKeyRef
    jwt: SecretKeyRef
    sssd: SecretKeyRef
    db: SecretKeyRef

    @classmethod
    def of(cls, opts: SlinkyOptions) -> _Secrets:
        ns, rel = opts.namespace, opts.release
        return cls(
            SecretKeyRef(ns, f"{rel}-auth-slurm", "slurm.key", "auth/slurm key shared by every Slurm daemon"),
            SecretKeyRef(ns, f"{rel}-auth-jwt", "jwt.key", "auth/jwt HS256 key (slurmrestd, sackd)"),
            SecretKeyRef(ns, f"{rel}-sssd-conf", "sssd.conf", "sssd.conf of the login pods (the site's users)"),
            SecretKeyRef(ns, f"{rel}-mariadb-password", "password", "slurmdbd's database password"),
        )


def _training_pools(inv: Inventory) -> tuple[dict[str, list[Node]], list[RenderProblem]]:
    pools: dict[str, list[Node]] = {}
    problems: list[RenderProblem] = []
    for name in sorted(inv.pools):
        if inv.pools[name].scheduler != "slurm":
            continue
        if err := dns1123_label(name):
            problems.append(RenderProblem(f"pools.{name}", f"cannot name a NodeSet after this pool: {err}"))
            continue
        pools[name] = sorted((n for n in inv.nodes if n.pool == name), key=lambda n: n.name)
    return pools, problems


def _nodeset(inv: Inventory, opts: SlinkyOptions, pool: str, nodes: list[Node],
             problems: list[RenderProblem]) -> Manifest | None:
    skus = sorted({n.sku for n in nodes})
    if len(skus) != 1:
        if skus:
            problems.append(RenderProblem(
                f"pools.{pool}", f"mixes SKUs {', '.join(skus)}: one NodeSet has one GRES; split the pool by SKU"))
        return None
    sku = SKUS[skus[0]]
    taints, bad = pool_taints(inv, pool)
    problems += bad
    slurmd = _container(f"{opts.registry}/slurmd:{opts.slurm_tag}",
                        resources={"limits": {GPU_RESOURCE: sku.gpu_count}})
    spec = {
        "controllerRef": {"name": opts.release},
        "scalingMode": "DaemonSet",
        "extraConf": f"Gres=gpu:{sku.gres_type}:{sku.gpu_count} Features={sku.name},{sku.gres_type}",
        "partition": {"enabled": False},  # partitions are the Controller's (pools may share one)
        "slurmd": slurmd,
        "logfile": _container(opts.sidecar_image),
        "template": _template({POOL_LABEL: pool, **_LINUX}, [toleration(t) for t in taints], f"{pool}-"),
    }
    labels = {**MANAGED_BY, POOL_LABEL: pool}
    return Manifest.new(API_VERSION, "NodeSet", f"{opts.release}-worker-{pool}", opts.namespace, labels, spec=spec)


def _partitions(inv: Inventory, pools: dict[str, list[Node]]) -> list[str]:
    """``PartitionName=`` lines over Slurm NodeSets (named after pools), the largest partition the default."""
    members: dict[str, list[str]] = {}
    sizes: dict[str, int] = {}
    for pool, nodes in pools.items():
        part = inv.pools[pool].partition
        if part and nodes:
            members.setdefault(part, []).append(pool)
            sizes[part] = sizes.get(part, 0) + len(nodes)
    default = min(sizes, key=lambda p: (-sizes[p], p), default=None)
    return [
        f"PartitionName={part} Nodes={','.join(sorted(sets))}" + (" Default=YES" if part == default else "")
        + " MaxTime=INFINITE State=UP"
        for part, sets in sorted(members.items())
    ]


def render_slinky(inv: Inventory, opts: SlinkyOptions | None = None) -> Rendered:
    opts = opts or SlinkyOptions()
    secrets = _Secrets.of(opts)
    pools, problems = _training_pools(inv)
    nodesets = [m for pool, nodes in pools.items() if (m := _nodeset(inv, opts, pool, nodes, problems))]
    if problems:
        raise RenderError(problems)
    labels = {**MANAGED_BY, "racklife.io/site": inv.site.name}
    ns, rel, reg, tag = opts.namespace, opts.release, opts.registry, opts.slurm_tag
    config = Manifest.new("v1", "ConfigMap", f"{rel}-config", ns, labels, data={"gres.conf": "AutoDetect=nvidia\n"})
    controller: dict[str, Any] = {
        "clusterName": inv.site.name,
        "slurmKeyRef": _key(secrets.slurm),
        "jwtKeyRef": _key(secrets.jwt),
        "extraConf": "\n".join(["GresTypes=gpu", *_partitions(inv, pools)]),
        "configFileRefs": [{"name": config.name}],
        "slurmctld": _container(f"{reg}/slurmctld:{tag}"),
        "reconfigure": _container(f"{reg}/slurmctld:{tag}"),
        "logfile": _container(opts.sidecar_image),
        "template": _template(_LINUX),
        "persistence": {"enabled": True, "accessModes": ["ReadWriteOnce"],
                        "resources": {"requests": {"storage": opts.controller_storage}}},
    }
    objects = [Manifest.new("v1", "Namespace", ns, labels=MANAGED_BY), config]
    used = [secrets.slurm, secrets.jwt, secrets.sssd]
    if opts.accounting:
        controller["accountingRef"] = {"name": rel}
        objects.append(Manifest.new(API_VERSION, "Accounting", rel, ns, labels, spec={
            "slurmKeyRef": _key(secrets.slurm),
            "jwtKeyRef": _key(secrets.jwt),
            "slurmdbd": _container(f"{reg}/slurmdbd:{tag}"),
            "template": _template(_LINUX),
            "storageConfig": {"host": opts.accounting_db_host, "port": opts.accounting_db_port,
                              "database": opts.accounting_db_name, "username": opts.accounting_db_user,
                              "passwordKeyRef": _key(secrets.db)},
        }))
        used.append(secrets.db)
    objects.append(Manifest.new(API_VERSION, "Controller", rel, ns, labels, spec=controller))
    objects += nodesets
    objects.append(Manifest.new(API_VERSION, "LoginSet", f"{rel}-login", ns, labels, spec={
        "controllerRef": {"name": rel},
        "sssdConfRef": _key(secrets.sssd),
        "replicas": opts.login_replicas,
        "login": _container(f"{reg}/login:{tag}"),
        "initconf": _container(opts.sidecar_image),
        "template": _template(_LINUX),
    }))
    objects.append(Manifest.new(API_VERSION, "RestApi", rel, ns, labels, spec={
        "controllerRef": {"name": rel},
        "replicas": opts.restapi_replicas,
        "slurmrestd": _container(f"{reg}/slurmrestd:{tag}"),
        "template": _template(_LINUX),
    }))
    return Rendered(tuple(objects), tuple(sorted(used)))

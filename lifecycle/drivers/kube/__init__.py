"""Kubernetes driver: node reads, cordon with ownership, pool labels and taints, PDB-aware drain, watch.

``KubeApiDriver`` (in ``api``, over lightkube) is imported from its module so
that importing the interface does not pull the vendor client.
"""

from lifecycle.drivers.kube.base import Conflict, KubeDriver, NotOurs
from lifecycle.drivers.kube.fake import FakeKubeDriver
from lifecycle.drivers.kube.types import (
    CORDON_REASON,
    CORDONED_BY,
    MAINTENANCE_TAINT,
    POOL_LABEL,
    CordonOwner,
    CordonResult,
    DrainReport,
    EvictionBackoff,
    KubeNode,
    KubePod,
    PoolChange,
    Taint,
    WatchEvent,
)

__all__ = [
    "CORDONED_BY",
    "CORDON_REASON",
    "MAINTENANCE_TAINT",
    "POOL_LABEL",
    "Conflict",
    "CordonOwner",
    "CordonResult",
    "DrainReport",
    "EvictionBackoff",
    "FakeKubeDriver",
    "KubeDriver",
    "KubeNode",
    "KubePod",
    "NotOurs",
    "PoolChange",
    "Taint",
    "WatchEvent",
]

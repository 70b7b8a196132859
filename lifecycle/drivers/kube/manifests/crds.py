"""The CustomResourceDefinitions racklife renders objects for, shipped with the package.

The CRDs are byte-for-byte copies of the releases named in ``crds/SOURCES.md``
(NVIDIA GPU Operator v26.7.0, Slinky slurm-operator v1.2.1), so that a check
runs offline, on CI and on an operator's laptop alike, against the exact
schema the cluster will enforce. A test compares them with the project's
shared copies and their recorded digests.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any, Literal

import yaml

CRD_FILES = (
    "nvidia.com_clusterpolicies.yaml",
    "slinky.slurm.net_accountings.yaml",
    "slinky.slurm.net_controllers.yaml",
    "slinky.slurm.net_loginsets.yaml",
    "slinky.slurm.net_nodesets.yaml",
    "slinky.slurm.net_restapis.yaml",
    "slinky.slurm.net_tokens.yaml",
)


@dataclass(frozen=True)
class Crd:
    """One served version of a CRD: its kind, scope and OpenAPI v3 schema."""

    group: str
    version: str
    kind: str
    plural: str
    scope: Literal["Namespaced", "Cluster"]
    schema: dict[str, Any]
    file: str

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"


def crd_text(file: str) -> str:
    return (resources.files(__package__) / "crds" / file).read_text(encoding="utf-8")


@cache
def load_crds() -> dict[tuple[str, str], Crd]:
    """``(apiVersion, kind)`` → the CRD version that serves it."""
    found: dict[tuple[str, str], Crd] = {}
    for file in CRD_FILES:
        doc = yaml.safe_load(crd_text(file))
        spec = doc["spec"]
        for version in spec["versions"]:
            if not version.get("served", False):
                continue
            crd = Crd(
                group=spec["group"], version=version["name"], kind=spec["names"]["kind"],
                plural=spec["names"]["plural"], scope=spec["scope"],
                schema=version["schema"]["openAPIV3Schema"], file=file,
            )
            found[(crd.api_version, crd.kind)] = crd
    return found


def find_crd(api_version: str, kind: str) -> Crd | None:
    return load_crds().get((api_version, kind))

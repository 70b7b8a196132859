"""What the GPU Operator and Slinky renderers share: pool taints as tolerations, labels, render errors."""

from __future__ import annotations

from dataclasses import dataclass

from lifecycle.drivers.kube.types import MAINTENANCE_TAINT, Taint
from lifecycle.model.inventory import Inventory

MANAGED_BY = {"app.kubernetes.io/managed-by": "racklife"}


@dataclass(frozen=True, order=True)
class RenderProblem:
    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


class RenderError(Exception):
    """The inventory cannot be rendered into these objects; ``problems`` says where and why."""

    def __init__(self, problems: list[RenderProblem]) -> None:
        self.problems = sorted(problems)
        super().__init__("; ".join(str(p) for p in self.problems))


def pool_taints(inv: Inventory, pool: str) -> tuple[list[Taint], list[RenderProblem]]:
    taints: list[Taint] = []
    problems: list[RenderProblem] = []
    for i, text in enumerate(inv.pool(pool).taints):
        try:
            taints.append(Taint.parse(text))
        except ValueError as exc:
            problems.append(RenderProblem(f"pools.{pool}.taints[{i}]", str(exc)))
    return taints, problems


def toleration(taint: Taint) -> dict[str, str]:
    """The toleration that lets a pod onto nodes with ``taint`` (and only that value of it)."""
    if taint.value:
        return {"key": taint.key, "operator": "Equal", "value": taint.value, "effect": taint.effect}
    return {"key": taint.key, "operator": "Exists", "effect": taint.effect}


MAINTENANCE_TOLERATION = {"key": MAINTENANCE_TAINT, "operator": "Exists", "effect": "NoSchedule"}
"""Node agents keep running, and start, on a node racklife holds cordoned (a joining node is)."""

"""Kubernetes API semantics as pure functions: selectors, merge patches, PodDisruptionBudget arithmetic.

Why it exists: the fake driver and the lab's API stand-in must answer a pod
list or an eviction exactly as kube-apiserver would, and they must agree with
each other. Both take these rules from here: RFC 7386 merge patches, the selector grammar
(``app=web,tier!=db,env in (a,b),!canary``), the fields each resource lets a
client select on, and how the disruption controller turns a budget into
``disruptionsAllowed``. No I/O, no vendor SDK.
"""

from __future__ import annotations

import copy
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# Fields kube-apiserver accepts in a fieldSelector, per resource (others answer 400).
SELECTABLE_FIELDS: dict[str, frozenset[str]] = {
    "pods": frozenset({
        "metadata.name", "metadata.namespace", "spec.nodeName", "spec.restartPolicy",
        "spec.schedulerName", "spec.serviceAccountName", "status.phase", "status.podIP",
        "status.nominatedNodeName",
    }),
    "nodes": frozenset({"metadata.name", "spec.unschedulable"}),
}
DEFAULT_FIELDS = frozenset({"metadata.name", "metadata.namespace"})

_KEY = r"(?:[A-Za-z0-9.-]+/)?[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?"
_SET = re.compile(rf"^(?P<key>{_KEY})\s+(?P<op>in|notin)\s*\((?P<values>[^)]*)\)$")
_EQ = re.compile(rf"^(?P<key>{_KEY})\s*(?P<op>==|!=|=)\s*(?P<value>[A-Za-z0-9._-]*)$")
_EXISTS = re.compile(rf"^(?P<neg>!?)\s*(?P<key>{_KEY})$")
_FIELD = re.compile(r"^(?P<key>[A-Za-z.]+)\s*(?P<op>==|!=|=)\s*(?P<value>[^,]*)$")


def merge_patch(base: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch: maps merge, ``null`` deletes, lists and scalars replace.

    For the Node fields racklife writes (labels, annotations, ``unschedulable``,
    ``taints``, which has no patch strategy) a strategic merge patch does the same.
    """
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    out = dict(base) if isinstance(base, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


class SelectorError(ValueError):
    """A selector kube-apiserver would refuse with 400 Bad Request."""


@dataclass(frozen=True)
class Requirement:
    key: str
    op: str
    """``=``, ``!=``, ``in``, ``notin``, ``exists``, ``!``."""
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        value = labels.get(self.key)
        if self.op == "=":
            return present and value == self.values[0]
        if self.op == "!=":
            return not present or value != self.values[0]
        if self.op == "in":
            return present and value in self.values
        if self.op == "notin":
            return not present or value not in self.values
        if self.op == "exists":
            return present
        return not present


def _split(text: str) -> list[str]:
    """Split on commas outside parentheses: ``a in (x,y),b`` → ``['a in (x,y)', 'b']``."""
    parts: list[str] = []
    depth = 0
    current = ""
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(current.strip())
            current = ""
        else:
            current += ch
    if current.strip():
        parts.append(current.strip())
    return parts


def parse_labels(text: str | None) -> tuple[Requirement, ...]:
    """Parse a labelSelector string; the empty selector matches everything."""
    if not text:
        return ()
    out: list[Requirement] = []
    for part in _split(text):
        if m := _SET.match(part):
            values = tuple(v.strip() for v in m["values"].split(",") if v.strip())
            out.append(Requirement(m["key"], m["op"], values))
        elif m := _EQ.match(part):
            op = "=" if m["op"] in ("=", "==") else "!="
            out.append(Requirement(m["key"], op, (m["value"],)))
        elif m := _EXISTS.match(part):
            out.append(Requirement(m["key"], "!" if m["neg"] else "exists"))
        else:
            raise SelectorError(f"unable to parse requirement {part!r} in label selector {text!r}")
    return tuple(out)


def from_label_selector(selector: Mapping[str, Any] | None) -> tuple[Requirement, ...]:
    """A ``LabelSelector`` object (``matchLabels`` + ``matchExpressions``) as requirements."""
    if not selector:
        return ()
    out = [Requirement(k, "=", (str(v),)) for k, v in (selector.get("matchLabels") or {}).items()]
    ops = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!"}
    for expr in selector.get("matchExpressions") or []:
        op = ops.get(str(expr.get("operator")))
        if op is None:
            raise SelectorError(f"unknown label selector operator {expr.get('operator')!r}")
        out.append(Requirement(str(expr["key"]), op, tuple(str(v) for v in expr.get("values") or ())))
    return tuple(out)


def match_labels(requirements: tuple[Requirement, ...], labels: Mapping[str, str] | None) -> bool:
    have = labels or {}
    return all(r.matches(have) for r in requirements)


def parse_fields(text: str | None, resource: str) -> tuple[Requirement, ...]:
    """Parse a fieldSelector; fields the resource does not index are refused, as the API does."""
    if not text:
        return ()
    allowed = SELECTABLE_FIELDS.get(resource, DEFAULT_FIELDS)
    out: list[Requirement] = []
    for part in _split(text):
        m = _FIELD.match(part)
        if m is None:
            raise SelectorError(f"invalid field selector {part!r}")
        if m["key"] not in allowed:
            raise SelectorError(f'field label not supported: {m["key"]}')
        out.append(Requirement(m["key"], "=" if m["op"] in ("=", "==") else "!=", (m["value"],)))
    return tuple(out)


def field_value(obj: Mapping[str, Any], path: str) -> str:
    """A field as the API compares it: missing is ``""``, booleans are ``true``/``false``."""
    value: Any = obj
    for part in path.split("."):
        value = value.get(part) if isinstance(value, Mapping) else None
    if value is None:
        return "false" if path == "spec.unschedulable" else ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def match_fields(requirements: tuple[Requirement, ...], obj: Mapping[str, Any]) -> bool:
    return all(r.matches({r.key: field_value(obj, r.key)}) for r in requirements)


# ---------------------------------------------------------------- disruption budgets


@dataclass(frozen=True)
class BudgetStatus:
    """What the disruption controller writes into ``PodDisruptionBudget.status``."""

    expected_pods: int
    current_healthy: int
    desired_healthy: int
    disruptions_allowed: int

    def as_status(self, generation: int = 1) -> dict[str, int]:
        return {
            "observedGeneration": generation,
            "expectedPods": self.expected_pods,
            "currentHealthy": self.current_healthy,
            "desiredHealthy": self.desired_healthy,
            "disruptionsAllowed": self.disruptions_allowed,
        }


def _count(value: int | str, expected: int) -> int:
    """An IntOrString budget figure: ``2`` or ``"50%"`` of the expected pods, rounded up."""
    if isinstance(value, int):
        return value
    text = value.strip()
    if text.endswith("%"):
        return math.ceil(expected * int(text[:-1]) / 100)
    return int(text)


def pod_is_healthy(pod: Mapping[str, Any]) -> bool:
    """Not terminating and its ``Ready`` condition ``True`` (the disruption controller's ``currentHealthy``)."""
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    status = pod.get("status") or {}
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])


def budget_status(pdb: Mapping[str, Any], pods: Sequence[Mapping[str, Any]],
                  scale: int | None = None) -> BudgetStatus:
    """The disruption controller's arithmetic over the pods the budget selects (``pods`` are already selected).

    ``scale`` is the owning controllers' replica count, which the controller
    uses as ``expectedPods`` for ``maxUnavailable`` and for a percentage
    ``minAvailable``; an integer ``minAvailable`` expects the selected pods.
    Without ``scale`` (the fake driver has no controllers) the selected pods
    that are not Succeeded or Failed stand in for it.
    """
    spec = pdb.get("spec") or {}
    live = [p for p in pods if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]
    healthy = sum(1 for p in pods if pod_is_healthy(p))
    scaled = len(live) if scale is None else scale
    if spec.get("maxUnavailable") is not None:
        expected = scaled
        desired = max(0, expected - _count(spec["maxUnavailable"], expected))
    elif isinstance(spec.get("minAvailable"), str):
        expected = scaled
        desired = _count(spec["minAvailable"], expected)
    elif spec.get("minAvailable") is not None:
        expected, desired = len(pods), int(spec["minAvailable"])
    else:
        expected, desired = 0, 0  # policy/v1 defaults neither figure: every healthy pod may go
    return BudgetStatus(expected, healthy, desired, max(0, healthy - desired))


def budget_violation(name: str, status: BudgetStatus) -> str:
    """kube-apiserver's cause message when an eviction would break a budget."""
    return (
        f"The disruption budget {name} needs {status.desired_healthy} healthy pods "
        f"and has {status.current_healthy} currently"
    )

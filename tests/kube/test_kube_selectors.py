"""Selector grammar and disruption-budget arithmetic shared by the stand-in and the fake."""

from __future__ import annotations

import pytest

from lifecycle.drivers.kube import selectors as sel
from lifecycle.drivers.kube.types import Taint


@pytest.mark.parametrize(("selector", "labels", "expected"), [
    ("", {}, True),
    ("app=web", {"app": "web"}, True),
    ("app==web", {"app": "db"}, False),
    ("app!=web", {}, True),
    ("tier in (a, b),app", {"tier": "b", "app": "x"}, True),
    ("tier notin (a,b)", {"tier": "a"}, False),
    ("!canary", {"canary": "1"}, False),
    ("racklife.io/pool=inference", {"racklife.io/pool": "inference"}, True),
])
def test_label_selectors(selector: str, labels: dict[str, str], expected: bool) -> None:
    assert sel.match_labels(sel.parse_labels(selector), labels) is expected


def test_bad_selectors_are_refused() -> None:
    with pytest.raises(sel.SelectorError):
        sel.parse_labels("app=(web")
    with pytest.raises(sel.SelectorError, match="field label not supported"):
        sel.parse_fields("spec.nodeName=x,metadata.uid=y", "pods")
    with pytest.raises(sel.SelectorError):
        sel.from_label_selector({"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["1"]}]})


def test_label_selector_objects() -> None:
    reqs = sel.from_label_selector({"matchLabels": {"app": "web"},
                                    "matchExpressions": [{"key": "env", "operator": "In", "values": ["prod"]}]})
    assert sel.match_labels(reqs, {"app": "web", "env": "prod"})
    assert not sel.match_labels(reqs, {"app": "web", "env": "dev"})


def _pods(*phases: str) -> list[dict[str, object]]:
    return [{"metadata": {"name": f"p{i}"}, "status": {"phase": p, "conditions": [
        {"type": "Ready", "status": "True" if p == "Running" else "False"}]}} for i, p in enumerate(phases)]


@pytest.mark.parametrize(("spec", "phases", "allowed", "desired"), [
    ({"minAvailable": 2}, ("Running",) * 3, 1, 2),
    ({"minAvailable": "50%"}, ("Running",) * 3, 1, 2),  # 1.5 rounds up
    ({"maxUnavailable": 1}, ("Running", "Running", "Pending"), 0, 2),
    ({"maxUnavailable": "34%"}, ("Running",) * 3, 2, 1),  # 1.02 rounds up to 2 unavailable
    ({"minAvailable": 1}, ("Succeeded", "Running"), 0, 1),  # finished pods are not expected
    ({}, ("Running",), 1, 0),
])
def test_budget_arithmetic(spec: dict[str, object], phases: tuple[str, ...], allowed: int, desired: int) -> None:
    status = sel.budget_status({"spec": spec}, _pods(*phases))
    assert (status.disruptions_allowed, status.desired_healthy) == (allowed, desired)


@pytest.mark.parametrize(("spec", "scale", "allowed", "expected"), [
    ({"maxUnavailable": 1}, 4, 0, 4),  # 3 healthy of 4 replicas: the one missing spends the budget
    ({"maxUnavailable": 1}, 3, 1, 3),
    ({"minAvailable": "50%"}, 6, 0, 6),  # 3 of 6 must stay
    ({"minAvailable": 2}, 6, 1, 3),  # an integer minAvailable expects the selected pods, not the scale
])
def test_budget_expects_the_owners_scale(spec: dict[str, object], scale: int, allowed: int, expected: int) -> None:
    status = sel.budget_status({"spec": spec}, _pods("Running", "Running", "Running"), scale)
    assert (status.disruptions_allowed, status.expected_pods) == (allowed, expected)


def test_unready_and_terminating_pods_are_not_healthy() -> None:
    unready = {"metadata": {}, "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "False"}]}}
    going = {"metadata": {"deletionTimestamp": "now"}, "status": {"phase": "Running", "conditions": [
        {"type": "Ready", "status": "True"}]}}
    unreported = {"metadata": {}, "status": {"phase": "Running"}}
    assert not sel.pod_is_healthy(unready)
    assert not sel.pod_is_healthy(going)
    assert not sel.pod_is_healthy(unreported)  # no Ready condition is not Ready


def test_merge_patch() -> None:
    base = {"a": {"b": 1, "c": 2}, "l": [1, 2]}
    assert sel.merge_patch(base, {"a": {"b": None, "d": 3}, "l": [3]}) == {"a": {"c": 2, "d": 3}, "l": [3]}
    assert base == {"a": {"b": 1, "c": 2}, "l": [1, 2]}  # the input is not changed


@pytest.mark.parametrize(("text", "taint"), [
    ("nvidia.com/gpu=present:NoSchedule", Taint("nvidia.com/gpu", "NoSchedule", "present")),
    ("dedicated:NoExecute", Taint("dedicated", "NoExecute")),
])
def test_taint_notation(text: str, taint: Taint) -> None:
    assert Taint.parse(text) == taint
    assert str(taint) == text


def test_bad_taints_are_refused() -> None:
    with pytest.raises(ValueError, match="not a taint"):
        Taint.parse("gpu=yes:Sometimes")

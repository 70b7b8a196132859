"""Broken objects are refused the way kube-apiserver refuses them: each problem with its object and field."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from lifecycle.drivers.kube.manifests import (
    FieldError,
    Manifest,
    ManifestInvalid,
    render_gpu_operator,
    render_slinky,
    validate,
    validated,
)
from tests.kube_manifests.inventories import edited

INV = edited(lambda d: None)


def _one(kind: str, change: Callable[[dict[str, Any]], None], source: str = "slinky") -> list[FieldError]:
    rendered = render_slinky(INV) if source == "slinky" else render_gpu_operator(INV)
    objects = []
    for m in rendered.objects:
        body = m.to_dict()
        if m.kind == kind:
            change(body)
        objects.append(Manifest(body))
    return list(validate(objects).errors)


def _where(errors: list[FieldError]) -> list[tuple[str, str]]:
    return [(e.object_ref, e.path) for e in errors]


def test_wrong_enum_names_the_field_and_the_allowed_values() -> None:
    errors = _one("ClusterPolicy", lambda b: b["spec"]["mig"].update(strategy="all"), "gpu")
    assert _where(errors) == [("ClusterPolicy/cluster-policy", "spec.mig.strategy")]
    assert errors[0].message == 'Unsupported value: "all": supported values: "none", "single", "mixed"'
    errors = _one("NodeSet", lambda b: b["spec"].update(scalingMode="Deployment"))
    assert _where(errors) == [("NodeSet/slurm/slurm-worker-training", "spec.scalingMode")]


def test_unknown_fields_are_refused_not_pruned() -> None:
    errors = _one("ClusterPolicy", lambda b: b["spec"]["devicePlugin"].update(replicas=2), "gpu")
    assert [(e.path, e.message) for e in errors] == [
        ("spec.devicePlugin.replicas", 'unknown field "spec.devicePlugin.replicas"')]
    errors = _one("NodeSet", lambda b: b["spec"].update(nodeSelector={"a": "b"}))  # belongs in template.spec
    assert _where(errors) == [("NodeSet/slurm/slurm-worker-training", "spec.nodeSelector")]
    errors = _one("Controller", lambda b: b["metadata"].update(uid="x"))
    assert [e.path for e in errors] == ["metadata.uid"]


def test_below_preserve_unknown_fields_anything_goes_for_the_crd() -> None:
    # spec.slurmd is x-kubernetes-preserve-unknown-fields in the CRD; the container check still applies.
    errors = _one("NodeSet", lambda b: b["spec"]["slurmd"].update(env=[{"value": "1"}]))
    assert [(e.path, e.message) for e in errors] == [("spec.slurmd.env[0]", "'name' is a required property")]
    errors = _one("NodeSet", lambda b: b["spec"]["template"]["spec"]["nodeSelector"].update(gpus=8))
    assert [e.path for e in errors] == ["spec.template.spec.nodeSelector.gpus"]
    errors = _one("NodeSet", lambda b: b["spec"]["template"]["spec"].update(tolerance=[]))
    assert [e.path for e in errors] == ["spec.template.spec"]
    assert "tolerance" in errors[0].message


def test_cel_rules_are_enforced() -> None:
    errors = _one("Controller", lambda b: b["spec"].pop("slurmKeyRef"))
    assert [(e.path, e.message) for e in errors] == [
        ("spec", "Invalid value: slurmKeyRef must be set when external is false")]
    errors = _one("Accounting", lambda b: b["spec"].update(external=True))
    assert [(e.path, e.message) for e in errors] == [
        ("spec", "Invalid value: externalConfig must be set when external is true")]
    errors = _one("NodeSet", lambda b: b["spec"].update(updateStrategy={"type": "ScheduledUpdate"}))
    assert [e.path for e in errors] == ["spec.updateStrategy"]
    assert "scheduledUpdate.startTime and scheduledUpdate.duration are required" in errors[0].message
    ok = _one("NodeSet", lambda b: b["spec"].update(updateStrategy={
        "type": "ScheduledUpdate", "scheduledUpdate": {"startTime": "2026-12-01T02:00:00Z"}}))
    assert ok == []  # duration comes from the schema's default (30m), applied before the rules


def test_missing_required_fields() -> None:
    errors = _one("LoginSet", lambda b: b["spec"].pop("sssdConfRef"))
    assert [(e.path, e.message) for e in errors] == [("spec.sssdConfRef", "Required value")]
    errors = _one("ClusterPolicy", lambda b: b["spec"].pop("driver"), "gpu")
    assert [(e.path, e.message) for e in errors] == [("spec.driver", "Required value")]
    errors = _one("NodeSet", lambda b: b["metadata"].pop("namespace"))
    assert [e.path for e in errors] == ["metadata.namespace"]


def test_wrong_types_and_bad_metadata() -> None:
    errors = _one("RestApi", lambda b: b["spec"].update(replicas="two"))
    assert [(e.path, e.message) for e in errors] == [
        ("spec.replicas", 'Invalid value: "string": spec.replicas in body must be of type integer')]
    errors = _one("NodeSet", lambda b: b["metadata"]["labels"].update({"racklife.io/pool": "gpu pool"}))
    assert [e.path for e in errors] == ["metadata.labels[racklife.io/pool]"]
    errors = _one("NodeSet", lambda b: b["metadata"].update(name="Worker_1"))
    assert [e.path for e in errors] == ["metadata.name"]


def test_defaults_are_applied_as_the_api_server_would() -> None:
    [stored] = [m for m in validated(render_slinky(INV).objects) if m.kind == "NodeSet"]
    spec = stored.body["spec"]
    assert spec["workloadDisruptionProtection"] is True and spec["pruneSlurmNodeRecords"] == "Never"
    assert spec["replicas"] == 1 and spec["revisionHistoryLimit"] == 0
    [policy] = [m for m in validated(render_gpu_operator(INV).objects) if m.kind == "ClusterPolicy"]
    assert policy.body["spec"]["operator"]["runtimeClass"] == "nvidia"


def test_built_in_kinds_are_checked_and_unknown_kinds_refused() -> None:
    errors = _one("ConfigMap", lambda b: b["data"].update({"topology.conf": 1}))
    assert [e.path for e in errors] == ["data.topology.conf"]
    errors = _one("Namespace", lambda b: b["metadata"].update(namespace="x"))
    assert [e.path for e in errors] == ["metadata.namespace"]
    stray = Manifest.new("apps/v1", "Deployment", "x", "slurm", spec={})
    with pytest.raises(ManifestInvalid) as info:
        validated([stray])
    assert "neither a shipped CRD nor a built-in kind" in str(info.value)

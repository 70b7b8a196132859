"""The shipped CRDs: the releases' own bytes, and every CEL rule in them usable offline."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest
import yaml

from lifecycle.drivers.kube.manifests import cel
from lifecycle.drivers.kube.manifests.crds import CRD_FILES, crd_text, load_crds
from lifecycle.drivers.kube.manifests.gpu_operator import CHART_VALUES

CRDS = Path(__file__).resolve().parents[2] / "lifecycle" / "drivers" / "kube" / "manifests" / "crds"
SHARED = {"nvidia.com": "gpu-operator-v26.7.0/crds", "slinky.slurm.net": "slurm-operator-v1.2.1/crds"}


@pytest.mark.parametrize("file", CRD_FILES)
def test_shipped_crd_is_the_release_file(file: str, shared_dir: Path) -> None:
    source = shared_dir / "kubernetes" / SHARED[file.split("_", 1)[0]] / file
    assert source.is_file(), f"the project's copy of {file} is missing at {source}"
    assert (CRDS / file).read_bytes() == source.read_bytes()
    digest = hashlib.sha256((CRDS / file).read_bytes()).hexdigest()
    assert re.search(rf"\| `{re.escape(file)}` \| {digest} \|", (CRDS / "SOURCES.md").read_text()), digest


def test_every_kind_racklife_renders_has_its_crd() -> None:
    kinds = {(c.api_version, c.kind) for c in load_crds().values()}
    for kind in ("Controller", "NodeSet", "LoginSet", "RestApi", "Accounting", "Token"):
        assert ("slinky.slurm.net/v1beta1", kind) in kinds
    assert ("nvidia.com/v1", "ClusterPolicy") in kinds


def test_every_cel_rule_of_the_shipped_crds_compiles_and_is_evaluable() -> None:
    rules = [(c.kind, r) for c in load_crds().values() for r in cel.rules_of(c.schema)]
    # Controller 3, Accounting 3, NodeSet 1, Token 1; ClusterPolicy has none.
    assert sorted((k, r.schema_path) for k, r in rules) == sorted(
        [("Accounting", "spec")] * 3 + [("Controller", "spec")] * 3
        + [("NodeSet", "spec.updateStrategy"), ("Token", "spec")])
    for crd in load_crds().values():
        assert cel.unevaluable(crd.schema) == [], crd.kind
    assert "x-kubernetes-validations" not in crd_text("nvidia.com_clusterpolicies.yaml")


@pytest.mark.parametrize(("rule", "why"), [
    ("quantity(self.size).isGreaterThan(quantity('1Gi'))", "calls isGreaterThan, quantity"),
    ("self.name.lowerAscii() == self.name", "calls lowerAscii"),
    ("self.replicas >= oldSelf.replicas", "transition rule"),
    ("self.replicas >= ", "does not compile"),
])
def test_a_rule_that_cannot_be_evaluated_is_named_and_refuses_the_object(rule: str, why: str) -> None:
    schema = {"type": "object", "properties": {"spec": {
        "type": "object", "x-kubernetes-validations": [{"rule": rule, "message": "m"}],
        "properties": {"size": {"type": "string"}, "name": {"type": "string"}, "replicas": {"type": "integer"}}}}}
    [(found, reason)] = cel.unevaluable(schema)
    assert found.schema_path == "spec" and why in reason
    [(path, message)] = cel.check_rules({"spec": {"size": "2Gi", "name": "a", "replicas": 1}}, schema)
    assert path == "spec"
    assert "cannot be evaluated, so the object is refused" in message and why in message


def test_a_rule_with_a_message_expression_and_field_path() -> None:
    schema = {"type": "object", "properties": {"spec": {
        "type": "object", "properties": {"replicas": {"type": "integer"}},
        "x-kubernetes-validations": [{"rule": "self.replicas <= 3", "fieldPath": ".replicas",
                                      "messageExpression": "'at most 3, not ' + string(self.replicas)"}]}}}
    assert cel.check_rules({"spec": {"replicas": 2}}, schema) == []
    assert cel.check_rules({"spec": {"replicas": 5}}, schema) == [
        ("spec.replicas", "Invalid value: at most 3, not 5")]


def test_the_gpu_operator_chart_values_racklife_sets_exist_in_the_chart(shared_dir: Path) -> None:
    chart = yaml.safe_load((shared_dir / "kubernetes/gpu-operator-v26.7.0/helm/gpu-operator.values.yaml").read_text())

    def walk(ours: dict[str, object], theirs: dict[str, object], path: str) -> None:
        for key, value in ours.items():
            assert key in theirs, f"{path}{key} is not a value of the gpu-operator chart"
            if isinstance(value, dict):
                walk(value, theirs[key], f"{path}{key}.")  # type: ignore[arg-type]
            else:
                assert type(value) is type(theirs[key]), f"{path}{key}"

    walk(CHART_VALUES, chart, "")
    assert chart["clusterPolicy"]["deployCR"] is True  # the chart's default, which racklife turns off

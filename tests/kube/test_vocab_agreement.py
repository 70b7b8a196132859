"""One hostile value set, judged alike by every caller of the Kubernetes vocabulary.

The rules for names, label and annotation keys, label values and taints live
once, in ``lifecycle.model.vocab``; the inventory, the driver
(``set_pool_from``, ``Taint.parse``), the manifest validator and the lab's API
stand-in (over HTTP, as kubectl meets it) all call them. Each row says what
kube-apiserver itself does with the value (apimachinery's ``IsQualifiedName``,
``IsValidLabelValue``, ``IsDNS1123Subdomain``/``Label``, ``ValidateAnnotations``,
``validateNodeTaints``); every caller must give that verdict. Rows such as
``"ok\\n"`` were accepted by the manifest validator's own copy of the rules
(Python's ``$`` matches before a final newline) while the stand-in refused them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from lifecycle.drivers.kube import names
from lifecycle.drivers.kube.manifests.meta import check_metadata
from lifecycle.drivers.kube.types import Taint
from lifecycle.lab.kube import KubeStandIn
from lifecycle.model import vocab
from tests.kube.helpers import call

# (key, value, kube-apiserver stores a label key=value)
LABELS: list[tuple[str, str, bool]] = [
    ("racklife.io/pool", "inference", True),
    ("a", "", True),
    ("x" * 63, "y" * 63, True),
    ("k8s.io/MiXeD_case.1-2", "MiXeD_case.1-2", True),
    ("bad key", "x", False),
    ("ok", "x;reboot", False),
    ("ok", "$(id)", False),
    ("ok", "ok\n", False),
    ("ok\n", "x", False),
    ("Racklife.IO/pool", "x", False),
    ("/pool", "x", False),
    ("racklife.io/", "x", False),
    ("a/b/c", "x", False),
    ("x" * 64, "y", False),
    ("ok", "y" * 64, False),
    ("ok", "-x", False),
    ("ok", "x.", False),
    ("ok", "é", False),
    ("é" * 40, "x", False),
    ("ok", "a\u2028b", False),
    ("a" * 254 + "/x", "v", False),
    ("-a.io/x", "v", False),
]

# (object name, stored as a Node's name (an RFC 1123 subdomain), as a Namespace's (an RFC 1123 label))
NAMES: list[tuple[str, bool, bool]] = [
    ("gpu-01", True, True),
    ("gpu-01.rack-a", True, False),
    ("a" * 63, True, True),
    ("a" * 64, True, False),
    ("a" * 253, True, False),
    ("a" * 254, False, False),
    ("GPU_01", False, False),
    ("gpu\n", False, False),
    ("-gpu", False, False),
    ("gpu..01", False, False),
]

# (annotation key, stored): annotation keys are qualified names whose case does not matter
ANNOTATIONS: list[tuple[str, bool]] = [
    ("racklife.io/cordoned-by", True),
    ("Example.COM/Key", True),
    ("bad key", False),
    ("ok\n", False),
    ("a/b/c", False),
]


def _stand_in_stores(api: KubeStandIn, path: str, body: dict[str, Any], field: str) -> bool:
    status, answer, _ = call(api, "POST", path, body)
    if status == 422:
        assert answer["reason"] == "Invalid"
        assert any(c["field"].startswith(field) for c in answer["details"]["causes"]), answer
        return False
    assert status == 201, answer
    return True


def _accepts(*checks: Callable[[], object]) -> bool:
    """True when no check raises ``ValueError`` (the model's and ``Taint.parse``'s way of refusing)."""
    try:
        return all(check() is not False for check in checks)
    except ValueError:
        return False


def _model_label(key: str, value: str) -> bool:
    return _accepts(lambda: vocab.label_key(key), lambda: vocab.label_value(value))


def _model_taint(text: str) -> bool:
    return _accepts(lambda: vocab.taint(text))


def _driver_taint(text: str) -> bool:
    return _accepts(lambda: names.taint_errors(Taint.parse(text).key, Taint.parse(text).value) == [])


def _row_id(row: tuple[Any, ...]) -> str:
    return ascii(row[:-1])[:60]


@pytest.mark.parametrize(("key", "value", "stored"), LABELS, ids=[_row_id(r) for r in LABELS])
def test_a_label_is_judged_alike_by_every_caller(stand_in: KubeStandIn, key: str, value: str, stored: bool) -> None:
    meta = {"name": "vocab-01", "labels": {key: value}}
    verdicts = {
        "model (inventory)": _model_label(key, value),
        "driver (set_pool_from)": names.label_errors(key, value) == [],
        "manifest validator": check_metadata(meta, namespaced=False) == [],
        "stand-in over HTTP": _stand_in_stores(stand_in, "/api/v1/nodes", {"metadata": meta}, "metadata.labels"),
    }
    assert verdicts == dict.fromkeys(verdicts, stored)


TAINTS = [r for r in LABELS if not any(c in r[0] + r[1] for c in "=:") and r[0] == r[0].strip()]


@pytest.mark.parametrize(("key", "value", "stored"), TAINTS, ids=[_row_id(r) for r in TAINTS])
def test_a_taint_is_judged_alike_by_every_caller(stand_in: KubeStandIn, key: str, value: str, stored: bool) -> None:
    text = f"{key}={value}:NoSchedule" if value else f"{key}:NoSchedule"
    body = {"metadata": {"name": "vocab-01"},
            "spec": {"taints": [{"key": key, "value": value, "effect": "NoSchedule"}]}}
    verdicts = {
        "model (inventory)": _model_taint(text),
        "driver (Taint.parse)": _driver_taint(text),
        "stand-in over HTTP": _stand_in_stores(stand_in, "/api/v1/nodes", body, "spec.taints[0]"),
    }
    assert verdicts == dict.fromkeys(verdicts, stored)


@pytest.mark.parametrize("effect", ["NoSchedule", "PreferNoSchedule", "NoExecute", "Sometimes", "noschedule"])
def test_a_taint_effect_is_judged_alike(stand_in: KubeStandIn, effect: str) -> None:
    stored = effect in ("NoSchedule", "PreferNoSchedule", "NoExecute")
    body = {"metadata": {"name": "vocab-01"}, "spec": {"taints": [{"key": "k", "effect": effect}]}}
    verdicts = {"model": _model_taint(f"k:{effect}"), "driver": _driver_taint(f"k:{effect}"),
                "stand-in": _stand_in_stores(stand_in, "/api/v1/nodes", body, "spec.taints[0].effect")}
    assert verdicts == dict.fromkeys(verdicts, stored)


@pytest.mark.parametrize(("name", "as_node", "as_namespace"), NAMES, ids=[ascii(r[0])[:60] for r in NAMES])
def test_a_name_is_judged_alike_by_every_caller(stand_in: KubeStandIn, name: str, as_node: bool,
                                                as_namespace: bool) -> None:
    node = {"metadata": {"name": name}}
    assert {"model": vocab.dns1123_subdomain_errors(name) == [],
            "manifest validator": check_metadata({"name": name}, namespaced=False) == [],
            "stand-in": _stand_in_stores(stand_in, "/api/v1/nodes", node, "metadata.name")} == \
        dict.fromkeys(("model", "manifest validator", "stand-in"), as_node)
    in_ns = {"name": "vocab-01", "namespace": name}
    assert {"model": vocab.dns1123_label_errors(name) == [],
            "manifest validator": check_metadata(in_ns, namespaced=True) == [],
            "stand-in": _stand_in_stores(stand_in, "/api/v1/namespaces", node, "metadata.name")} == \
        dict.fromkeys(("model", "manifest validator", "stand-in"), as_namespace)


@pytest.mark.parametrize(("key", "stored"), ANNOTATIONS, ids=[_row_id(r) for r in ANNOTATIONS])
def test_an_annotation_key_is_judged_alike_by_every_caller(stand_in: KubeStandIn, key: str, stored: bool) -> None:
    meta = {"name": "vocab-01", "annotations": {key: "any value at all; even spaces"}}
    verdicts = {
        "model": vocab.annotation_key_errors(key) == [],
        "manifest validator": check_metadata(meta, namespaced=False) == [],
        "stand-in over HTTP": _stand_in_stores(stand_in, "/api/v1/nodes", {"metadata": meta},
                                               "metadata.annotations"),
    }
    assert verdicts == dict.fromkeys(verdicts, stored)


def test_the_stand_in_and_the_manifest_validator_give_apimachinery_s_words(stand_in: KubeStandIn) -> None:
    """Same reasons, not only the same verdict: the validator's message is the stand-in's causes joined."""
    meta = {"name": "vocab-01", "labels": {"ok": "y" * 64 + "!"}}
    _, answer, _ = call(stand_in, "POST", "/api/v1/nodes", {"metadata": meta})
    reasons = [c["message"].split(": ", 2)[2] for c in answer["details"]["causes"]]
    assert reasons == ["must be no more than 63 characters", vocab.MSG_LABEL_VALUE]
    assert check_metadata(meta, namespaced=False) == [
        ("metadata.labels[ok]", f'Invalid value: "{"y" * 64}!": ' + "; ".join(reasons))]

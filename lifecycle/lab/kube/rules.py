"""What kube-apiserver refuses before storing an object, with its own field paths and words.

Why it exists: a racklife bug that writes a label value with a space, a taint
with a made-up effect, or a field the API does not know must fail in the lab
as it would against a real cluster (422 Invalid naming the field, or 400 for
unknown fields under ``fieldValidation=Strict``) instead of passing. The
messages are apimachinery's, so a test can compare them with what kubectl
shows. ``KNOWN`` lists, per kind, the fields the API's schema declares down to
the depth racklife and kubectl write; below that depth anything is kept.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from lifecycle.lab.kube.kinds import Kind
from lifecycle.model import vocab

ANNOTATIONS_MAX = vocab.ANNOTATIONS_MAX_BYTES


@dataclass(frozen=True)
class Cause:
    """One field error, as a ``StatusCause`` and as the line of the message."""

    reason: str  # FieldValueInvalid, FieldValueRequired, FieldValueNotSupported, FieldValueDuplicate, …
    field: str
    detail: str

    @property
    def message(self) -> str:
        return self.detail

    def line(self) -> str:
        return f"{self.field}: {self.detail}"


def invalid(path: str, value: Any, why: str) -> Cause:
    shown = json.dumps(value) if isinstance(value, str) else repr(value)
    return Cause("FieldValueInvalid", path, f"Invalid value: {shown}: {why}")


def name_errors(kind: Kind, name: str) -> list[str]:
    if kind.name_rule == "label":
        return vocab.dns1123_label_errors(name)
    return vocab.dns1123_subdomain_errors(name)


def effect_cause(path: str, effect: object) -> list[Cause]:
    """``validateTaintEffect``: one of the three effects (a taint must name one; a toleration may not)."""
    if not effect or effect in vocab.TAINT_EFFECTS:
        return []
    supported = ", ".join(f'"{e}"' for e in vocab.TAINT_EFFECTS)
    return [Cause("FieldValueNotSupported", path, f'Unsupported value: "{effect}": supported values: {supported}')]


def metadata_causes(kind: Kind, meta: Mapping[str, Any]) -> list[Cause]:
    out: list[Cause] = []
    name = meta.get("name")
    if isinstance(name, str) and name:
        out += [invalid("metadata.name", name, e) for e in name_errors(kind, name)]
    labels = meta.get("labels") or {}
    for key, value in (labels.items() if isinstance(labels, Mapping) else ()):
        out += [invalid("metadata.labels", key, e) for e in vocab.qualified_name_errors(str(key))]
        if not isinstance(value, str):
            out.append(invalid("metadata.labels", value, "label values must be strings"))
            continue
        out += [invalid("metadata.labels", value, e) for e in vocab.label_value_errors(value)]
    annotations = meta.get("annotations") or {}
    if isinstance(annotations, Mapping):
        for key in annotations:
            out += [invalid("metadata.annotations", key, e) for e in vocab.annotation_key_errors(str(key))]
        if vocab.annotations_size(annotations) > ANNOTATIONS_MAX:
            out.append(Cause("FieldValueTooLong", "metadata.annotations",
                             f"Too long: may not be more than {ANNOTATIONS_MAX} bytes"))
    for i, fin in enumerate(meta.get("finalizers") or []):
        out += [invalid(f"metadata.finalizers[{i}]", fin, e) for e in vocab.qualified_name_errors(str(fin))]
    return out


def taint_causes(taints: Any, path: str = "spec.taints") -> list[Cause]:
    out: list[Cause] = []
    seen: set[tuple[str, str]] = set()
    for i, taint in enumerate(taints if isinstance(taints, list) else []):
        at = f"{path}[{i}]"
        if not isinstance(taint, Mapping):
            out.append(invalid(at, taint, "must be an object"))
            continue
        key, value, effect = str(taint.get("key") or ""), taint.get("value"), taint.get("effect")
        out += [invalid(f"{at}.key", key, e) for e in vocab.qualified_name_errors(key)]
        # validateNodeTaints joins a value's reasons into one cause (labels get one cause per reason).
        if value is not None and (why := vocab.label_value_errors(str(value))):
            out.append(invalid(f"{at}.value", value, ";".join(why)))
        if not effect:
            out.append(Cause("FieldValueRequired", f"{at}.effect", "Required value"))
        elif bad := effect_cause(f"{at}.effect", effect):
            out += bad
        elif (key, str(effect)) in seen:
            out.append(Cause("FieldValueDuplicate", at,
                             f'Duplicate value: "{key}:{effect}": taints must be unique by key and effect pair'))
        seen.add((key, str(effect)))
    return out


def causes(kind: Kind, obj: Mapping[str, Any]) -> list[Cause]:
    """Every validation error of an object about to be stored (create or update)."""
    out = metadata_causes(kind, obj.get("metadata") or {})
    spec = obj.get("spec") or {}
    if kind.kind == "Node":
        out += taint_causes(spec.get("taints"))
    if kind.kind == "PodDisruptionBudget" and spec.get("minAvailable") is not None \
            and spec.get("maxUnavailable") is not None:
        out.append(Cause("FieldValueInvalid", "spec", "Invalid value: \"\": minAvailable and maxUnavailable cannot "
                         "be both set"))
    if kind.kind == "Pod":
        for i, tol in enumerate(spec.get("tolerations") or []):
            effect = (tol or {}).get("effect") if isinstance(tol, Mapping) else None
            out += effect_cause(f"spec.tolerations[{i}].effect", effect)
    return out


# ---------------------------------------------------------------- known fields (fieldValidation)

# A node: None = free-form below here; a dict = these keys only; a one-item list = a list of that node.
Schema = dict[str, Any] | list[Any] | None
_META: Schema = dict.fromkeys((
    "name", "generateName", "namespace", "uid", "resourceVersion", "generation", "creationTimestamp",
    "deletionTimestamp", "deletionGracePeriodSeconds", "labels", "annotations", "ownerReferences", "finalizers",
    "managedFields", "selfLink"))
_CONTAINER: Schema = dict.fromkeys((
    "name", "image", "command", "args", "workingDir", "ports", "envFrom", "env", "resources", "resizePolicy",
    "restartPolicy", "volumeMounts", "volumeDevices", "livenessProbe", "readinessProbe", "startupProbe",
    "lifecycle", "terminationMessagePath", "terminationMessagePolicy", "imagePullPolicy", "securityContext",
    "stdin", "stdinOnce", "tty"))
_POD_SPEC: Schema = {**dict.fromkeys((
    "volumes", "activeDeadlineSeconds", "terminationGracePeriodSeconds", "restartPolicy", "dnsPolicy",
    "nodeSelector", "serviceAccountName", "serviceAccount", "automountServiceAccountToken", "nodeName",
    "hostNetwork", "hostPID", "hostIPC", "shareProcessNamespace", "securityContext", "imagePullSecrets",
    "hostname", "subdomain", "affinity", "schedulerName", "tolerations", "hostAliases", "priorityClassName",
    "priority", "dnsConfig", "readinessGates", "runtimeClassName", "enableServiceLinks", "preemptionPolicy",
    "overhead", "topologySpreadConstraints", "setHostnameAsFQDN", "os", "hostUsers", "schedulingGates",
    "resourceClaims", "ephemeralContainers", "resources")),
    "containers": [_CONTAINER], "initContainers": [_CONTAINER]}
_TEMPLATE: Schema = {"metadata": _META, "spec": _POD_SPEC}
_SELECTOR: Schema = dict.fromkeys(("matchLabels", "matchExpressions"))
_TAINT: Schema = dict.fromkeys(("key", "value", "effect", "timeAdded"))
_TOP = ("apiVersion", "kind", "metadata")


def _obj(**parts: Schema) -> Schema:
    return {"apiVersion": None, "kind": None, "metadata": _META, **parts}


KNOWN: dict[str, Schema] = {
    "Node": _obj(spec={"podCIDR": None, "podCIDRs": None, "providerID": None, "unschedulable": None,
                       "taints": [_TAINT], "configSource": None, "externalID": None}, status=None),
    "Pod": _obj(spec=_POD_SPEC, status=None),
    "Namespace": _obj(spec=dict.fromkeys(("finalizers",)), status=None),
    "Event": {**dict.fromkeys((*_TOP, "involvedObject", "reason", "message", "source", "firstTimestamp",
                               "lastTimestamp", "count", "type", "eventTime", "series", "action", "related",
                               "reportingComponent", "reportingInstance")), "metadata": _META},
    "Lease": _obj(spec=dict.fromkeys(("holderIdentity", "leaseDurationSeconds", "acquireTime", "renewTime",
                                      "leaseTransitions", "strategy", "preferredHolder"))),
    "PodDisruptionBudget": _obj(spec={"minAvailable": None, "maxUnavailable": None, "selector": _SELECTOR,
                                      "unhealthyPodEvictionPolicy": None}, status=None),
    "DaemonSet": _obj(spec={"selector": _SELECTOR, "template": _TEMPLATE, "updateStrategy": None,
                            "minReadySeconds": None, "revisionHistoryLimit": None}, status=None),
    "ReplicaSet": _obj(spec={"replicas": None, "minReadySeconds": None, "selector": _SELECTOR,
                             "template": _TEMPLATE}, status=None),
    "Eviction": _obj(deleteOptions=None),
}


def unknown_fields(value: Any, schema: Schema, path: str = "") -> list[str]:
    """Paths of fields the schema does not declare (``spec.foo``, ``spec.containers[0].imagee``)."""
    if schema is None:
        return []
    if isinstance(schema, list):
        return [p for i, item in enumerate(value if isinstance(value, list) else [])
                for p in unknown_fields(item, schema[0], f"{path}[{i}]")]
    if not isinstance(value, Mapping):
        return []
    out: list[str] = []
    for key, item in value.items():
        where = f"{path}.{key}" if path else str(key)
        if key not in schema:
            out.append(where)
        else:
            out += unknown_fields(item, schema[key], where)
    return out


def prune(value: Any, schema: Schema) -> Any:
    """The object as the API's decoder keeps it: undeclared fields dropped."""
    if schema is None:
        return value
    if isinstance(schema, list):
        return [prune(v, schema[0]) for v in value] if isinstance(value, list) else value
    if not isinstance(value, Mapping):
        return value
    return {k: prune(v, schema[k]) for k, v in value.items() if k in schema}

"""Check rendered objects as the cluster will: custom resources against their CRDs, built-in kinds upstream.

One entry point, ``validate(objects)``, returns the objects as the API server
would store them (defaults applied) and every problem found, each with the
object and the field path. A custom resource goes through metadata checks,
strict unknown-field detection, defaulting, the OpenAPI v3 schema and the
CEL rules (``structural``, ``cel``). A built-in kind (ConfigMap, Namespace,
…) is checked with ``kubernetes-validate`` against the upstream OpenAPI
schema of the Kubernetes version racklife targets, strictly (no unknown
fields). An object of any other kind is refused: nothing is passed
unchecked.

``check_pod_template`` does the same for the pod templates and containers a
Slinky CRD carries as ``x-kubernetes-preserve-unknown-fields`` (the CRD lets
anything through there; the kubelet would not).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import kubernetes_validate
from jsonschema.exceptions import ValidationError as SchemaError

from lifecycle.drivers.kube.manifests import cel, meta, structural
from lifecycle.drivers.kube.manifests.crds import find_crd
from lifecycle.drivers.kube.manifests.objects import FieldError, Manifest, path_str

KUBERNETES_VERSION = "1.32"
"""The API version built-in kinds are checked against (the lab's stand-in reports v1.32.x)."""

# Built-in kinds racklife renders, and whether they are namespaced.
BUILTIN_KINDS: dict[tuple[str, str], bool] = {
    ("v1", "ConfigMap"): True,
    ("v1", "Namespace"): False,
    ("v1", "Secret"): True,
    ("v1", "PodTemplate"): True,
}


class ManifestInvalid(Exception):
    """Rendered objects the cluster would refuse; ``errors`` lists each field."""

    def __init__(self, errors: list[FieldError]) -> None:
        self.errors = sorted(errors)
        super().__init__("\n".join(str(e) for e in self.errors))


@dataclass(frozen=True)
class Checked:
    objects: tuple[Manifest, ...]
    """As the API server would store them: defaults applied."""
    errors: tuple[FieldError, ...]

    @property
    def ok(self) -> bool:
        return not self.errors


_SLINKY = "slinky.slurm.net/v1beta1"
# Where a CRD embeds a pod template or a container as x-kubernetes-preserve-unknown-fields: checked as
# the built-in types they are (the operator copies them into the Pods it creates).
EMBEDDED: dict[tuple[str, str], tuple[tuple[tuple[str, ...], str], ...]] = {
    (_SLINKY, "Controller"): ((("spec", "template"), "pod"), (("spec", "slurmctld"), "container"),
                              (("spec", "reconfigure"), "container"), (("spec", "logfile"), "container")),
    (_SLINKY, "NodeSet"): ((("spec", "template"), "pod"), (("spec", "slurmd"), "container"),
                           (("spec", "logfile"), "container")),
    (_SLINKY, "LoginSet"): ((("spec", "template"), "pod"), (("spec", "login"), "container"),
                            (("spec", "initconf"), "container")),
    (_SLINKY, "RestApi"): ((("spec", "template"), "pod"), (("spec", "slurmrestd"), "container")),
    (_SLINKY, "Accounting"): ((("spec", "template"), "pod"), (("spec", "slurmdbd"), "container")),
}


def _embedded(obj: Manifest, body: dict[str, Any]) -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    for path, what in EMBEDDED.get((obj.api_version, obj.kind), ()):
        value: Any = body
        for part in path:
            value = value.get(part) if isinstance(value, dict) else None
        if value is None:
            continue
        where = path_str(list(path))
        found += check_pod_template(value, where) if what == "pod" else check_container(value, where)
    return found


def _custom(obj: Manifest) -> tuple[Manifest, list[tuple[str, str]]] | None:
    crd = find_crd(obj.api_version, obj.kind)
    if crd is None:
        return None
    body = obj.to_dict()
    found = meta.check_metadata(body.get("metadata"), namespaced=crd.scope == "Namespaced")
    found += structural.unknown_fields(body, crd.schema)
    structural.apply_defaults(body, crd.schema)
    found += structural.validate_values(body, crd.schema)
    found += cel.check_rules(body, crd.schema)
    found += _embedded(obj, body)
    return Manifest(body), found


def _builtin(obj: Manifest) -> list[tuple[str, str]] | None:
    namespaced = BUILTIN_KINDS.get((obj.api_version, obj.kind))
    if namespaced is None:
        return None
    body = obj.to_dict()
    found = meta.check_metadata(body.get("metadata"), namespaced=namespaced)
    try:
        kubernetes_validate.validate(body, KUBERNETES_VERSION, strict=True)
    except SchemaError as exc:
        found.append((path_str(list(exc.absolute_path)), exc.message))
    except kubernetes_validate.SchemaNotFoundError:
        found.append(("kind", f"no schema for {obj.kind} in Kubernetes {KUBERNETES_VERSION}"))
    return found


def check_pod_template(template: Any, where: str) -> list[tuple[str, str]]:
    """A pod template (``{metadata, spec}``) checked as the ``template`` of a v1 PodTemplate.

    The operator adds its own containers to the template, so one is supplied when it has none.
    """
    if isinstance(template, dict) and isinstance(template.get("spec"), dict) and "containers" not in template["spec"]:
        template = {**template, "spec": {**template["spec"], "containers": [{"name": "check"}]}}
    doc = {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "check", "namespace": "check"},
           "template": template}
    try:
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
    except SchemaError as exc:
        inner = list(exc.absolute_path)[1:]  # drop "template"
        return [(where + ("." + path_str(inner) if inner else ""), exc.message)]
    return []


def check_container(container: Any, where: str) -> list[tuple[str, str]]:
    """A container spec (Slinky's ``slurmd``, ``slurmctld``, …) checked as a v1 Container."""
    spec = {"containers": [dict(container, name=container.get("name", "check"))
                           if isinstance(container, dict) else container]}
    found = check_pod_template({"spec": spec}, "")
    prefix = ".spec.containers[0]"
    return [(where + p.removeprefix(prefix), m) if p.startswith(prefix) else (where, m) for p, m in found]


def validate(objects: Iterable[Manifest]) -> Checked:
    out: list[Manifest] = []
    errors: list[FieldError] = []
    for obj in objects:
        custom = _custom(obj)
        if custom is not None:
            stored, found = custom
            out.append(stored)
        else:
            builtin = _builtin(obj)
            out.append(obj)
            found = builtin if builtin is not None else [
                ("kind", f"{obj.api_version} {obj.kind} is neither a shipped CRD nor a built-in kind racklife "
                         "checks; refusing to pass it unchecked")]
        errors += [FieldError(obj.ref, path, message) for path, message in found]
    return Checked(tuple(out), tuple(sorted(errors)))


def validated(objects: Iterable[Manifest]) -> tuple[Manifest, ...]:
    """The objects with defaults applied; raise ``ManifestInvalid`` if any would be refused."""
    checked = validate(objects)
    if checked.errors:
        raise ManifestInvalid(list(checked.errors))
    return checked.objects

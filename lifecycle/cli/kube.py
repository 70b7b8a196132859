"""`racklife kube render|validate`: the GPU Operator and Slinky objects from the inventory, checked offline.

``render`` prints what ``stacks/`` hands to pulumi-kubernetes, after checking
every object against the CRDs of the releases racklife targets; ``validate``
checks manifest files someone wrote or changed by hand the same way. Both
exit 1 when an object would be refused, listing each field.
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, NoReturn

import typer
import yaml

from lifecycle.cli._common import BAD_INPUT, FAILED, JsonOpt, emit_json, err_console, error_exit, fail, out_console
from lifecycle.cli._runs import NoWaitOpt
from lifecycle.cli._select import AllOpt, PoolOpt, RackOpt, SelectorOpt
from lifecycle.cli.inventory import load_or_exit

if TYPE_CHECKING:
    from lifecycle.drivers.kube.manifests import Manifest

# The manifest libraries (jsonschema, cel-python, kubernetes-validate) are imported by the commands
# that use them, not by every `racklife` command.

app = typer.Typer(help="Kubernetes objects racklife renders (GPU Operator, Slinky).", no_args_is_help=True)


class Component(StrEnum):
    gpu_operator = "gpu-operator"
    slinky = "slinky"


class Format(StrEnum):
    yaml = "yaml"
    json = "json"


class Mig(StrEnum):
    none = "none"
    single = "single"
    mixed = "mixed"


class Source(StrEnum):
    host = "host"
    operator = "operator"


_SOURCES: dict[Source, Literal["host", "operator"]] = {Source.host: "host", Source.operator: "operator"}
_MIG: dict[Mig, Literal["none", "single", "mixed"]] = {Mig.none: "none", Mig.single: "single", Mig.mixed: "mixed"}


def _report(errors: list[Any], as_json: bool, where: str) -> NoReturn:
    found = [{"object": e.object_ref, "field": e.path, "message": e.message} for e in errors]
    error_exit(f"{where}: {len(errors)} problem(s)", FAILED, field=found[0]["field"] if found else None,
               details={"errors": found}, extra={"valid": False, "errors": found}, lines=[str(e) for e in errors])


@app.command("render")
def render_cmd(
    component: Component = typer.Argument(..., help="gpu-operator (ClusterPolicy) or slinky (slurm-operator)."),
    inventory: Path = typer.Option(..., "--inventory", help="Inventory YAML file."),
    output: Format = typer.Option(Format.yaml, "-o", "--output", help="yaml (documents) or json (a v1 List)."),
    namespace: str | None = typer.Option(None, "--namespace", help="Default: gpu-operator / slurm."),
    mig_strategy: Mig = typer.Option(Mig.single, "--mig-strategy", help="GPU Operator: none, single, mixed."),
    driver: Source = typer.Option(Source.host, "--driver", help="GPU Operator: NVIDIA driver from the host "
                                  "image or the operator's container."),
    toolkit: Source = typer.Option(Source.host, "--toolkit", help="GPU Operator: container toolkit from the "
                                   "host (kube_node role) or the operator."),
    accounting: bool = typer.Option(True, "--accounting/--no-accounting", help="Slinky: slurmdbd."),
) -> None:
    """Print COMPONENT's objects for INVENTORY, checked against the shipped CRDs."""
    from lifecycle.drivers.kube.manifests import (
        GpuOperatorOptions,
        Rendered,
        RenderError,
        SlinkyOptions,
        dump,
        render_gpu_operator,
        render_slinky,
        validate,
    )

    as_json = output is Format.json
    inv = load_or_exit(inventory, as_json)
    try:
        rendered: Rendered
        if component is Component.gpu_operator:
            gpu = GpuOperatorOptions(driver=_SOURCES[driver], toolkit=_SOURCES[toolkit],
                                     mig_strategy=_MIG[mig_strategy])
            rendered = render_gpu_operator(inv, replace(gpu, namespace=namespace) if namespace else gpu)
        else:
            slinky = SlinkyOptions(accounting=accounting)
            rendered = render_slinky(inv, replace(slinky, namespace=namespace) if namespace else slinky)
    except RenderError as exc:
        fail(f"{inventory}: {exc}", BAD_INPUT)
    checked = validate(rendered.objects)
    if checked.errors:
        _report(list(checked.errors), as_json, f"rendered {component.value}")
    for ref in rendered.secrets:
        # On stderr: stdout stays a document `kubectl apply -f -` takes.
        err_console.print(f"needs Secret {ref.namespace}/{ref.name} key {ref.key}: {ref.purpose}",
                          markup=False, soft_wrap=True)
    sys.stdout.write(dump(rendered.objects, output.value))


def _documents(path: Path) -> list[Manifest]:
    from lifecycle.drivers.kube.manifests import Manifest

    try:
        text = path.read_text(encoding="utf-8")
        docs = list(yaml.safe_load_all(text)) if path.suffix != ".json" else [json.loads(text)]
    except (OSError, UnicodeDecodeError, yaml.YAMLError, json.JSONDecodeError) as exc:
        fail(f"{path}: cannot read manifests: {str(exc).splitlines()[0]}", BAD_INPUT)
    out: list[Manifest] = []
    for doc in docs:
        if doc is None:
            continue
        if isinstance(doc, dict) and doc.get("kind") == "List" and isinstance(doc.get("items"), list):
            out += [Manifest(item) for item in doc["items"] if isinstance(item, dict)]
        elif isinstance(doc, dict):
            out.append(Manifest(doc))
        else:
            fail(f"{path}: a document is not a Kubernetes object (a mapping)", BAD_INPUT)
    return out


@app.command("validate")
def validate_cmd(
    files: list[Path] = typer.Argument(..., help="YAML or JSON manifest files (a v1 List is unpacked)."),
    as_json: bool = JsonOpt,
) -> None:
    """Check manifest FILES against the shipped CRDs and built-in schemas; exit 1 if any object is refused."""
    from lifecycle.drivers.kube.manifests import validate

    objects = [m for f in files for m in _documents(f)]
    checked = validate(objects)
    if checked.errors:
        _report(list(checked.errors), as_json, ", ".join(str(f) for f in files))
    if as_json:
        emit_json({"valid": True, "objects": [m.ref for m in objects]})
    else:
        out_console.print(f"{len(objects)} object(s) valid: {', '.join(m.ref for m in objects)}",
                          markup=False, soft_wrap=True)


KubeconfigOpt = typer.Option(None, "--kubeconfig", envvar=["RACKLIFE_KUBECONFIG", "KUBECONFIG"],
                             help="The cluster's kubeconfig (default: $RACKLIFE_KUBECONFIG, then $KUBECONFIG).")


def kube_settings(kubeconfig: Path | None, ready_timeout: float, as_json: bool) -> Any:
    """The typed settings of the Kubernetes workflows, or one line (exit 2) when no cluster is named."""
    from lifecycle.workflows.kube_pool import KubeSettings

    if kubeconfig is None:
        fail("no kubeconfig: give --kubeconfig or set RACKLIFE_KUBECONFIG or KUBECONFIG", BAD_INPUT)
    if not kubeconfig.is_file():
        fail(f"{kubeconfig}: no such kubeconfig file", BAD_INPUT)
    return KubeSettings(kubeconfig=str(kubeconfig.resolve()), ready_timeout_s=ready_timeout)


@app.command("join")
def join_cmd(
    nodes: list[str] = typer.Argument(None, help="Node names or hostlists (accepted, of a Kubernetes pool)."),
    rack: list[str] = RackOpt, pool: list[str] = PoolOpt, all_: bool = AllOpt, selector: str | None = SelectorOpt,
    kubeconfig: Path | None = KubeconfigOpt,
    ready_timeout: float = typer.Option(300.0, "--ready-timeout", min=1,
                                        help="Seconds the kubelet may take to report Ready with every GPU."),
    no_wait: bool = NoWaitOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Take accepted nodes into service in their Kubernetes pool: labels, taints, Ready with every GPU."""
    from lifecycle.cli._runs import check_no_wait, controller, leave_running, progress
    from lifecycle.cli._select import select_names
    from lifecycle.cli.slurm import print_outcomes
    from lifecycle.workflows import kube_pool

    settings = kube_settings(kubeconfig, ready_timeout, as_json)
    nodes = select_names(nodes, racks=rack, pools=pool, all_=all_, selector=selector)
    check_no_wait(no_wait)
    with controller("kube", no_wait=no_wait) as ctl:
        handles = [ctl.start(kube_pool.join_kube_node, n, settings, nodes=[n]) for n in dict.fromkeys(nodes)]
        if no_wait:
            leave_running(ctl, as_json)
        with progress(nodes, "kube join"):
            outcomes = [h.get_result() for h in handles]
    print_outcomes(outcomes, as_json)

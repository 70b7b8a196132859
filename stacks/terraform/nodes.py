"""``racklife_node`` (resource and data source): a node's pool, image and firmware baseline, and what racklife sees.

A create or update converges the node on the resource through the planner's
apply (enrol, provision, accept, join; a changed pool is a role swap by
``move-pool``; a changed image a reimage); a
read is the planner's refresh and plan of the node; a delete is its
decommission (the apply of the inventory without it), refused while jobs
run. Observed values are computed attributes;
a node the planner would change (powered off by hand, drained out of its
partition) has a non-empty ``steps``, and the ``plan`` hook turns that into
an update, because Terraform never plans a change for drift in computed
attributes alone.

A failed create returns no state: Terraform then plans the create again and
the next apply resumes the node from where racklife's store says it is (a
tainted node would be replaced, that is decommissioned and rebuilt).
"""

from __future__ import annotations

from typing import Any

from tf import schema, types
from tf.iface import (
    CreateContext,
    DataSource,
    DeleteContext,
    ImportContext,
    PlanContext,
    ReadContext,
    ReadDataContext,
    Resource,
    UpdateContext,
)

from lifecycle.model.inventory import InventoryError
from lifecycle.store import StoreError
from stacks.terraform.desired import NodeWant, baseline_problems, image_problem
from stacks.terraform.fleet import NodeView, Outcome
from stacks.terraform.provider_base import ProviderBase, configured

SCHEMA_VERSION = 1
# What the planner raises on bad input or an unreachable store: a diagnostic, never a traceback. A node or pool
# the inventory lacks, an unknown node name (ValueError), a refused import or a store down (StoreError), a base
# inventory that does not parse (InventoryError).
TROUBLE = (ValueError, StoreError, InventoryError)
DESIRED = ("name", "pool", "image", "firmware", "firmware_files")
# Computed attributes that a change makes unknown until the apply has observed the node again.
OBSERVED = ("state", "power", "booted_image", "booted_version", "steps", "blockers")


def _s(name: str, desc: str, **kw: Any) -> schema.Attribute:
    return schema.Attribute(name, types.String(), description=desc, **kw)


def _list(name: str, desc: str) -> schema.Attribute:
    return schema.Attribute(name, types.List(types.String()), description=desc, computed=True)


RESOURCE_SCHEMA = schema.Schema(version=SCHEMA_VERSION, attributes=[
    _s("id", "The node's name.", computed=True),
    _s("name", "The node's name in the base inventory (its serial, BMC and NICs come from there).",
       required=True, requires_replace=True),
    _s("pool", "The pool the node serves; a change is a role swap.", required=True),
    _s("image", "The golden image the node runs, NAME or NAME:VERSION (default: the inventory's image; without a "
                "version, the inventory's version of it); a change is a reimage.", optional=True),
    schema.Attribute("firmware", types.Map(types.String()), optional=True,
                     description="Firmware baseline: component (as the BMC names it, or its id's last part) -> "
                                 "the version the BMC must report; a change is the planner's update-firmware "
                                 "(leave, update through the BMC, read back, re-test, rejoin)."),
    schema.Attribute("firmware_files", types.Map(types.String()), optional=True,
                     description="Component -> the image on the controller that installs the baseline's version "
                                 "(an absolute path); every component of `firmware` needs one."),
    _s("state", "racklife's lifecycle state of the node.", computed=True),
    _s("power", "The power state its BMC reports.", computed=True),
    _s("booted_image", "The image the node last booted, from the boot server's records.", computed=True),
    _s("booted_version", "The version of that image.", computed=True),
    _list("steps", "What racklife's plan would still do to the node (empty: converged)."),
    _list("blockers", "What racklife will not act through (a foreign drain or cordon, an unreadable source, …)."),
])

DATA_SCHEMA = schema.Schema(version=SCHEMA_VERSION, attributes=[
    _s("name", "The node's name.", required=True),
    _s("id", "The node's name.", computed=True),
    _s("state", "racklife's lifecycle state.", computed=True),
    _s("pool", "The pool it serves now.", computed=True),
    _s("power", "The power state its BMC reports.", computed=True),
    _s("booted_image", "The image it last booted.", computed=True),
    _s("booted_version", "The version of that image.", computed=True),
    _s("slurm_state", "Its state in Slurm (Slurm pools only).", computed=True),
    schema.Attribute("kube_ready", types.Bool(), computed=True,
                     description="Whether its Kubernetes Node is Ready (Kubernetes pools only)."),
    _list("jobs", "Slurm jobs running on it."),
    _s("acceptance_record", "The newest acceptance record's id.", computed=True),
    schema.Attribute("firmware", types.Map(types.String()), computed=True,
                     description="Firmware versions its BMC reports (read only when a baseline asks for them)."),
    _list("drift", "Where the sources disagree with the inventory (source/kind: what)."),
    _list("steps", "What racklife's plan would do to it."),
    _list("blockers", "What racklife will not act through."),
    _s("observed_at", "When the sources were read (UTC, ISO 8601).", computed=True),
])


def want_of(state: dict[str, Any]) -> NodeWant:
    return NodeWant(str(state["name"]), str(state["pool"]), state.get("image") or None,
                    dict(state.get("firmware") or {}), dict(state.get("firmware_files") or {}))


def _state(desired: dict[str, Any], v: NodeView) -> dict[str, Any]:
    return {"id": v.name, "name": v.name, "pool": v.pool or desired.get("pool"), "image": desired.get("image"),
            "firmware": desired.get("firmware"), "firmware_files": desired.get("firmware_files"), "state": v.state,
            "power": v.power,
            "booted_image": v.booted_image, "booted_version": v.booted_version, "steps": list(v.steps),
            "blockers": list(v.blockers)}


def _report(diags: Any, verb: str, out: Outcome) -> None:
    for problem in out.problems:
        diags.add_error(f"racklife could not {verb} {out.view.name}", problem)


def _read(provider: ProviderBase, diags: Any, name: str, want: NodeWant | None) -> NodeView | None:
    """The node refreshed and planned (against ``want``, or the store's own wishes when None); None with an
    error diagnostic when the provider is not configured or the planner refused the read."""
    fleet = configured(provider, diags)
    if fleet is None:
        return None
    try:
        return fleet.view(want) if want is not None else fleet.observe(name)
    except TROUBLE as exc:
        diags.add_error(f"racklife could not read {name}", str(exc))
        return None


class NodeResource(Resource):  # type: ignore[misc]  # tf ships no type information
    def __init__(self, provider: ProviderBase) -> None:
        self.provider = provider

    @classmethod
    def get_name(cls) -> str:
        return "node"

    @classmethod
    def get_schema(cls) -> schema.Schema:
        return RESOURCE_SCHEMA

    def read(self, ctx: ReadContext, current: dict[str, Any]) -> dict[str, Any] | None:
        view = _read(self.provider, ctx.diagnostics, str(current["name"]), want_of(current))
        if view is None:
            return current
        return _state(current, view) if view.exists else None  # gone from the store: Terraform plans a create

    def plan(self, ctx: PlanContext, current: dict[str, Any] | None, planned: dict[str, Any]) -> dict[str, Any]:
        image = planned.get("image")
        if isinstance(image, str) and (why := image_problem(image)):
            ctx.diagnostics.add_error(f"racklife_node {planned.get('name')}: image", why, ["image"])
            return planned
        firmware, files = planned.get("firmware"), planned.get("firmware_files")
        if firmware is not types.Unknown and files is not types.Unknown:
            for attr, why in baseline_problems(dict(firmware or {}), dict(files or {})):
                ctx.diagnostics.add_error(f"racklife_node {planned.get('name')}: {attr}", why, [attr])
            if ctx.diagnostics.has_errors():
                return planned
        if current is None:
            return planned
        # A node held by a run is planned too: if the run's process is gone (the provider killed mid-apply),
        # the apply's controller recovers it and awaits it before converging the rest; a live one blocks.
        held = any(str(b).startswith("held:") for b in current.get("blockers") or ())
        if ctx.changed_fields & set(DESIRED) or current.get("steps") or held:
            planned.update({k: types.Unknown for k in OBSERVED})
        if current.get("blockers"):
            ctx.diagnostics.add_warning(f"racklife will not act through a blocker on {current['name']}",
                                        "; ".join(current["blockers"]))
        return planned

    def create(self, ctx: CreateContext, planned: dict[str, Any]) -> dict[str, Any] | None:
        return self._converge(ctx, planned, "create")

    def update(self, ctx: UpdateContext, current: dict[str, Any], planned: dict[str, Any]) -> dict[str, Any] | None:
        return self._converge(ctx, planned, "update", current)

    def _converge(self, ctx: Any, planned: dict[str, Any], verb: str,
                  current: dict[str, Any] | None = None) -> dict[str, Any] | None:
        fleet = configured(self.provider, ctx.diagnostics)
        if fleet is None:
            return current
        try:
            out = fleet.converge(want_of(planned))
        except TROUBLE as exc:
            ctx.diagnostics.add_error(f"racklife could not {verb} {planned['name']}", str(exc))
            return current
        _report(ctx.diagnostics, verb, out)
        if out.ok:
            return _state(planned, out.view)
        if current is None:
            return None  # not created: the next apply plans the create again and resumes the node
        return _state(current, out.view)  # refused or failed: what it was asked before, and what it is now

    def delete(self, ctx: DeleteContext, current: dict[str, Any]) -> dict[str, Any] | None:
        fleet = configured(self.provider, ctx.diagnostics)
        if fleet is None:
            return current
        try:
            out = fleet.retire(str(current["name"]))
        except TROUBLE as exc:
            ctx.diagnostics.add_error(f"racklife could not destroy {current['name']}", str(exc))
            return current
        if out.ok:
            return None
        _report(ctx.diagnostics, "destroy", out)
        return current  # refused: the node stays, and so does its state

    def import_(self, ctx: ImportContext, id: str) -> dict[str, Any] | None:  # tf names it id
        view = _read(self.provider, ctx.diagnostics, id, None)
        if view is None:
            return None
        if not view.exists:
            ctx.diagnostics.add_error(f"racklife's store has no node {id}",
                                      "import the inventory (`racklife inventory import`) or create the node")
            return None
        return _state({"name": id, "pool": view.pool}, view)


class NodeData(DataSource):  # type: ignore[misc]  # tf ships no type information
    def __init__(self, provider: ProviderBase) -> None:
        self.provider = provider

    @classmethod
    def get_name(cls) -> str:
        return "node"

    @classmethod
    def get_schema(cls) -> schema.Schema:
        return DATA_SCHEMA

    def read(self, ctx: ReadDataContext, config: dict[str, Any]) -> dict[str, Any] | None:
        name = str(config["name"])
        v = _read(self.provider, ctx.diagnostics, name, None)
        if v is None:
            return None
        if not v.exists:
            ctx.diagnostics.add_error(f"racklife's store has no node {name}", "", ["name"])
            return None
        return {"name": name, "id": name, "state": v.state, "pool": v.pool, "power": v.power,
                "booted_image": v.booted_image, "booted_version": v.booted_version, "slurm_state": v.slurm_state,
                "kube_ready": v.kube_ready,
                "jobs": list(v.jobs), "acceptance_record": v.acceptance_record, "firmware": dict(v.firmware),
                "drift": list(v.drift), "steps": list(v.steps), "blockers": list(v.blockers),
                "observed_at": v.observed_at}

"""``racklife_pool``: a pool's scheduler, floor, labels and taints, as the inventory defines them.

A create or update records the pool's definition the way an inventory import
does (the composed inventory, in which no node changes), so the planner, the
role-swap pre-checks and ``racklife plan`` all read the same pool; a read is
the store's definition (an import of another inventory shows as drift). The
labels are a map and the taints a set: neither has an order, and a list would
diff for ever on a reordering. A delete is refused while nodes serve the
pool; otherwise Terraform forgets it and the store keeps the definition (an
import never deletes a pool).
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError
from tf import schema, types
from tf.iface import CreateContext, DeleteContext, ImportContext, ReadContext, Resource, UpdateContext

from lifecycle.model.inventory import InventoryError, Pool
from lifecycle.model.vocab import LEAVE_POLICIES, LEVELS
from lifecycle.store import StoreError
from stacks.terraform.provider_base import ProviderBase, configured

SCHEMA_VERSION = 1
# attribute -> the Pool field it sets; unset attributes keep racklife's default (they are optional and computed).
FIELDS = ("scheduler", "partition", "min_nodes", "labels", "taints", "leave_policy", "retest_level",
          "drain_deadline_s")

SCHEMA = schema.Schema(version=SCHEMA_VERSION, attributes=[
    schema.Attribute("id", types.String(), computed=True, description="The pool's name."),
    schema.Attribute("name", types.String(), required=True, requires_replace=True, description="The pool's name."),
    schema.Attribute("scheduler", types.String(), required=True, requires_replace=True,
                     description="slurm, kubernetes or none."),
    schema.Attribute("partition", types.String(), optional=True, requires_replace=True,
                     description="The Slurm partition (slurm pools only)."),
    schema.Attribute("min_nodes", types.Number(), optional=True, computed=True,
                     description="The fewest nodes the pool keeps in service: a role swap that would leave "
                                 "fewer is refused."),
    schema.Attribute("labels", types.Map(types.String()), optional=True,
                     description="Kubernetes labels every node of the pool carries."),
    schema.Attribute("taints", types.Set(types.String()), optional=True,
                     description="Kubernetes taints (key[=value]:Effect) every node of the pool carries."),
    schema.Attribute("leave_policy", types.String(), optional=True, computed=True,
                     description=f"What a leave does to running jobs: {', '.join(LEAVE_POLICIES)}."),
    schema.Attribute("retest_level", types.String(), optional=True, computed=True,
                     description="The acceptance level a node is re-tested at before it joins in a role swap: "
                                 f"{', '.join(LEVELS)}."),
    schema.Attribute("drain_deadline_s", types.Number(), optional=True, computed=True,
                     description="Seconds a drain may wait for jobs under the wait policy."),
])


def pool_of(state: dict[str, Any]) -> Pool:
    """The Pool the attributes describe (racklife's defaults for the unset or unknown ones)."""
    doc: dict[str, Any] = {}
    for k in FIELDS:
        v = state.get(k)
        if v is None or v is types.Unknown:
            continue
        if isinstance(v, float) and v.is_integer():
            v = int(v)
        doc[k] = sorted(v) if k == "taints" and isinstance(v, list) else v
    return Pool.model_validate(doc)


def state_of(name: str, pool: Pool, like: dict[str, Any]) -> dict[str, Any]:
    """The state of ``pool``; empty labels or taints stay null where the configuration left them null."""
    out: dict[str, Any] = {"id": name, "name": name, "scheduler": pool.scheduler, "partition": pool.partition,
                           "min_nodes": pool.min_nodes, "leave_policy": pool.leave_policy,
                           "retest_level": pool.retest_level, "drain_deadline_s": pool.drain_deadline_s,
                           "labels": dict(pool.labels) or (None if like.get("labels") is None else {}),
                           "taints": sorted(pool.taints) or (None if like.get("taints") is None else [])}
    return out


def _invalid(diags: Any, name: str, exc: ValidationError) -> None:
    for err in exc.errors(include_url=False):
        path = [str(p) for p in err["loc"][:1]]
        diags.add_error(f"racklife_pool {name}: {'.'.join(map(str, err['loc'])) or 'pool'}: "
                        f"{str(err['msg']).removeprefix('Value error, ')}", "", path or None)


class PoolResource(Resource):  # type: ignore[misc]  # tf ships no type information
    def __init__(self, provider: ProviderBase) -> None:
        self.provider = provider

    @classmethod
    def get_name(cls) -> str:
        return "pool"

    @classmethod
    def get_schema(cls) -> schema.Schema:
        return SCHEMA

    def read(self, ctx: ReadContext, current: dict[str, Any]) -> dict[str, Any] | None:
        fleet = configured(self.provider, ctx.diagnostics)
        if fleet is None:
            return current
        pool = fleet.pool(str(current["name"]))
        return state_of(str(current["name"]), pool, current) if pool is not None else None

    def create(self, ctx: CreateContext, planned: dict[str, Any]) -> dict[str, Any] | None:
        return self._put(ctx, planned, None)

    def update(self, ctx: UpdateContext, current: dict[str, Any], planned: dict[str, Any]) -> dict[str, Any] | None:
        return self._put(ctx, planned, current)

    def _put(self, ctx: Any, planned: dict[str, Any], current: dict[str, Any] | None) -> dict[str, Any] | None:
        name = str(planned["name"])
        fleet = configured(self.provider, ctx.diagnostics)
        if fleet is None:
            return current
        try:
            pool = pool_of(planned)
        except ValidationError as exc:
            _invalid(ctx.diagnostics, name, exc)
            return current
        try:
            stored = fleet.put_pool(name, pool)
        except (ValueError, StoreError, InventoryError) as exc:  # an import refused, a base inventory unreadable
            ctx.diagnostics.add_error(f"racklife could not record pool {name}", str(exc))
            return current
        return state_of(name, stored, planned)

    def delete(self, ctx: DeleteContext, current: dict[str, Any]) -> dict[str, Any] | None:
        fleet = configured(self.provider, ctx.diagnostics)
        if fleet is None:
            return current
        name = str(current["name"])
        members = fleet.pool_members(name)
        if members:
            ctx.diagnostics.add_error(f"racklife will not drop pool {name}: nodes serve it",
                                      f"{', '.join(members)} are in pool {name}: move or decommission them first")
            return current
        return None

    def import_(self, ctx: ImportContext, id: str) -> dict[str, Any] | None:  # tf names it id
        fleet = configured(self.provider, ctx.diagnostics)
        pool = fleet.pool(id) if fleet is not None else None
        if pool is None:
            ctx.diagnostics.add_error(f"racklife's store has no pool {id}", "")
            return None
        return state_of(id, pool, {"labels": {}, "taints": []})

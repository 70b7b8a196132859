"""Elastic capacity: lend idle Slurm nodes to Kubernetes and take them back, durably.

Slurm's power saving decides *when*: an idle node of a lendable pool is
"suspended" (SuspendProgram → :func:`lend_node`) and a job that needs a
suspended node "resumes" it (ResumeProgram → :func:`reclaim_node`). Both
programs return at once (``lifecycle.cli.slurm_elastic`` starts a worker per
node); the work is a DBOS workflow, so a worker killed mid-way is finished by
the next worker for that node.

A lend and a reclaim are the node cycle every change of a serving node runs
(:mod:`lifecycle.workflows.node_cycle`, the role swap's own path): a run
that holds the node's lease, the shared leave and join bodies, the role
switch (:class:`~lifecycle.workflows.role_switch.RoleSwitch`) as the one
change, no re-test (Slurm's ResumeTimeout bounds a reclaim), the events of
``node_ops.LEND`` / ``RECLAIM``, and the phase times in the node's history
(a ``lend`` or ``reclaim`` row, like a role swap's). What is elastic's own:

* **lend**: the node leaves Slurm with racklife's drain (``racklife:<run-id>:
  lent to Kubernetes``; the wait policy with no deadline: no job is touched)
  while it switches role, so no job lands on it half-way; it then joins the
  lend pool in Kubernetes (pool labels and taints, racklife's old cordon
  lifted, never anyone else's) and only then is the drain lifted, leaving it
  ``idle~`` so that a job can call it back. Its pool in the store stays its
  Slurm pool. A lend that would leave that pool under its ``min_nodes`` in
  service is refused before anything is touched (the role swap's floor check
  and reservation, ``leasing.reserve_floor``). A failed lend leaves the node ``drained`` with racklife's drain
  (``racklife slurm join`` brings it back).
* **reclaim**: fail closed on the acceptance record first (no pod is touched
  for a node that may not run jobs) and on the lend pool's floor (the same
  reservation; lent nodes are not that pool's own), then leave Kubernetes: cordon (owned by
  the run) and evict through the Eviction API, honouring PodDisruptionBudgets
  with backoff up to a deadline; pods are never deleted. A blocked reclaim
  uncordons the node again (it keeps serving), marks it down in Slurm with
  racklife's reason naming the budget (Slurm requeues the job at once instead
  of waiting ResumeTimeout) and leaves it ``lent``. Otherwise the node
  switches role, registers with Slurm and joins its partition; only
  racklife's own drain/down is lifted.

The node's role switch itself is the site's hook
(``lifecycle.drivers.slurm.role``); in the lab it stops or boots a slurmd and
registers a Node object in the Kubernetes stand-in.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from dbos import DBOS

from lifecycle.drivers.errors import DriverError
from lifecycle.drivers.slurm.driver import NotOurs, SlurmDriver
from lifecycle.drivers.slurm.runner import CommandRunner
from lifecycle.model.states import Actor, IllegalTransition
from lifecycle.store import StoreError, shared_store
from lifecycle.workflows.kube_pool import KubeSettings
from lifecycle.workflows.leasing import release_leases, reserve_floor, take_leases
from lifecycle.workflows.node_cycle import CycleOutcome, LeaveSpec, cycle, summary
from lifecycle.workflows.node_ops import LEND, RECLAIM, current_run_id, node_pool, node_state, transition
from lifecycle.workflows.retry import step
from lifecycle.workflows.role_switch import RoleSwitch, switch


@dataclass(frozen=True)
class ElasticSettings:
    """What the workflows need besides the store; passed as an argument so a recovered run has it too."""

    kubeconfig: str
    role_cmd: tuple[str, ...]
    lend_pool: str = "inference"
    """The Kubernetes pool (from the inventory) whose labels and taints a lent node gets."""
    reclaim_deadline_s: float = 120.0
    """How long PodDisruptionBudgets may hold a reclaim (keep it under Slurm's ResumeTimeout)."""
    register_timeout_s: float = 120.0
    """How long a switched node may take to register with its new scheduler."""

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "role_cmd": list(self.role_cmd)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ElasticSettings:
        return cls(**{**data, "role_cmd": tuple(data["role_cmd"])})

    @classmethod
    def of(cls, given: ElasticSettings | dict[str, Any]) -> ElasticSettings:
        """The run's settings: typed, or the dict a run started before the typed argument recorded."""
        return given if isinstance(given, ElasticSettings) else cls.from_dict(given)

    def kube(self) -> KubeSettings:
        return KubeSettings(self.kubeconfig, ready_timeout_s=self.register_timeout_s, poll_s=0.5)


@dataclass
class ElasticOutcome(CycleOutcome):
    action: str = ""
    """lend | reclaim"""


def _slurm() -> SlurmDriver:
    return SlurmDriver(CommandRunner())


# ------------------------------------------------------------------ steps


@step(idempotent=True)
def lendable_pool(node: str) -> str | None:
    """Why the node may not be lent, or None when its pool is a lendable Slurm pool."""
    store = shared_store()
    rec = store.get(node)
    pool = store.pool(rec.pool)
    if pool.scheduler != "slurm" or not pool.lendable:
        return f"pool '{rec.pool}' is not a lendable Slurm pool"
    return None


@step(idempotent=True)  # down reads first; ours again is already done
def slurm_down(node: str, human: str) -> dict[str, str]:
    """Mark the node down with racklife's reason; refuses when someone else holds the node."""
    owner = _slurm().down([node], current_run_id(), human)[node]
    if owner.kind != "racklife":
        raise NotOurs(node, owner)
    return {"owner": owner.kind, "run": owner.run_id or ""}


@step(idempotent=True)  # resume_if_ours reads first
def slurm_release(node: str) -> list[dict[str, str]]:
    """Lift racklife's own drain/down on the node (any racklife run's); a foreign one raises NotOurs."""
    return [{"node": r.node, "action": r.action} for r in _slurm().resume_if_ours([node])]


@step(idempotent=True)
def acceptance_record_id(node: str) -> str | None:
    rec = shared_store().valid_acceptance(node)
    return rec.id if rec else None


@step(idempotent=True)
def record_trip(node: str, action: str, old: str, new: str, line: str) -> None:
    """The node's history row of a lend or reclaim: the node cycle's verdict and phase times."""
    shared_store().record_change(node, action, old, new, Actor.WORKFLOW, f"run {current_run_id()}: {line}")


# ------------------------------------------------------------------ workflows


def _refuse_in_slurm(out: ElasticOutcome, why: str) -> None:
    """Tell Slurm at once that the node is not coming (down, racklife's reason): its job requeues."""
    out.reason = why
    try:
        out.rollback["slurm_down"] = slurm_down(out.node, why)
    except DriverError as exc:
        out.rollback["slurm_down"] = {"error": exc.message}


@DBOS.workflow(name="lend_node")
def lend_node(node: str, settings: ElasticSettings | dict[str, Any]) -> dict[str, Any]:
    """SuspendProgram: the idle node leaves Slurm service and serves Kubernetes (a node cycle)."""
    s = ElasticSettings.of(settings)
    out = ElasticOutcome(node, state=node_state(node), action="lend")
    why = lendable_pool(node)
    if why is not None:
        out.reason = why
        return asdict(out)
    if out.state == "lent":
        out.ok, out.reason = True, "already lent"
        return asdict(out)
    if out.state not in ("in_service", "lending"):
        out.reason = f"node is {out.state}; only a node in service is lent"
        return asdict(out)
    held = take_leases([node], "lend_node")
    if held:
        out.reason = held[node]
        return asdict(out)
    try:
        if out.state == "in_service":  # a lend under way ("lending") already left service
            floor = reserve_floor(node, node_pool(node), [])
            if not floor["ok"]:  # refused like any lend: the node keeps serving Slurm, untouched
                out.reason = f"refused, nothing changed: pool floor: {floor['detail']}"
                return asdict(out)
        # the leave records "lend" (in_service -> lending) once no one else's drain is found
        cycle(node, LeaveSpec(f"lent to Kubernetes ({s.lend_pool})", "wait", 0.0, LEND),
              [RoleSwitch("slurm", "kubernetes", s.role_cmd, s.register_timeout_s)], None, s.kube(), out,
              to=s.lend_pool)
        if not out.ok:
            out.reason = f"lend failed: {out.reason}"
        record_trip(node, "lend", node_pool(node), s.lend_pool, summary(out))
        return asdict(out)
    finally:
        release_leases()


@DBOS.workflow(name="reclaim_node")
def reclaim_node(node: str, settings: ElasticSettings | dict[str, Any]) -> dict[str, Any]:
    """ResumeProgram: Slurm wants the node back; take it from Kubernetes without losing a pod (a node cycle)."""
    s = ElasticSettings.of(settings)
    out = ElasticOutcome(node, state=node_state(node), action="reclaim")
    record = acceptance_record_id(node)
    if record is None:
        _refuse_in_slurm(out, "no passing, unexpired acceptance record: not returned to Slurm (fail closed)")
        return asdict(out)
    if out.state not in ("lent", "reclaiming", "in_service"):
        _refuse_in_slurm(out, f"node is {out.state} in racklife; only a lent node is reclaimed")
        return asdict(out)
    held = take_leases([node], "reclaim_node")
    if held:
        _refuse_in_slurm(out, f"not reclaimed: {held[node]}")
        return asdict(out)
    try:
        if out.state == "lent":  # the lend pool keeps its floor (its own in-service nodes; lent ones are not)
            floor = reserve_floor(node, s.lend_pool, [])
            if not floor["ok"]:
                _refuse_in_slurm(out, f"not reclaimed, node stays in Kubernetes: pool floor: {floor['detail']}")
                return asdict(out)
        if out.state == "in_service":
            _power_up(node, s, out)  # never lent: Slurm powered it down, it only needs its slurmd back
        else:
            _reclaim(node, s, record, out)
        return asdict(out)
    finally:
        release_leases()


def _reclaim(node: str, s: ElasticSettings, record: str, out: ElasticOutcome) -> None:
    if out.state == "lent":
        try:
            transition(node, "reclaim", "Slurm asked for it back (ResumeProgram)", acceptance_record=record)
        except (IllegalTransition, StoreError) as exc:
            _refuse_in_slurm(out, str(exc))
            return
    cycle(node, LeaveSpec("reclaimed by Slurm", deadline_s=s.reclaim_deadline_s, moves=RECLAIM, at=s.lend_pool),
          [RoleSwitch("kubernetes", "slurm", s.role_cmd, s.register_timeout_s)], None, s.kube(), out)
    if not out.ok and node_state(node) == "reclaiming":  # refused before it left: nothing to undo
        out.state = transition(node, "reclaim_fail", out.reason[:500])
    if not out.ok:
        if out.changes:  # it left Kubernetes and never came back: tell Slurm now rather than at ResumeTimeout
            _refuse_in_slurm(out, f"reclaim failed: {out.reason}")
        else:
            _refuse_in_slurm(out, f"reclaim blocked, node stays in Kubernetes: {_blocked(out)}")
    record_trip(node, "reclaim", s.lend_pool, node_pool(node), summary(out))


def _blocked(out: ElasticOutcome) -> str:
    """What held the leave: each pod and its budget, as the Eviction API said, else the leave's reason."""
    report = out.leave.get("report") or {}
    blocked = "; ".join(f"{k}: {v}" for k, v in (report.get("blocked") or {}).items())
    return blocked or str(out.leave.get("reason") or out.reason)


def _power_up(node: str, s: ElasticSettings, out: ElasticOutcome) -> None:
    """A node in service that Slurm powered down (its lend was refused): its slurmd back, racklife's hold lifted."""
    try:
        out.changes["switch"] = {"ok": True, "detail": switch(node, "slurm", s.role_cmd, s.register_timeout_s)}
    except DriverError as exc:
        _refuse_in_slurm(out, f"reclaim failed: {exc.message}")
        return
    try:
        out.join = {"release": slurm_release(node)}
    except NotOurs as exc:
        out.join = {"foreign": exc.message}  # someone else's drain stays; the node is back
    except DriverError as exc:
        out.reason = f"back in Slurm, but racklife's old drain could not be lifted: {exc.message}"
    out.ok = True
    out.reason = out.reason or "back in Slurm service"

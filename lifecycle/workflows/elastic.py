"""Elastic capacity: lend idle Slurm nodes to Kubernetes and take them back, durably.

Slurm's power saving decides *when*: an idle node of a lendable pool is
"suspended" (SuspendProgram → :func:`lend_node`) and a job that needs a
suspended node "resumes" it (ResumeProgram → :func:`reclaim_node`). Both
programs return at once (``lifecycle.cli.slurm_elastic`` starts a worker per
node); the work is a DBOS workflow, so a worker killed mid-way is finished by
the next worker for that node.

What the workflows guarantee on top of the power-saving mechanics:

* **lend**: the node is drained in Slurm with racklife's reason
  (``racklife:<run-id>: lent to Kubernetes``) while it switches role, so no
  job lands on it half-way; it then serves Kubernetes (pool labels and taints,
  racklife's old cordon lifted, never anyone else's) and only then is the drain
  lifted, leaving it ``idle~`` so that a job can call it back. A failed lend
  leaves the node ``drained`` with racklife's drain (``racklife slurm join``
  brings it back).
* **reclaim**: fail closed on the acceptance record first (no pod is touched
  for a node that may not run jobs), then cordon (owned by the run) and evict
  through the Eviction API, honouring PodDisruptionBudgets with backoff up to a
  deadline; pods are never deleted. A blocked reclaim uncordons the node again
  (it keeps serving), marks it down in Slurm with racklife's reason naming the
  budget (Slurm requeues the job at once instead of waiting ResumeTimeout) and
  leaves it ``lent``. Otherwise the node switches role, registers with Slurm
  and only racklife's own drain/down is lifted.

The Kubernetes side is the join and leave of :mod:`lifecycle.workflows.kube_pool`
(the same steps the role swap and ``racklife kube join`` run): a reclaim's drain
runs as the run that holds the cordon, so a node someone else cordoned is never
drained.

The node's role switch itself is the site's hook
(``lifecycle.drivers.slurm.role``); in the lab it stops or boots a slurmd and
registers a Node object in the Kubernetes stand-in.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any

from dbos import DBOS

from lifecycle.drivers.errors import DriverError, OperationFailed
from lifecycle.drivers.slurm.driver import NotOurs, SlurmDriver
from lifecycle.drivers.slurm.role import CommandRoleSwitch, Role
from lifecycle.drivers.slurm.runner import CommandRunner
from lifecycle.model.skus import SKUS
from lifecycle.model.states import IllegalTransition
from lifecycle.store import StoreError, shared_store
from lifecycle.workflows import kube_pool
from lifecycle.workflows.kube_pool import KubeSettings
from lifecycle.workflows.node_ops import current_run_id, node_state, transition
from lifecycle.workflows.retry import step


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


@dataclass
class ElasticOutcome:
    node: str
    action: str
    ok: bool
    state: str
    reason: str = ""
    steps: dict[str, Any] = field(default_factory=dict)


def _slurm() -> SlurmDriver:
    return SlurmDriver(CommandRunner())


def _poll(cond: Any, timeout_s: float, what: str, target: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            raise OperationFailed(target, f"timed out after {timeout_s:.0f}s waiting for {what}")
        time.sleep(0.5)


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


@step(idempotent=True)  # drain/down read first; ours again is already done
def slurm_hold(node: str, human: str, state: str = "drain") -> dict[str, str]:
    """Drain (or mark down) with racklife's reason; refuses when someone else holds the node."""
    driver = _slurm()
    hold = driver.drain if state == "drain" else driver.down
    owner = hold([node], current_run_id(), human)[node]
    if owner.kind != "racklife":
        raise NotOurs(node, owner)
    return {"owner": owner.kind, "run": owner.run_id or ""}


@step(idempotent=True)  # resume_if_ours reads first
def slurm_release(node: str) -> list[dict[str, str]]:
    """Lift racklife's own drain/down on the node (any racklife run's); a foreign one raises NotOurs."""
    return [{"node": r.node, "action": r.action} for r in _slurm().resume_if_ours([node])]


@step(idempotent=False)  # reboots the node into another role
def switch_role(node: str, role: str, settings: dict[str, Any]) -> str:
    s = ElasticSettings.from_dict(settings)
    target: Role = "slurm" if role == "slurm" else "kubernetes"
    return CommandRoleSwitch(s.role_cmd).switch(node, target)


def kube_settings(settings: dict[str, Any]) -> KubeSettings:
    s = ElasticSettings.from_dict(settings)
    return KubeSettings(s.kubeconfig, ready_timeout_s=s.register_timeout_s, poll_s=0.5)


def kube_serve(node: str, settings: dict[str, Any]) -> dict[str, Any]:
    """The Kubernetes join (kube_pool steps): Ready with every GPU, the pool's labels and taints, cordon lifted."""
    ks = kube_settings(settings)
    pool = settings["lend_pool"]
    return {"ready": kube_pool.kube_wait_ready(node, SKUS[shared_store().get(node).sku].gpu_count, ks),
            "pool": kube_pool.kube_set_pool(node, pool, ks), "uncordon": kube_pool.kube_lift_own_cordon(node, ks)}


def kube_evict(node: str, settings: dict[str, Any]) -> dict[str, Any]:
    """The Kubernetes leave's steps (kube_pool): cordon owned by this run, then drain as that run.

    A node someone else cordoned is left with its pods: the drain is never started.
    """
    ks = kube_settings(settings)
    cordon = kube_pool.kube_cordon(node, "reclaimed by Slurm", ks)
    if cordon["action"] == "foreign":
        return {"cordon": "foreign", "complete": False,
                "error": f"cordoned by {cordon['owner']}: racklife leaves the node and its pods"}
    report = kube_pool.kube_drain(node, ElasticSettings.from_dict(settings).reclaim_deadline_s, ks)
    return {"cordon": cordon["action"], **report}


@step(idempotent=True)
def acceptance_record_id(node: str) -> str | None:
    rec = shared_store().valid_acceptance(node)
    return rec.id if rec else None


@step(idempotent=False)  # a wait to a deadline: a retry would extend it
def slurm_registered(node: str, timeout_s: float) -> str:
    """Wait until the node's slurmd has registered (no longer powering up, responding)."""
    driver = _slurm()

    def back() -> bool:
        st = driver.node(node).state
        return st.responding and not st.powered_down and "POWERING_UP" not in st.flags
    _poll(back, timeout_s, "the node's slurmd to register", node)
    return str(driver.node(node).state)


# ------------------------------------------------------------------ workflows


def _refuse_in_slurm(out: ElasticOutcome, why: str) -> None:
    """Tell Slurm at once that the node is not coming (down, racklife's reason): its job requeues."""
    out.reason = why
    try:
        out.steps["slurm_down"] = slurm_hold(out.node, why, "down")
    except DriverError as exc:
        out.steps["slurm_down"] = {"error": exc.message}


@DBOS.workflow(name="lend_node")
def lend_node(node: str, settings: dict[str, Any]) -> dict[str, Any]:
    """SuspendProgram: the idle node leaves Slurm service and serves Kubernetes."""
    out = ElasticOutcome(node, "lend", False, node_state(node))
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
    if out.state == "in_service":
        transition(node, "lend", f"Slurm suspended it: lent to Kubernetes pool {settings['lend_pool']}")
    try:
        out.steps["drain"] = slurm_hold(node, f"lent to Kubernetes ({settings['lend_pool']})")
        out.steps["switch"] = switch_role(node, "kubernetes", settings)
        out.steps["kube"] = kube_serve(node, settings)
        out.steps["release"] = slurm_release(node)
    except (DriverError, StoreError, ValueError) as exc:
        out.reason = f"lend failed: {getattr(exc, 'message', None) or exc}"
        out.state = transition(node, "lend_fail", out.reason)
        return asdict(out)
    out.state = transition(node, "lend_done", f"serving Kubernetes pool {settings['lend_pool']}")
    out.ok = True
    return asdict(out)


@DBOS.workflow(name="reclaim_node")
def reclaim_node(node: str, settings: dict[str, Any]) -> dict[str, Any]:
    """ResumeProgram: Slurm wants the node back; take it from Kubernetes without losing a pod."""
    out = ElasticOutcome(node, "reclaim", False, node_state(node))
    record = acceptance_record_id(node)
    if record is None:
        _refuse_in_slurm(out, "no passing, unexpired acceptance record: not returned to Slurm (fail closed)")
        return asdict(out)
    if out.state not in ("lent", "reclaiming", "in_service"):
        _refuse_in_slurm(out, f"node is {out.state} in racklife; only a lent node is reclaimed")
        return asdict(out)
    if out.state == "lent":
        try:
            transition(node, "reclaim", "Slurm asked for it back (ResumeProgram)", acceptance_record=record)
        except (IllegalTransition, StoreError) as exc:
            _refuse_in_slurm(out, str(exc))
            return asdict(out)
    if out.state != "in_service":  # a node in service was never lent: just power it up for Slurm
        try:
            out.steps["evict"] = evict = kube_evict(node, settings)
        except DriverError as exc:
            out.steps["evict"] = evict = {"complete": False, "error": exc.message}
        if not evict.get("complete"):
            blocked = "; ".join(f"{k}: {v}" for k, v in evict.get("blocked", {}).items())
            left = evict.get("error") or blocked or f"pods still terminating: {evict.get('terminating')}"
            _lift_own_cordon(out, node, settings)
            _refuse_in_slurm(out, f"reclaim blocked, node stays in Kubernetes: {left}")
            out.state = transition(node, "reclaim_fail", out.reason)
            return asdict(out)
    try:
        out.steps["switch"] = switch_role(node, "slurm", settings)
        out.steps["slurm"] = slurm_registered(node, settings["register_timeout_s"])
        out.steps["release"] = slurm_release(node)
    except NotOurs as exc:
        out.steps["release"] = {"foreign": exc.message}  # someone else's drain stays; the node is back
    except DriverError as exc:
        if "slurm" in out.steps:  # it registered: only lifting our old drain failed; say so, keep it
            out.reason = f"back in Slurm, but racklife's old drain could not be lifted: {exc.message}"
        else:  # it never came back: tell Slurm now rather than at ResumeTimeout (the job requeues)
            _refuse_in_slurm(out, f"reclaim failed: {exc.message}")
            if out.state != "in_service":
                out.state = transition(node, "reclaim_fail", out.reason)
            return asdict(out)
    if out.state != "in_service":
        out.state = transition(node, "reclaim_done", "back in Slurm service")
    out.ok = True
    return asdict(out)


def _lift_own_cordon(out: ElasticOutcome, node: str, settings: dict[str, Any]) -> None:
    """After a blocked reclaim the node keeps serving Kubernetes: lift this run's cordon."""
    if out.steps.get("evict", {}).get("cordon") == "foreign":
        return  # not ours to lift
    try:
        out.steps["uncordon"] = kube_pool.kube_lift_own_cordon(node, kube_settings(settings))
    except DriverError as exc:
        out.steps["uncordon"] = {"error": exc.message}

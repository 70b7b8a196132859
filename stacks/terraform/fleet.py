"""The provider's one way to the fleet: the planner's refresh, plan and apply for the nodes concerned.

Every Terraform operation lands here and nowhere else: a read is
``plan_fleet`` for the nodes read (what each source says, what racklife would
do, what blocks it); a create or update is the planner's ``apply`` for the
nodes changed, with the inventory composed from the base file and the
resources (:mod:`stacks.terraform.desired`); a delete is the plan of the
inventory without the node (a decommission). Nothing is decided here that
the planner decides for ``racklife apply``; what is added is fail-closed
refusal: a node whose plan holds a step racklife has no workflow for yet is
not touched at all (half a plan, such as a drain with no reimage after it,
would leave it out of service), and a node with running jobs is not
decommissioned.

Calls that Terraform makes together are gathered into one planner call
(:mod:`stacks.terraform.batch`), one at a time per provider process, so four
creates are one provisioning run and one acceptance run. Runs of a provider
process that was killed mid-apply (Ctrl-C, a lost CI runner) are recovered by
the next one's Controller (role ``terraform``) and awaited before it plans,
so a re-apply re-attaches to them instead of starting anew.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from lifecycle.model.inventory import Inventory, Pool, load_inventory
from lifecycle.model.states import Actor, State
from lifecycle.planner import observe as sources_of
from lifecycle.planner.apply import ApplyReport, ApplySettings
from lifecycle.planner.fleet import plan_fleet
from lifecycle.planner.observed import Observation
from lifecycle.planner.plan import NodePlan, Plan
from lifecycle.store import Store, StoreError
from stacks.terraform.batch import Batcher
from stacks.terraform.desired import NodeWant, compose, groups
from stacks.terraform.settings import ProviderSettings

READ_WINDOW_S = 0.3
APPLY_WINDOW_S = 2.0


@dataclass(frozen=True)
class NodeView:
    """One node as the provider reports it: racklife's belief, what the sources said, what remains."""

    name: str
    exists: bool  # the store knows the node
    state: str
    pool: str | None
    power: str | None = None
    booted_image: str | None = None
    booted_version: str | None = None
    slurm_state: str | None = None
    kube_ready: bool | None = None
    jobs: tuple[str, ...] = ()
    acceptance_record: str | None = None
    firmware: Mapping[str, str] = field(default_factory=dict)
    steps: tuple[str, ...] = ()
    cannot: tuple[str, ...] = ()  # the steps racklife has no workflow for yet (also in ``steps``)
    blockers: tuple[str, ...] = ()
    drift: tuple[str, ...] = ()
    observed_at: str | None = None


@dataclass(frozen=True)
class Outcome:
    """What an apply did for one node: ``problems`` is empty only when the node converged."""

    view: NodeView
    problems: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.problems


def _say(message: str) -> None:
    print(f"racklife: {message}", file=sys.stderr, flush=True)  # Terraform keeps a provider's stderr in its log


def view_of(name: str, p: NodePlan | None, o: Observation | None, stored_pool: str | None,
            want: NodeWant | None) -> NodeView:
    if p is None and o is None:
        return NodeView(name, exists=stored_pool is not None, state="absent", pool=stored_pool)
    steps = [f"{s.describe()} (why: {s.reason})" for s in p.steps] if p is not None else []
    cannot = [s.describe() for s in p.steps if not s.implemented] if p is not None else []
    return NodeView(
        name=name, exists=stored_pool is not None, state=p.state if p is not None else str(o.state if o else ""),
        pool=stored_pool,
        power=o.bmc.power if o is not None and o.bmc is not None else None,
        booted_image=o.boot.image if o is not None and o.boot is not None else None,
        booted_version=o.boot.version if o is not None and o.boot is not None else None,
        slurm_state=o.slurm.state if o is not None and o.slurm is not None else None,
        kube_ready=o.kube.ready if o is not None and o.kube is not None else None,
        jobs=o.slurm.jobs if o is not None and o.slurm is not None else (),
        acceptance_record=o.acceptance.record if o is not None and o.acceptance is not None else None,
        firmware=dict(o.bmc.firmware) if o is not None and o.bmc is not None else {},
        steps=tuple(steps), cannot=tuple(cannot),
        blockers=tuple(f"{b.kind}: {b.message}" for b in p.blockers) if p is not None else (),
        drift=tuple(f"{d.source.value}/{d.kind}: {d.message}" for d in p.drift) if p is not None else (),
        observed_at=o.at.isoformat() if o is not None else None)


def _problems(name: str, report: ApplyReport) -> tuple[str, ...]:
    out = [f"{d.action.value} failed (run {d.run_id or '-'}): {d.detail}" for d in report.done
           if d.node == name and not d.ok]
    if name in report.skipped:
        out.append(f"left for a later apply: {report.skipped[name]}")
    final = next((n for n in report.final.nodes if n.node == name), None) if report.final else None
    if final is not None:
        out += [f"still to do: {s.describe()}" for s in final.steps]
        out += [f"blocked ({b.kind}): {b.message}" for b in final.blockers]
    return tuple(out)


class Fleet:
    """The planner, for one provider process (see the module's docstring)."""

    def __init__(self, settings: ProviderSettings) -> None:
        self.settings = settings
        self._lock = threading.Lock()  # one planner call at a time in this process
        self._reads: Batcher[NodeWant | None, NodeView] = Batcher(self._observe, READ_WINDOW_S, self._lock)
        self._applies: Batcher[NodeWant, Outcome] = Batcher(self._apply, APPLY_WINDOW_S, self._lock)

    # ------------------------------------------------------------ nodes

    def view(self, want: NodeWant) -> NodeView:
        """Refresh and plan ``want.name`` against what Terraform asks of it (gathered with other reads)."""
        return self._reads.submit(want.name, want)

    def observe(self, name: str) -> NodeView:
        """Refresh and plan ``name`` against the store's own wishes (the data source; an import)."""
        return self._reads.submit(name, None)

    def converge(self, want: NodeWant) -> Outcome:
        """Apply: converge the node on ``want`` (gathered with the other nodes Terraform applies now)."""
        return self._applies.submit(want.name, want)

    def retire(self, name: str) -> Outcome:
        """Delete: the plan of the inventory without the node, carried out only if racklife can and it is idle."""
        with self._lock:
            return self._retire(name)

    # ------------------------------------------------------------ pools

    def pool(self, name: str) -> Pool | None:
        """The pool's definition in the store (the last import or racklife_pool apply), None if it has none."""
        store = Store()
        try:
            return store.pool(name)
        except StoreError:
            return None
        finally:
            store.close()

    def put_pool(self, name: str, pool: Pool) -> Pool:
        """Record the pool's definition: an import of the composed inventory that changes no node."""
        with self._lock:
            store = Store()
            try:
                inv = compose(self.base(), store, pools={name: pool}, for_import=True)
                store.import_inventory(inv, Actor.OPERATOR, f"terraform: racklife_pool {name}, by "
                                                            f"{self.settings.operator}")
                return store.pool(name)
            finally:
                store.close()

    def pool_members(self, name: str) -> list[str]:
        store = Store()
        try:
            return [r.name for r in store.nodes(pool=name) if r.state is not State.DECOMMISSIONED]
        finally:
            store.close()

    # ------------------------------------------------------------ internals

    def base(self) -> Inventory:
        return load_inventory(self.settings.inventory)

    def _sources(self, wants: Mapping[str, NodeWant]) -> sources_of.Sources:
        kube = {"RACKLIFE_KUBECONFIG": self.settings.kubeconfig} if self.settings.kubeconfig else {}
        # Firmware is read for the nodes with a baseline only (the planner's refresh asks for theirs).
        return sources_of.default_sources({**os.environ, **kube}, firmware=False)

    def _views(self, store: Store, plan: Plan, names: Sequence[str],
               wants: Mapping[str, NodeWant]) -> dict[str, NodeView]:
        seen = sources_of.load(store, [n for n in names])
        pools = {r.name: r.pool for r in store.nodes()}
        by_node = {n.node: n for n in plan.nodes}
        return {n: view_of(n, by_node.get(n), seen.get(n) if n in pools else None, pools.get(n), wants.get(n))
                for n in names}

    def _observe(self, asks: dict[str, NodeWant | None]) -> dict[str, NodeView]:
        store = Store()
        try:
            base = self.base()
            known = {r.name for r in store.nodes()} | {n.name for n in base.nodes}
            wants = {n: w for n, w in asks.items() if w is not None and n in known}
            rest = sorted(n for n, w in asks.items() if w is None and n in known)  # the data source's reads
            views: dict[str, NodeView] = {}
            for i, part in enumerate(groups(wants) or [{}]):
                names = sorted(part) + (rest if i == 0 else [])
                if names:
                    plan = plan_fleet(store, compose(base, store, part), names, self._sources(part))
                    views.update(self._views(store, plan, names, part))
            return {n: views.get(n) or NodeView(n, exists=False, state="absent", pool=None) for n in asks}
        finally:
            store.close()

    def _apply(self, wants: dict[str, NodeWant]) -> dict[str, Outcome]:
        """Each group of :func:`groups` in turn: one inventory (and one apply) per set of pinned versions."""
        out: dict[str, Outcome] = {}
        for part in groups(wants):
            out.update(self._apply_group(part))
        return out

    def _apply_group(self, wants: dict[str, NodeWant]) -> dict[str, Outcome]:
        store = Store()
        try:
            names = sorted(wants)
            inv = compose(self.base(), store, wants)
            sources = self._sources(wants)
            first = self._views(store, plan_fleet(store, inv, names, sources), names, wants)
            out = {n: Outcome(v, tuple(f"racklife cannot carry out this yet, so nothing was done to {n}: {step}"
                                       for step in v.cannot)) for n, v in first.items() if v.cannot}
            # Blocked, and by nothing a recovered run could clear: apply would act on nothing; say why at once.
            out.update({n: Outcome(v, tuple(f"blocked ({b})" for b in v.blockers)) for n, v in first.items()
                        if n not in out and v.blockers and not any(b.startswith("held:") for b in v.blockers)})
            go = [n for n in names if n not in out]
            if not go:
                return out
            report = self._carry_out(store, inv, go, sources)
            after = self._views(store, report.final or Plan([]), go, wants)
            out.update({n: Outcome(after[n], _problems(n, report)) for n in go})
            return out
        finally:
            store.close()

    def _carry_out(self, store: Store, inv: Inventory, names: list[str], sources: sources_of.Sources) -> ApplyReport:
        """The planner's apply for ``names``, its runs in this process's Controller (role ``terraform``)."""
        from lifecycle.planner.durable import carry_out
        from lifecycle.workflows import engine
        from lifecycle.workflows.controller import Controller

        s = self.settings
        with Controller("terraform", say=_say, operator=s.operator) as ctl:
            for r in ctl.recovered:  # a killed provider's runs: they finish before anything is planned
                _say(f"re-attaching to run {r.run_id} ({r.workflow}) of a provider process that is gone")
                try:
                    engine.retrieve(r.run_id).get_result()
                except Exception as exc:  # its outcome is in the store; the plan below starts from it
                    _say(f"run {r.run_id} ended with an error: {exc}")
            # A live racklife serve runs the whole apply (it outlives this provider); else it runs here.
            return carry_out(ctl, store, inv, names, sources, s.runner(),
                             ApplySettings(s.operator, s.max_in_flight, s.max_unavailable), say=_say)

    def _retire(self, name: str) -> Outcome:
        store = Store()
        try:
            if name not in {r.name for r in store.nodes()}:
                return Outcome(NodeView(name, exists=False, state="absent", pool=None))
            full = compose(self.base(), store)
            inv = full.model_copy(update={"nodes": [n for n in full.nodes if n.name != name]})
            sources = self._sources({})
            view = self._views(store, plan_fleet(store, inv, [name], sources), [name], {})[name]
            problems: list[str] = []
            if view.jobs:
                problems.append(f"Slurm job(s) {', '.join(view.jobs)} running on {name}: racklife decommissions "
                                "only an idle node; the node stays in service and in the Terraform state")
            problems += [f"racklife cannot decommission {name} yet, so nothing was done: {step}"
                         for step in view.cannot]
            problems += [f"blocked: {b}" for b in view.blockers]
            if problems or not view.steps:
                return Outcome(view, tuple(problems))
            report = self._carry_out(store, inv, [name], sources)
            after = self._views(store, report.final or Plan([]), [name], {})[name]
            return Outcome(after, _problems(name, report))
        finally:
            store.close()

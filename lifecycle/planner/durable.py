"""``racklife apply`` as one durable run that ``racklife serve`` executes.

Embedded, apply's wave loop runs in the apply process: killed, its runs are
recovered by the next apply, but the loop itself is gone. With a service
running, the apply command hands the whole apply to it instead, as the
workflow ``apply_fleet``: the same loop (:func:`lifecycle.planner.apply.waves`),
with each wave's decision — re-observe, re-plan, the next action, the
``--max-unavailable`` room — a journaled step, and each wave's runs child
runs of it (DBOS names them ``PARENT-N``; their operator is the apply's). So
the command can be interrupted (the apply goes on in the service), and a
service killed mid-apply has the apply taken over by a peer, which replays
the recorded waves (the same child runs, awaited, not started again) and
decides the next ones afresh. Run ids the waves choose (an acceptance run's)
are journaled steps too, so a replay names the same runs.

The run's argument is :class:`ApplyRequest`: the inventory (its text as the
command read it, or the model a stack composed: a recovered run plans against
what was asked, not a file changed since), the nodes, the actions it may take,
the limits and the runner's settings (``assemble.RunnerSettings``, the one
assembly of the runner that the command, the service and the stacks share),
typed. Its result is the :class:`ApplyReport`.

:func:`carry_out` is the one way every front end applies: `racklife apply`,
the Pulumi provider host and the Terraform provider hand the whole apply to a
live service, and run the wave loop themselves only when none is running.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar, TypeVarTuple, Unpack

from dbos import DBOS

from lifecycle.model.inventory import Inventory, parse_inventory
from lifecycle.planner import observe
from lifecycle.planner.apply import ApplyReport, ApplySettings, Wave, apply, decide, waves
from lifecycle.planner.assemble import RunnerSettings, workflow_runner
from lifecycle.planner.fleet import plan_fleet
from lifecycle.planner.plan import Action, Plan
from lifecycle.store import Store, operators, shared_store
from lifecycle.workflows import engine
from lifecycle.workflows.controller import Recovered, RunHandle
from lifecycle.workflows.retry import step

if TYPE_CHECKING:
    from lifecycle.planner.runner import BootServerFactory
    from lifecycle.workflows.controller import Controller

log = logging.getLogger(__name__)
R = TypeVar("R")
Ts = TypeVarTuple("Ts")


@dataclass(frozen=True)
class ApplyRequest:
    """Everything one apply needs, as the durable run's argument."""

    inventory: str | Inventory | None  # the YAML text read, or a stack's composed model; None: the last import
    inventory_file: str  # where it was read from, for messages
    names: tuple[str, ...] | None
    cfg: ApplySettings
    runner: RunnerSettings
    only: tuple[Action, ...] | None = None  # the actions the apply may take (a stack's resource owns a part)

    def inventory_model(self) -> Inventory | None:
        if isinstance(self.inventory, str):
            return parse_inventory(self.inventory, self.inventory_file)
        return self.inventory

    def actions(self) -> frozenset[Action] | None:
        return frozenset(self.only) if self.only is not None else None

    def sources(self) -> observe.Sources:
        kube = self.runner.kube()
        env = dict(os.environ) | ({"RACKLIFE_KUBECONFIG": kube.kubeconfig} if kube else {})
        return observe.default_sources(env, firmware=False, store=shared_store())


@step(idempotent=True)  # reads the sources, plans; an enrolment is an import, which is idempotent
def decide_wave(req: ApplyRequest, failed: list[str], skipped: list[str]) -> Wave:
    return decide(shared_store(), req.inventory_model(), req.names, req.sources(), req.cfg, frozenset(failed),
                  frozenset(skipped), req.actions())


@step(idempotent=True)  # reads only
def final_plan(req: ApplyRequest) -> Plan:
    return plan_fleet(shared_store(), req.inventory_model(), req.names, req.sources())


@step(idempotent=True)
def fresh_id(prefix: str) -> str:
    return f"{prefix}-{os.urandom(6).hex()}"


@dataclass(frozen=True)
class Journaled:
    """The loop's planning as steps of the durable run (``apply.Planning``)."""

    req: ApplyRequest

    def wave(self, failed: frozenset[str], skipped: frozenset[str]) -> Wave:
        return decide_wave(self.req, sorted(failed), sorted(skipped))

    def final(self) -> Plan:
        return final_plan(self.req)


class InRun:
    """Starts the waves' runs as children of the durable run (``controller.Starter``)."""

    service = "racklife serve"  # the boot server is the service's, never started inside the run

    def start(self, func: Callable[[Unpack[Ts]], R], *args: *Ts, workflow_id: str | None = None,
              nodes: Collection[str] = ()) -> RunHandle[R]:
        if workflow_id is None:  # DBOS names it PARENT-N: it takes the apply's operator from its id
            return DBOS.start_workflow(func, *args)
        store = shared_store()  # an id of its own (an acceptance run): it is recorded as the apply's operator's
        store.record_operator(workflow_id, store.run_operator(str(DBOS.workflow_id)) or operators.current())
        with engine.with_id(workflow_id):
            return DBOS.start_workflow(func, *args)

    def register_queue(self, name: str, concurrency: int, per_process: bool = False) -> None:
        each, every = (concurrency, None) if per_process else (None, concurrency)
        DBOS.register_queue(name, worker_concurrency=each, global_concurrency=every,
                            polling_interval_sec=engine.QUEUE_POLL_S,
                            on_conflict="always_update")

    def cut_off(self, workflow: str) -> list[Recovered]:
        return []  # a recovered apply replays its own children

    def handle(self, run_id: str) -> Any:
        return DBOS.retrieve_workflow(run_id)


@DBOS.workflow(name="apply_fleet")
def apply_fleet(req: ApplyRequest) -> ApplyReport:
    """Converge the chosen nodes, wave by wave, each wave decided by a journaled step; what it did."""
    inv = req.inventory_model()
    run = str(DBOS.workflow_id)

    def say(m: str) -> None:
        log.info("apply %s: %s", run, m)

    runner = workflow_runner(InRun(), shared_store(), req.runner, {n.name: n.pool for n in inv.nodes} if inv else {},
                             say=say, new_id=fresh_id)
    return waves(Journaled(req), runner, say=say)


def carry_out(ctl: Controller, store: Store, inv: Inventory | None, names: Sequence[str] | None,
              sources: observe.Sources, settings: RunnerSettings, cfg: ApplySettings, *,
              say: Callable[[str], None] = lambda _m: None, only: frozenset[Action] | None = None,
              boot_server: BootServerFactory | None = None, inventory_text: str | None = None,
              inventory_file: str = "", handed: Callable[[str], None] | None = None) -> ApplyReport:
    """The planner's apply of ``inv`` to ``names`` (``only`` these actions), wherever it belongs.

    With a live ``racklife serve`` (``ctl.service``) the whole apply is handed to it as one durable
    run, :func:`apply_fleet`, and awaited: the wave loop survives this process (a Pulumi provider
    host or Terraform provider killed mid-apply, a command's Ctrl-C), and a peer service takes it
    over if the service dies. ``handed(run_id)`` is called once it is started (the command's
    ``--no-wait`` ends there). Without a service the wave loop runs here, with ``ctl``'s runs.
    ``inventory_text``: the text ``inv`` was read from, sent instead of the model (what was asked).
    """
    if ctl.service is not None:
        req = ApplyRequest(inventory_text if inventory_text is not None else inv, inventory_file,
                           tuple(names) if names is not None else None, cfg, settings,
                           tuple(sorted(only, key=lambda a: a.value)) if only is not None else None)
        handle = ctl.start(apply_fleet, req)
        run_id = str(handle.get_workflow_id())
        say(f"apply {run_id} runs in racklife serve ({ctl.service.id}); it goes on there if this process stops")
        if handed is not None:
            handed(run_id)
        return handle.get_result()
    move_to: Mapping[str, str] = {n.name: n.pool for n in inv.nodes} if inv is not None else {}
    runner = workflow_runner(ctl, store, settings, move_to, say=say, boot_server=boot_server)
    return apply(store, inv, names, sources, runner, cfg, say=say, only=only)

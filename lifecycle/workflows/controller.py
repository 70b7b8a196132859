"""The one way a front end runs workflows: launch, recover, start, await, shut down.

Each CLI command used to launch DBOS its own way and shut it down when its own
run returned. DBOS had meanwhile recovered the command's earlier, killed run in
the background on the same nodes, and the shutdown pulled the engine from
under it ("System database accessed before DBOS was launched", that run left
PENDING for ever). :class:`Controller` is the one helper:

* each process gets its own executor id (``HOST/ROLE/UNIQUE``) and a row with
  its pid and a heartbeat in the store, so a later process can tell a dead
  process's pending runs from a live one's (same host: the pid says at once;
  another host: a heartbeat older than ``HEARTBEAT_TIMEOUT_S``);
* on entry it recovers the pending runs of dead executors of its role, sweeps
  the runs no one can replay (:func:`leasing.sweep`) and releases terminal
  runs' leases;
* :meth:`Controller.start` waits for a recovered run holding any of the new
  run's nodes before starting it, so two runs never race for a node in one
  process (across processes the lease step refuses instead);
* on exit it awaits every run it started or recovered, then shuts DBOS down.

With a live ``racklife serve`` (an executor of role ``serve`` whose heartbeat
is fresh), a command's Controller does not run workflows itself: it hands each
run to the service's queue (``registry.SERVE_QUEUE``, by the workflow's pinned
name, through a ``DBOSClient``) and awaits it there, and leaves recovery to
the service. The service's own Controller adopts the runs of dead executors of
every role, at start and on every :meth:`Controller.take_over`.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Callable, Collection
from dataclasses import dataclass
from datetime import UTC, datetime
from types import TracebackType
from typing import Any, Generic, Protocol, TypeVar, TypeVarTuple, Unpack, cast

from dbos import DBOS, DBOSClient, EnqueueOptions
from dbos._utils import INTERNAL_QUEUE_NAME  # the queue DBOS recovers runs through

from lifecycle.model.procs import pid_start
from lifecycle.store import Store, connect, db, leases, operators, shared_store
from lifecycle.workflows import engine, leasing, registry

HEARTBEAT_S = 5.0
HEARTBEAT_TIMEOUT_S = leases.HEARTBEAT_TIMEOUT_S
SERVE_ROLE = leases.SERVE_ROLE
executor_alive = leases.executor_alive
R = TypeVar("R")
R_co = TypeVar("R_co", covariant=True)
Ts = TypeVarTuple("Ts")
# A stopped service's last heartbeat: long enough ago that every peer takes its runs over at once.
STOPPED_AT = datetime(1970, 1, 1, tzinfo=UTC)


def live_services(store: Store, host: str | None = None, now: datetime | None = None) -> list[leases.Executor]:
    """The ``racklife serve`` processes alive now (same host: by pid; another: by heartbeat)."""
    return leases.alive(store, host or engine.executor_id(), now, role=SERVE_ROLE)


def workflow_name(func: Callable[..., Any]) -> str:
    """The name a workflow is registered under (pinned with ``@DBOS.workflow(name=…)``)."""
    return str(getattr(func, "dbos_function_name", func.__qualname__))
def run_orphaned(store: Any, executor: str | None) -> bool:
    """Whether the process that ran a PENDING run (its executor id) is gone, so another may recover it."""
    if not executor:
        return True
    host = engine.executor_id()
    ex = next((e for e in leases.executors(store) if e.id == executor), None)
    if ex is not None:
        return not executor_alive(ex, host, datetime.now(UTC))
    return executor.split("/", 1)[0] == host  # no row: it ended, or an older racklife on this host


@dataclass(frozen=True)
class Recovered:
    """A run of a dead process of this role, now running here."""

    run_id: str
    workflow: str
    args: tuple[Any, ...]
    nodes: frozenset[str]  # the nodes it holds (its leases), when it has taken them


class RunHandle(Protocol[R_co]):
    """A started run: DBOS's handle, a :class:`Handed` one, or a durable run's child's. ``get_result`` is
    typed by the workflow started (``Controller.start`` checks its arguments against the workflow too)."""

    def get_workflow_id(self) -> str: ...

    def get_result(self) -> R_co: ...


class Handed(Generic[R]):
    """A run handed to the service, awaited from here; says so when no service is left to run it.

    A run waits on the service queue until some service dequeues it: if every
    service is gone, the command keeps waiting (the run starts when one is back)
    rather than run it here beside a service that may only be slow.
    """

    WARN_AFTER_S = HEARTBEAT_TIMEOUT_S + HEARTBEAT_S

    def __init__(self, handle: Any, store: Store, say: Callable[[str], None]) -> None:
        self._handle = handle
        self._store = store
        self._say = say

    def get_workflow_id(self) -> str:
        return str(self._handle.get_workflow_id())

    def get_result(self) -> R:
        alone_since: float | None = None
        warned = False
        while self._handle.get_status().status in leasing.LIVE:
            if live_services(self._store):
                alone_since = None
            elif alone_since is None:
                alone_since = time.monotonic()
            elif not warned and time.monotonic() - alone_since > self.WARN_AFTER_S:
                self._say(f"no racklife serve is alive: run {self.get_workflow_id()} waits until one starts "
                          "(`racklife serve`, or `systemctl start racklife`)")
                warned = True
            time.sleep(1.0)
        return cast(R, self._handle.get_result())  # the service's run of the workflow this handle was typed by


class Starter(Protocol):
    """What starts runs for a front end: a :class:`Controller`, or a durable run starting its children
    (``lifecycle.planner.durable``)."""

    service: Any  # the live service runs are handed to (not None: the boot server runs elsewhere)

    def start(self, func: Callable[[Unpack[Ts]], R], *args: *Ts, workflow_id: str | None = None,
              nodes: Collection[str] = ()) -> RunHandle[R]: ...

    def register_queue(self, name: str, concurrency: int, per_process: bool = False) -> None: ...

    def cut_off(self, workflow: str) -> list[Recovered]: ...

    def handle(self, run_id: str) -> Any: ...


class Controller:
    """Context manager around the workflow engine for one command (or service) of ``role``."""

    def __init__(self, role: str, url: str | None = None, say: Callable[[str], None] = lambda _m: None,
                 *, hand_off: bool = True, operator: str | None = None) -> None:
        self.role = role
        self.url = url
        self.say = say
        self.hand_off = hand_off and role != SERVE_ROLE
        self.host = engine.executor_id()
        self.executor_id = f"{self.host}/{role}/{uuid.uuid4().hex[:8]}"
        # Who the runs started here are recorded as started by: the command's operator, or the service itself.
        self.operator = operator or (f"racklife serve {self.executor_id}" if role == SERVE_ROLE
                                     else operators.current())
        self.recovered: list[Recovered] = []
        self.sweep = leasing.Sweep()
        self.service: leases.Executor | None = None  # the live service runs are handed to, if any
        self._client: DBOSClient | None = None
        self._handles: dict[str, Any] = {}
        self._stop = threading.Event()
        self._beat: threading.Thread | None = None

    # ------------------------------------------------------------ lifecycle

    def __enter__(self) -> Controller:
        assert registry.MODULES  # every workflow is registered before launch
        url = self.url or db.default_url()
        if self.hand_off:
            connect.ensure_store(url)
            found = live_services(shared_store(url), self.host)
            if found:
                self.url, self.service = url, max(found, key=lambda ex: ex.heartbeat_at)
                self.store = shared_store(url)
                self._client = DBOSClient(system_database_url=url)
                self.say(f"handing runs to racklife serve ({self.service.id})")
                return self
        serving = self.role == SERVE_ROLE
        self.url = engine.launch(url, executor=self.executor_id,
                                 queues=None if serving else registry.EMBEDDED_QUEUES)
        try:
            self.store = shared_store(self.url)
            self._register()
            self._beat = threading.Thread(target=self._heartbeat, name="racklife-heartbeat", daemon=True)
            self._beat.start()
            if serving:
                try:
                    self._recover()
                except Exception as e:  # a peer recovering the same runs at once: the takeover loop goes on
                    self.say(f"recovery at start incomplete ({e}); the takeover loop tries again")
            else:
                self._recover()
        except BaseException:
            self._close(retire=False)
            raise
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if kind is None or issubclass(kind, Exception):
            # Never shut the engine down under a run: await every run this process holds.
            for run_id, handle in list(self._handles.items()):
                try:
                    handle.get_result()
                except Exception as e:  # the run's own error is its outcome, recorded by DBOS
                    self.say(f"run {run_id} ended with an error: {e}")
        # Interrupted (^C, SystemExit): leave the runs PENDING; the next command of this role recovers them.
        self._close(retire=kind is None or issubclass(kind, Exception))

    def _close(self, retire: bool) -> None:
        if self._client is not None:
            self._client.destroy()
            return
        self._stop.set()
        if self._beat is not None:
            self._beat.join(timeout=HEARTBEAT_S + 1)
        left = retire and hasattr(self, "store") and self._pending_here()
        engine.shutdown()
        if hasattr(self, "store"):
            if retire and not left:
                leases.retire_executor(self.store, self.executor_id)
            elif self.role == SERVE_ROLE:
                # Runs are left PENDING here: say so at once, so a peer adopts them without waiting 30 s.
                leases.heartbeat(self.store, self.executor_id, at=STOPPED_AT)

    def _pending_here(self) -> bool:
        """Whether runs of this executor are left unfinished (a service stops without awaiting its runs)."""
        if self.role != SERVE_ROLE:
            return False
        return bool(DBOS.list_workflows(status=["PENDING"], executor_id=self.executor_id, load_input=False,
                                        load_output=False))

    def _register(self) -> None:
        now = datetime.now(UTC)
        leases.register_executor(self.store, leases.Executor(
            self.executor_id, self.host, self.role, os.getpid(), pid_start(os.getpid()), now, now))

    def _heartbeat(self) -> None:
        while not self._stop.wait(HEARTBEAT_S):
            try:
                if not leases.heartbeat(self.store, self.executor_id):
                    # A peer found this process silent (paused, or cut off from the database) and took
                    # its runs over: it is alive again, and says so, or its later runs would be nobody's.
                    self.say(f"executor {self.executor_id} was taken for dead; registering it again")
                    self._register()
            except Exception as e:  # a missed beat only makes this process look dead sooner
                self.say(f"heartbeat not recorded: {e}")

    # ------------------------------------------------------------ recovery

    def _dead_executors(self) -> Callable[[str], bool]:
        rows = {ex.id: ex for ex in leases.executors(self.store)}
        now = datetime.now(UTC)

        def dead(executor: str) -> bool:
            if executor == self.executor_id:
                return False
            ex = rows.get(executor)
            if ex is not None:
                return not executor_alive(ex, self.host, now)
            # No row: a process of an older racklife (HOST/ROLE), or one that ended cleanly.
            return executor.split("/", 1)[0] == self.host
        return dead

    @staticmethod
    def _role_of(executor: str, rows: dict[str, leases.Executor]) -> str:
        """The executor's role: from its row; without one (retired, or an older racklife's HOST/ROLE), from
        its id, ``HOST/ROLE/UNIQUE`` (the role may hold a slash: ``elastic/NODE``)."""
        ex = rows.get(executor)
        if ex is not None:
            return ex.role
        rest = executor.split("/", 1)[-1]
        head, _, tail = rest.rpartition("/")
        return head if head and len(tail) == 8 and all(c in "0123456789abcdef" for c in tail) else rest

    def _recover(self) -> None:
        dead = self._dead_executors()
        pending = DBOS.list_workflows(status=["PENDING", "MAX_RECOVERY_ATTEMPTS_EXCEEDED"], load_output=False)
        self.sweep = leasing.sweep(self.store, pending, dead)
        for a in self.sweep.abandoned:
            self.say(a.describe())
        rows = {ex.id: ex for ex in leases.executors(self.store)}
        serving = self.role == SERVE_ROLE
        # The service adopts every role, but only executors it knows are dead (a row: an elastic
        # worker has none and finishes its node's runs itself); a command adopts its own role.
        mine = sorted({s.executor_id for s in pending
                       if s.status == "PENDING" and s.app_version == engine.APP_VERSION and s.executor_id
                       and dead(s.executor_id)
                       and (s.executor_id in rows if serving else self._role_of(s.executor_id, rows) == self.role)})
        if mine:
            self._adopt(mine, {s.workflow_id: s for s in pending}, keep=not serving)
        for ex_id in mine:
            if ex_id in rows:
                leases.retire_executor(self.store, ex_id)
        if not serving:
            self._requeued(dead, rows)

    def _requeued(self, dead: Callable[[str], bool], rows: dict[str, leases.Executor]) -> None:
        """The runs of this role an earlier process put back on DBOS's queue to recover them, and died before
        it took them (still ENQUEUED under their dead executor): this process takes them from the queue;
        they count as recovered here, so a command waits for them (or finishes them) rather than starting a
        run beside them (whose lease step would only refuse: the run holds the node)."""
        queued = DBOS.list_workflows(status=["ENQUEUED"], queue_name=INTERNAL_QUEUE_NAME, load_output=False)
        for s in queued:
            if s.app_version != engine.APP_VERSION or not s.executor_id or not dead(s.executor_id) \
                    or self._role_of(s.executor_id, rows) != self.role or s.workflow_id in self._handles:
                continue
            wid = s.workflow_id
            self._handles[wid] = DBOS.retrieve_workflow(wid)
            args = tuple(s.input["args"]) if isinstance(s.input, dict) else ()
            self.recovered.append(Recovered(wid, s.name, args, frozenset(leases.leased_to(self.store, wid))))
            self.say(f"recovering run {wid} ({s.name}) of a process that is gone (it was queued again)")

    def _adopt(self, executors: list[str], by_id: dict[str, Any], keep: bool) -> list[str]:
        """Re-enqueue the executors' PENDING runs (DBOS's queue lets exactly one process run each)."""
        adopted = []
        for handle in DBOS._recover_pending_workflows(executors):
            wid = handle.get_workflow_id()
            s = by_id.get(wid)
            adopted.append(wid)
            if s is None or not keep:  # a child workflow started since the listing: its parent awaits it
                continue
            self._handles[wid] = handle
            args = tuple(s.input["args"]) if isinstance(s.input, dict) else ()  # text: DBOS could not decode
            held = frozenset(leases.leased_to(self.store, wid))
            self.recovered.append(Recovered(wid, s.name, args, held))
            self.say(f"recovering run {wid} ({s.name}) of a process that is gone")
        return adopted

    def take_over(self) -> dict[str, list[str]]:
        """The service's periodic duty: adopt the PENDING runs of every executor found dead since.

        Returns dead executor id -> the runs re-enqueued. Two services taking over the same
        executor at once is harmless: re-enqueuing matches only runs still PENDING on the dead
        executor, and a queue admits one process per run.
        """
        now = datetime.now(UTC)
        dead = sorted(ex.id for ex in leases.executors(self.store)
                      if ex.id != self.executor_id and not executor_alive(ex, self.host, now))
        out: dict[str, list[str]] = {}
        if not dead:
            return out
        pending = DBOS.list_workflows(status=["PENDING", "MAX_RECOVERY_ATTEMPTS_EXCEEDED"], load_input=False,
                                      load_output=False)
        swept = leasing.sweep(self.store, pending, set(dead).__contains__)
        for a in swept.abandoned:
            self.say(a.describe())
        for ex_id in dead:
            runs = self._adopt([ex_id], {}, keep=False)
            leases.retire_executor(self.store, ex_id)
            out[ex_id] = runs
            if runs:
                self.say(f"executor {ex_id} is silent: {len(runs)} of its run(s) re-enqueued here")
        return out

    def register_queue(self, name: str, concurrency: int, per_process: bool = False) -> None:
        """(Re)configure a queue, here or through the service: at most ``concurrency`` runs of it at
        once across every process that dequeues from it (``per_process``: in each process)."""
        each, every = (concurrency, None) if per_process else (None, concurrency)
        if self._client is not None:
            self._client.register_queue(name, worker_concurrency=each, global_concurrency=every,
                                        polling_interval_sec=engine.QUEUE_POLL_S)
        else:
            DBOS.register_queue(name, worker_concurrency=each, global_concurrency=every,
                                polling_interval_sec=engine.QUEUE_POLL_S,
                                on_conflict="always_update")

    def cut_off(self, workflow: str) -> list[Recovered]:
        """Recovered runs of ``workflow`` (oldest first), e.g. to adopt one instead of starting anew."""
        return [r for r in self.recovered if r.workflow.endswith(workflow)]

    # ------------------------------------------------------------ runs

    def start(self, func: Callable[[Unpack[Ts]], R], *args: *Ts, workflow_id: str | None = None,
              nodes: Collection[str] = ()) -> RunHandle[R]:
        """Start ``func(*args)`` as a workflow (with ``workflow_id`` if given); return its handle.

        A run this process recovered that holds any of ``nodes`` is awaited first. The run's id is
        chosen here and its operator recorded before it starts, so every row it writes names who asked.
        """
        workflow_id = workflow_id or str(uuid.uuid4())
        self.store.record_operator(workflow_id, self.operator)
        if self._client is not None:
            options: EnqueueOptions = {"queue_name": registry.SERVE_QUEUE, "workflow_name": workflow_name(func),
                                       "app_version": engine.APP_VERSION}
            options["workflow_id"] = workflow_id
            handed: Handed[R] = Handed(self._client.enqueue(options, *args), self.store, self.say)
            self._handles[handed.get_workflow_id()] = handed
            return handed
        wanted = set(nodes)
        for r in self.recovered:
            if r.run_id in self._handles and (r.nodes & wanted or self._holds_any(r.run_id, wanted)):
                self.say(f"waiting for run {r.run_id}, recovered here, which holds some of these nodes")
                try:
                    self._handles[r.run_id].get_result()
                except Exception as e:
                    self.say(f"run {r.run_id} ended with an error: {e}")
        with engine.with_id(workflow_id):
            handle = DBOS.start_workflow(func, *args)
        self._handles[handle.get_workflow_id()] = handle
        return handle

    def start_or_finish(self, func: Callable[[str, Unpack[Ts]], R], node: str, *args: *Ts) -> RunHandle[R]:
        """The handle of ``func``'s run for ``node`` (its first argument): the one a killed process left, else new.

        A one-node command (role swap, decommission, repair) finishes the run a killed controller cut
        off for this node, with the settings it started with, rather than start a second run beside it
        (whose lease step would only refuse). Otherwise ``func(node, *args)`` starts, holding ``node``.
        """
        name = workflow_name(func)
        for r in self.recovered:
            if r.args and r.args[0] == node and r.workflow.endswith(name) and r.run_id in self._handles:
                self.say(f"{node}: finishing {name} run {r.run_id}, cut off earlier, with the settings it "
                         "started with")
                return cast(RunHandle[R], self._handles[r.run_id])  # a run of ``func``, by its name
        return self.start(func, node, *args, nodes=[node])

    def _holds_any(self, run_id: str, nodes: set[str]) -> bool:
        return bool(nodes & set(leases.leased_to(self.store, run_id)))

    def detach(self) -> list[str]:
        """Stop tracking the runs handed to the service (``--no-wait``): they go on there; return their ids.

        Only a run the service executes may be left running: one of this process would stop with it.
        """
        if self._client is None:
            raise RuntimeError("only runs handed to racklife serve can be left running")
        runs = list(self._handles)
        self._handles.clear()
        return runs

    def runs(self) -> list[str]:
        """The runs this process started or recovered (what an interrupted command leaves pending)."""
        return list(self._handles)

    def handle(self, run_id: str) -> Any:
        """The handle of a run this process started or recovered."""
        return self._handles[run_id]

    def resume(self, run_id: str) -> Any:
        handle = self._client.resume_workflow(run_id) if self._client is not None else DBOS.resume_workflow(run_id)
        self._handles[run_id] = handle
        return handle

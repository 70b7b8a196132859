"""The durable workflow engine: DBOS Transact, configured once for racklife.

Why DBOS: each workflow step is checkpointed in the same database as our own
tables, so a controller killed at any point resumes from the last finished
step. What we design for (DBOS traits):

* A step cut off by a crash runs again: every step reads actual state first,
  or passes ``run_id:step`` as an idempotency token (see ``step_token``).
* In-flight workflows carry the application version that started them; a
  controller only recovers workflows of its own version. ``APP_VERSION`` is
  pinned and bumped deliberately; a changed step inside a released workflow
  uses ``DBOS.patch`` instead of a bump.
* Each process has its own ``executor_id`` (``HOST/ROLE/UNIQUE``, HOST from
  ``RACKLIFE_EXECUTOR_ID`` else the host name), set by
  :class:`lifecycle.workflows.controller.Controller`, which recovers the pending
  runs of dead processes of its role (``racklife provision`` started after a
  crash finishes the provisioning runs that crash cut off, and nothing else);
  a command that only looks (``workflows list``) does not launch DBOS at all
  (:class:`Inspector`).
* Queues are registered after launch (``register_queue``).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from dbos import DBOS, DBOSClient, DBOSConfig, SetWorkflowID

from lifecycle.model import events
from lifecycle.model.redact import install_logging_filter
from lifecycle.store import connect, db, leases

# 0.2: provisioning journals one step per phase (begin, inspect, boot attempt, verify)
# instead of one per BMC call. 0.3: the phone-home wait is a step that reads the stored
# report (await_phone_home) instead of DBOS.recv. 0.4: runs take their nodes' leases as a
# step (one run per node) and acceptance takes typed settings. Runs started under an older
# version are not replayed by this code: a controller marks them failed (leasing.sweep).
# 0.5: the one-time network boot is its own (retried) step, set_network_boot, before the
# power cycle (boot_attempt, run once); steps declare idempotency (workflows/retry.py).
# 0.6: elastic lend/reclaim run the Kubernetes join/leave steps of kube_pool (wait_ready, set
# pool, lift own cordon; cordon, drain as the run) instead of their own.
# 0.7: provisioning in three steps, not six (begin and inspect; network boot and power cycle;
# phone-home and verdict: each journal write was controller CPU); a role swap reserves its
# source pool's floor as a step (reserve_floor) after its pre-checks.
# 0.8: a role swap runs the per-node cycle (node_cycle: leave, changes, re-test, join) with its pool
# move and role switch as changes; reimage (changes.change_node) and rolling upgrade (upgrade) runs.
# 0.9: elastic lend and reclaim run the node cycle (node_ops.LEND / RECLAIM, a lease each, phase times in a
# lend or reclaim history row); the role switch is one step (role_switch.switch_role) for every workflow.
# 0.10: a lend and a reclaim reserve their source pool's floor on the lease (leasing.reserve_floor, the role
# swap's step) before they touch the node.
# 0.11: provisioning takes its node's lease in its first step (begin_run), not a step of its own.
# 0.12: the boot server's provisioning settings are typed inside every run's arguments (ProvisionSettings, each
# image a BootImage, in a role swap's, a repair's, a change's and a read-back's settings), and a durable apply's
# request carries one RunnerSettings: a run recorded with the old shapes is swept, not decoded.
# 0.13: a run gives its leases back with a plain call, not a release_leases step; provisioning's first step
# (begin_run) also starts the first boot attempt (two steps per node, not three).
# 0.14: apply_fleet returns the ApplyReport and its request names the actions it may take (the stacks' part).
# 0.15: provision_many awaits its children in one step (await_runs), not one recorded result per child.
APP_VERSION = "racklife-0.15"
NOTIFICATION_POLL_S = 0.5
# How often every racklife queue looks for a free slot. Each look is a few DBOS queries whether or
# not a slot is free (about 2 ms of CPU), so at 0.05 s an idle `racklife serve` spent about 4 % of a
# core per queue on them, and a 1,000-node provisioning two polls per node; a slot waits half the
# interval longer on average (1 % of a 10 s boot). docs/provisioning.md, Throughput.
QUEUE_POLL_S = 0.2

_launched_url: str | None = None


def executor_id() -> str:
    return leases.this_host()


def launch(url: str | None = None, *, executor: str | None = None, role: str = "cli",
           queues: Sequence[str] | None = None) -> str:
    """Configure and launch DBOS on ``url`` (default: the store's URL); return the URL.

    Pending workflows of this executor (``HOST/ROLE``) and version are recovered on launch.
    ``queues``: the only queues this process dequeues from (DBOS's own recovery queue
    always); None: every queue registered in the database.
    """
    global _launched_url
    url = url or db.default_url()
    if _launched_url is not None:
        if _launched_url != url:
            raise RuntimeError(f"DBOS already launched on {_launched_url}")
        return url
    # The URL checked, WAL on, racklife's schema migrated under racklife's lock, before DBOS
    # opens the database (DBOS runs its own migrations on launch; they touch none of ours).
    connect.ensure_store(url)
    install_logging_filter()
    events.configure()  # RACKLIFE_EVENT_LOG: JSON lines of transitions and steps, in any process that runs them
    config: DBOSConfig = {
        "name": "racklife",
        "system_database_url": url,
        "application_version": APP_VERSION,
        "executor_id": executor or f"{executor_id()}/{role}",
        "log_level": os.environ.get("RACKLIFE_DBOS_LOG_LEVEL", "WARNING"),
        # On SQLite DBOS polls for messages and events once per interval (PostgreSQL is woken
        # by LISTEN/NOTIFY). racklife's own long waits (phone-home) read the store instead.
        "notification_listener_polling_interval_sec": NOTIFICATION_POLL_S,
    }
    DBOS(config=config)
    if queues is not None:
        DBOS.listen_queues(queues)
    DBOS.launch()
    _launched_url = url
    return url


def shutdown() -> None:
    global _launched_url
    DBOS.destroy(workflow_completion_timeout_sec=0)
    _launched_url = None


def start(func: Any, *args: Any) -> Any:
    """Start a workflow in the background; returns its handle (``get_workflow_id``, ``get_result``)."""
    return DBOS.start_workflow(func, *args)


def retrieve(workflow_id: str) -> Any:
    return DBOS.retrieve_workflow(workflow_id)


def step_token(run_id: str, step: str) -> str:
    """A deterministic idempotency token for a side effect of one step of one run."""
    return f"{run_id}:{step}"


def with_id(workflow_id: str) -> SetWorkflowID:
    """Context manager: start the next workflow with this id (idempotent start)."""
    return SetWorkflowID(workflow_id)


@dataclass(frozen=True)
class RunInfo:
    id: str
    name: str
    status: str
    created_at: datetime | None
    updated_at: datetime | None
    app_version: str | None
    executor: str | None
    error: str | None
    inputs: Any = None
    output: Any = None


@dataclass(frozen=True)
class StepRecord:
    step: int
    name: str
    output: Any
    error: str | None


def _ts(ms: int | None) -> datetime | None:
    return datetime.fromtimestamp(ms / 1000, UTC) if ms else None


def _info(s: Any) -> RunInfo:
    return RunInfo(
        id=s.workflow_id, name=s.name, status=s.status,
        created_at=_ts(s.created_at), updated_at=_ts(s.updated_at),
        app_version=s.app_version, executor=s.executor_id,
        error=str(s.error) if s.error else None,
        inputs=s.input, output=s.output,
    )


class Inspector:
    """Reads and cancels runs through the database only (DBOSClient): no launch, so no recovery.

    Launching DBOS recovers this executor's unfinished workflows and runs them;
    a command that only looks (``workflows list``) must never do that.
    """

    def __init__(self, url: str | None = None) -> None:
        url = url or db.default_url()
        connect.ensure_store(url)
        probe = sa.create_engine(connect.sqlalchemy_url(url))
        try:
            # A database no workflow has run on yet has no DBOS tables: nothing to list.
            self.empty = not sa.inspect(probe).has_table(
                "workflow_status", schema=None if db.is_sqlite(url) else "dbos")
        finally:
            probe.dispose()
        self._client = DBOSClient(system_database_url=url)

    def close(self) -> None:
        self._client.destroy()

    def list_runs(self, status: str | list[str] | None = None, name: str | None = None,
                  limit: int = 100) -> list[RunInfo]:
        if self.empty:
            return []
        runs = self._client.list_workflows(status=status, name=name, limit=limit, sort_desc=True)
        return [_info(s) for s in runs]

    def get_run(self, workflow_id: str) -> RunInfo | None:
        if self.empty:
            return None
        runs = self._client.list_workflows(workflow_ids=[workflow_id])
        return _info(runs[0]) if runs else None

    def run_steps(self, workflow_id: str) -> list[StepRecord]:
        return [
            StepRecord(s["function_id"], s["function_name"], s["output"],
                       str(s["error"]) if s["error"] else None)
            for s in self._client.list_workflow_steps(workflow_id)
        ]

    def cancel(self, workflow_id: str) -> None:
        self._client.cancel_workflow(workflow_id)

    def send(self, workflow_id: str, message: Any, topic: str) -> None:
        """A message to a run (``DBOS.recv(topic)`` in it reads it), through the database."""
        self._client.send(workflow_id, message, topic)

    def pending_messages(self, workflow_id: str, topic: str) -> list[Any]:
        """The messages sent to a run on ``topic`` that it has not received yet, oldest first.

        DBOS has no public call for this; its system database keeps every message in ``notifications``
        until ``DBOS.recv`` marks it ``consumed`` (DBOS 3.4, pinned in pyproject.toml:
        tests/workflows/test_upgrade_control.py fails when that changes).
        """
        if self.empty:
            return []
        from dbos._serialization import deserialize_value

        sys_db: Any = self._client._sys_db
        t = sys_db.tables.notifications
        query = (sa.select(t.c.message, t.c.serialization)
                 .where(*sys_db._wf(t, workflow_id, "destination_uuid"), t.c.topic == topic,
                        t.c.consumed == sa.false())
                 .order_by(t.c.created_at_epoch_ms.asc()))
        with sys_db.engine.begin() as c:
            rows = c.execute(query).fetchall()
        return [deserialize_value(m, ser, sys_db.serializer) for m, ser in rows]

    def event(self, workflow_id: str, key: str) -> Any:
        """The latest value a run published as ``key`` (``DBOS.set_event``), or None."""
        if self.empty:
            return None
        return self._client.get_event(workflow_id, key, timeout_seconds=0)


def resume(workflow_id: str, wait: bool = True) -> Any:
    handle = DBOS.resume_workflow(workflow_id)
    return handle.get_result() if wait else None

"""Where racklife keeps durable state, and the tables it owns there.

One database holds both DBOS's workflow checkpoints and racklife's own tables
(nodes, transitions, acceptance records, evidence index), so a node's state
and the workflow that changed it are committed to the same place. The
embedded default is a SQLite file in WAL mode; a PostgreSQL URL works too.

The tables here are the models; the schema in a database is made by the
Alembic revisions in ``migrations/`` (run by :mod:`lifecycle.store.connect`),
and a test fails when the two differ. Changing a table here means adding a
revision: docs/architecture.md, "Changing the schema".
"""

from __future__ import annotations

import os
from pathlib import Path

import sqlalchemy as sa

metadata = sa.MetaData()

nodes = sa.Table(
    "racklife_nodes",
    metadata,
    sa.Column("name", sa.String(63), primary_key=True),
    sa.Column("serial", sa.String(64), nullable=False, unique=True),
    sa.Column("rack", sa.String(63), nullable=False),
    sa.Column("u", sa.Integer, nullable=False),
    sa.Column("sku", sa.String(64), nullable=False),
    sa.Column("pool", sa.String(63), nullable=False),
    sa.Column("spec", sa.Text, nullable=False),  # the inventory record, canonical JSON
    sa.Column("spec_sha256", sa.String(64), nullable=False),
    sa.Column("state", sa.String(32), nullable=False),
    sa.Column("state_since", sa.DateTime(timezone=True), nullable=False),
    sa.Column("generation", sa.Integer, nullable=False, default=0),
)

pools = sa.Table(
    "racklife_pools",
    metadata,
    sa.Column("name", sa.String(63), primary_key=True),
    sa.Column("spec", sa.Text, nullable=False),  # the inventory's pool definition, JSON
)

transitions = sa.Table(
    "racklife_transitions",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("node", sa.String(63), sa.ForeignKey("racklife_nodes.name"), nullable=False, index=True),
    sa.Column("source", sa.String(32), nullable=True),  # NULL for enrolment
    sa.Column("target", sa.String(32), nullable=False),
    sa.Column("event", sa.String(32), nullable=False),
    sa.Column("actor", sa.String(16), nullable=False),
    sa.Column("reason", sa.Text, nullable=False),
    sa.Column("run_id", sa.String(128), nullable=True, index=True),
    sa.Column("at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("operator", sa.String(128), nullable=True),  # who asked (lifecycle.store.operators); NULL before 0008
)

acceptance_records = sa.Table(
    "racklife_acceptance_records",
    metadata,
    sa.Column("id", sa.String(64), primary_key=True),
    sa.Column("node", sa.String(63), sa.ForeignKey("racklife_nodes.name"), nullable=False, index=True),
    sa.Column("passed", sa.Boolean, nullable=False),
    sa.Column("level", sa.String(16), nullable=False),
    sa.Column("profile", sa.String(64), nullable=False),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("accepted_by", sa.String(128), nullable=False),  # operator or policy
    sa.Column("run_id", sa.String(128), nullable=True),
    sa.Column("summary", sa.Text, nullable=False),  # JSON: verdicts, thresholds, versions
    sa.Column("evidence_dir", sa.Text, nullable=True),
    sa.Column("evidence_sha256", sa.String(64), nullable=True),
)

evidence = sa.Table(
    "racklife_evidence",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("record_id", sa.String(64), sa.ForeignKey("racklife_acceptance_records.id"),
              nullable=False, index=True),
    sa.Column("path", sa.Text, nullable=False),
    sa.Column("sha256", sa.String(64), nullable=False),
    sa.Column("size", sa.BigInteger, nullable=False),
)


boot_tokens = sa.Table(
    "racklife_boot_tokens",
    metadata,
    sa.Column("token_sha256", sa.String(64), primary_key=True),  # the token itself is never stored
    sa.Column("node", sa.String(63), sa.ForeignKey("racklife_nodes.name"), nullable=False, index=True),
    sa.Column("boot_mac", sa.String(17), nullable=False, index=True),
    sa.Column("run_id", sa.String(128), nullable=False),
    sa.Column("attempt", sa.Integer, nullable=False),
    sa.Column("script", sa.Text, nullable=False),  # holds the token until it is spent or replaced
    sa.Column("issued_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("used_at", sa.DateTime(timezone=True), nullable=True),
    sa.Column("report", sa.Text, nullable=True),
    sa.UniqueConstraint("run_id", "attempt", name="uq_boot_token_run_attempt"),
)

# Side effects a step performed (or was about to), keyed by run:step:attempt, so
# a step re-run after a crash never repeats a power cycle.
effects = sa.Table(
    "racklife_effects",
    metadata,
    sa.Column("token", sa.String(200), primary_key=True),
    sa.Column("node", sa.String(63), nullable=False, index=True),
    sa.Column("action", sa.String(32), nullable=False),
    sa.Column("at", sa.DateTime(timezone=True), nullable=False),
)

# One run per node: the workflow run that holds a node. Taken by a step of the run,
# released when the run ends (or by any controller once the run is terminal).
leases = sa.Table(
    "racklife_leases",
    metadata,
    sa.Column("node", sa.String(63), sa.ForeignKey("racklife_nodes.name"), primary_key=True),
    sa.Column("run_id", sa.String(128), nullable=False, index=True),
    sa.Column("workflow", sa.String(64), nullable=False),
    sa.Column("taken_at", sa.DateTime(timezone=True), nullable=False),
    # A role swap's claim on its source pool's floor (min_nodes): the pool the node is leaving.
    # Taken with the floor check in one transaction, counted by every later check, gone with the lease.
    sa.Column("leaving_pool", sa.String(63), nullable=True),
)

# Every process that runs workflows, with a heartbeat: a silent one's pending runs are
# recovered by another. Same host: the pid (and its start time) says at once.
executors = sa.Table(
    "racklife_executors",
    metadata,
    sa.Column("id", sa.String(200), primary_key=True),
    sa.Column("host", sa.String(255), nullable=False),
    sa.Column("role", sa.String(100), nullable=False),
    sa.Column("pid", sa.Integer, nullable=False),
    sa.Column("pid_start", sa.String(32), nullable=True),  # /proc/PID/stat starttime: pids are reused
    sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=False),
)

# What `racklife refresh` last saw of each node, from every source, with the time.
observations = sa.Table(
    "racklife_observations",
    metadata,
    sa.Column("node", sa.String(63), sa.ForeignKey("racklife_nodes.name"), primary_key=True),
    sa.Column("at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("doc", sa.Text, nullable=False),  # JSON: planner.observed.Observation
    # The pool whose scheduler the observation shows the node out of (drained or down in Slurm, not Ready or
    # cordoned in Kubernetes), NULL when serving or unknown: the planner's judgement, kept as a column so that
    # every max_unavailable count (apply's, the rolling upgrade's) reads it without the planner's document.
    sa.Column("out_of_pool", sa.String(63), nullable=True),
)


# What an inventory import changed in a node's record besides its state: a rename, a new
# pool or BMC, other fields. Keyed by serial too (the node's identity), without a foreign
# key, so a node's record history survives a rename and is never in the way of one.
node_changes = sa.Table(
    "racklife_node_changes",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("node", sa.String(63), nullable=False, index=True),  # the name now
    sa.Column("serial", sa.String(64), nullable=False, index=True),
    sa.Column("kind", sa.String(16), nullable=False),  # rename | pool | bmc | spec | role-swap
    sa.Column("old", sa.Text, nullable=True),
    sa.Column("new", sa.Text, nullable=True),
    sa.Column("actor", sa.String(16), nullable=False),
    sa.Column("reason", sa.Text, nullable=False),
    sa.Column("at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("operator", sa.String(128), nullable=True),  # who asked; NULL before 0008
)

# Who started each run (a command's operator, or the service's identity), so every row the run
# writes carries the name, in whichever process runs it.
run_operators = sa.Table(
    "racklife_run_operators",
    metadata,
    sa.Column("run_id", sa.String(128), primary_key=True),
    sa.Column("operator", sa.String(128), nullable=False),
    sa.Column("at", sa.DateTime(timezone=True), nullable=False),
)


# Every failed BMC call a workflow made (lifecycle/drivers/bmc/call_errors.py): append-only, so the
# metrics count them as a counter. ``vendor`` is the driver's identification, else the node's last one.
bmc_call_errors = sa.Table(
    "racklife_bmc_call_errors",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("node", sa.String(63), nullable=False, index=True),
    sa.Column("hardware_type", sa.String(16), nullable=False),  # redfish | ipmi
    sa.Column("vendor", sa.String(64), nullable=False),  # "unknown" when never identified
    sa.Column("error_class", sa.String(32), nullable=False),  # CallErrorClass
    sa.Column("message", sa.Text, nullable=False),  # redacted by the driver's error, cut to 500 characters
    sa.Column("at", sa.DateTime(timezone=True), nullable=False),
)

# The vendor each node's BMC last named (service root and system, or IPMI FRU), so that a call that
# fails before the driver identified the BMC (a timeout on the first request) still has a vendor.
bmc_vendors = sa.Table(
    "racklife_bmc_vendors",
    metadata,
    sa.Column("node", sa.String(63), primary_key=True),
    sa.Column("hardware_type", sa.String(16), nullable=False),
    sa.Column("vendor", sa.String(64), nullable=False),
    sa.Column("seen_at", sa.DateTime(timezone=True), nullable=False),
)

# GPU health events seen on nodes (an Xid in a node's kernel log), once each, and what became of them:
# the repair the table chose, the run that did it, or why none was started (the breaker open, refused).
health_events = sa.Table(
    "racklife_health_events",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("node", sa.String(63), sa.ForeignKey("racklife_nodes.name"), nullable=False, index=True),
    sa.Column("source", sa.String(32), nullable=False),  # kernel_log
    sa.Column("xid", sa.Integer, nullable=False),
    sa.Column("pci", sa.String(32), nullable=False),
    sa.Column("logged_at", sa.String(64), nullable=False),  # the line's own timestamp, as the log printed it
    sa.Column("message", sa.Text, nullable=False),
    sa.Column("bucket", sa.String(64), nullable=False),
    sa.Column("action", sa.String(16), nullable=False),  # the repair table's action
    sa.Column("outcome", sa.String(16), nullable=False),  # health.Outcome
    sa.Column("detail", sa.Text, nullable=False),
    sa.Column("run_id", sa.String(128), nullable=True),
    sa.Column("seen_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    sa.UniqueConstraint("node", "source", "xid", "pci", "logged_at", name="uq_racklife_health_events_line"),
)

# What a run's step is waiting on for a node right now (BMC power, phone-home, burn-in, the drain of
# a job, the eviction of a pod), written by the workflows' wait loops through one helper
# (lifecycle.workflows.waiting) and read by every front end's progress display, also for a run
# another process (racklife serve) executes. A row lives as long as the wait; no foreign key, so a
# stale row never blocks a rename or a decommission.
waits = sa.Table(
    "racklife_waits",
    metadata,
    sa.Column("run_id", sa.String(128), primary_key=True),
    sa.Column("node", sa.String(63), primary_key=True),
    sa.Column("phase", sa.String(32), nullable=False),  # the step in words: leave, boot, burn-in, ...
    sa.Column("waiting_on", sa.Text, nullable=False),  # what, in words: "drain of job 12 (alice)"
    sa.Column("since", sa.DateTime(timezone=True), nullable=False),  # when this wait began
    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
)


def default_home() -> Path:
    home = os.environ.get("RACKLIFE_HOME")
    return Path(home) if home else Path.home() / ".racklife"


_urls: dict[tuple[str | None, str | None, str | None], str] = {}


def default_url() -> str:
    """``RACKLIFE_DB`` if set, else a SQLite file under ``RACKLIFE_HOME`` (default ~/.racklife).

    Asked for by every step that opens the shared store: the answer is kept per value of the
    three variables it depends on, not built again from paths each time."""
    env = os.environ
    key = (env.get("RACKLIFE_DB"), env.get("RACKLIFE_HOME"), env.get("HOME"))
    url = _urls.get(key)
    if url is None:
        url = key[0] or f"sqlite:///{default_home() / 'racklife.sqlite'}"
        _urls[key] = url
    return url


def is_sqlite(url: str) -> bool:
    return url.startswith("sqlite")

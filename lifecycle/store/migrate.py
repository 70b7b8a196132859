"""racklife's schema, versioned: Alembic revisions for racklife's tables only.

DBOS keeps its system tables (and its own migration counter) in the same
database, so racklife's migrations must never see, compare or touch them:
the version table is ``racklife_alembic_version`` and ``include_name`` limits
Alembic to tables named ``racklife_*``. Before anything is created, the
database is checked: a table that is neither racklife's nor DBOS's means the
URL names another application's database, and a revision this code does not
know means a newer racklife migrated it; both are refused with nothing
written. Stores made before migrations existed (racklife's tables, no version
table) are stamped with the initial revision, which is exactly that schema.

The caller (:mod:`lifecycle.store.connect`) holds racklife's lock and the
transaction; this module only decides and migrates. How to add a revision
(``python -m lifecycle.store.migrations "what changed"``): docs/architecture.md,
"Changing the schema".
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from lifecycle.store.errors import StoreUnavailable

if TYPE_CHECKING:
    from alembic.config import Config
    from alembic.script import ScriptDirectory

VERSION_TABLE = "racklife_alembic_version"
TABLE_PREFIX = "racklife_"
SCRIPTS = Path(__file__).with_name("migrations")
# The newest revision, so an up-to-date store is recognised without loading Alembic (~130 ms
# per command). tests/store/test_migrations.py fails when it is not the script directory's head.
HEAD = "0010"

_INITIAL_TABLES = frozenset({
    "racklife_nodes", "racklife_pools", "racklife_transitions", "racklife_acceptance_records",
    "racklife_evidence", "racklife_boot_tokens", "racklife_effects",
})
# Stores made before migrations existed, by the tables they hold: the revision they match.
# Each is what main's db.py held at some point, in the order the tables landed there.
_LEASES = _INITIAL_TABLES | {"racklife_leases", "racklife_executors"}
_OBSERVATIONS = _LEASES | {"racklife_observations"}
LEGACY: dict[frozenset[str], str] = {
    _INITIAL_TABLES: "0001",
    _LEASES: "0002",
    _OBSERVATIONS: "0003",
    _OBSERVATIONS | {"racklife_node_changes"}: "0004",
}

# DBOS's system tables. On SQLite they share the file with ours; on PostgreSQL they live in
# the ``dbos`` schema. A test launches DBOS and checks this list covers what it creates.
DBOS_TABLES = frozenset({
    "application_versions", "dbos_migrations", "notifications", "operation_outputs", "queues",
    "streams", "workflow_events", "workflow_events_history", "workflow_input", "workflow_output",
    "workflow_schedules", "workflow_status",
    # created by DBOS's data-source transactions and on PostgreSQL only, seen in its migrations
    "datasource_outputs", "dbos_datasource_migrations", "event_dispatch_kv",
})


def include_name(name: str | None, type_: str, parent_names: Any) -> bool:
    """Alembic's filter: racklife compares and migrates only its own tables."""
    if type_ == "table":
        return name is not None and name.startswith(TABLE_PREFIX) and name != VERSION_TABLE
    return True


def config(connection: Connection | None = None) -> Config:
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(SCRIPTS))
    cfg.set_main_option("file_template", "%%(rev)s_%%(slug)s")
    cfg.attributes["connection"] = connection
    return cfg


def scripts() -> ScriptDirectory:
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(config())


def current_revision(conn: Connection) -> str | None:
    """The store's revision, read with plain SQL (no Alembic import on the hot path)."""
    if not sa.inspect(conn).has_table(VERSION_TABLE):
        return None
    rows = [r[0] for r in conn.exec_driver_sql(f"SELECT version_num FROM {VERSION_TABLE}")]  # noqa: S608
    if len(rows) > 1:
        raise StoreUnavailable(f"the store has several schema revisions ({', '.join(rows)}); "
                               "it was migrated by a branch of racklife this code does not know")
    return rows[0] if rows else None


def upgrade(conn: Connection, where: str) -> None:
    """Check that ``conn``'s database is racklife's (or empty), then migrate it to the head.

    Raises :class:`StoreUnavailable` with nothing written for another
    application's database, a damaged racklife schema, or a newer one.
    """
    tables = set(sa.inspect(conn).get_table_names())
    foreign = sorted(t for t in tables if not t.startswith(TABLE_PREFIX) and t not in DBOS_TABLES)
    if foreign:
        shown = ", ".join(foreign[:5]) + (", ..." if len(foreign) > 5 else "")
        raise StoreUnavailable(f"{where} is not a racklife store: it holds tables of another "
                               f"application ({shown}); point --db or RACKLIFE_DB at racklife's own database")
    current = current_revision(conn)
    if current == HEAD:
        return
    script = scripts()
    known = {rev.revision for rev in script.walk_revisions()}
    if current is not None and current not in known:
        raise StoreUnavailable(f"{where} has schema revision {current}, newer than this racklife "
                               f"(its newest is {script.get_current_head()}); upgrade racklife")
    from alembic import command

    cfg = config(conn)
    if current is None:
        ours = frozenset(t for t in tables if t.startswith(TABLE_PREFIX))
        if ours and ours not in LEGACY:
            nearest = max(LEGACY, key=lambda known: len(known & ours))
            missing = sorted(nearest - ours)
            extra = sorted(ours - nearest)
            raise StoreUnavailable(f"{where} holds a damaged racklife schema without a revision "
                                   f"(missing: {', '.join(missing) or '-'}; unknown: {', '.join(extra) or '-'})")
        if ours:
            command.stamp(cfg, LEGACY[ours])  # a store from before migrations: the schema it has
    command.upgrade(cfg, "head")

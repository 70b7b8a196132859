"""Alembic's entry point: migrate racklife's tables on the connection the runner hands over.

Only :mod:`lifecycle.store.migrate` runs this (it holds racklife's lock and has
checked that the database is racklife's); there is no alembic.ini and no URL here.
"""

from __future__ import annotations

from alembic import context

from lifecycle.store import db
from lifecycle.store.migrate import VERSION_TABLE, include_name

connection = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError("racklife's migrations run through lifecycle.store.migrate, not the alembic command")

context.configure(
    connection=connection,
    target_metadata=db.metadata,
    version_table=VERSION_TABLE,
    include_name=include_name,
    render_as_batch=True,  # SQLite alters a table by copying it; batch mode writes that for us
    compare_type=True,
)
with context.begin_transaction():
    context.run_migrations()

"""``python -m lifecycle.store.migrations "what changed"``: write the next revision.

Alembic compares a scratch store migrated to the current head with the tables
in ``lifecycle/store/db.py`` and writes what differs as ``NNNN_<slug>.py`` in
``versions/``; read it, then set ``HEAD`` in ``lifecycle/store/migrate.py``.
"""

from __future__ import annotations

import sys
import tempfile

import sqlalchemy as sa
from alembic import command

from lifecycle.store import migrate


def new_revision(message: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        engine = sa.create_engine(f"sqlite:///{tmp}/head.sqlite")
        try:
            with engine.begin() as conn:
                migrate.upgrade(conn, "the scratch store")
                rev_id = f"{int(migrate.scripts().get_current_head() or '0') + 1:04d}"
                command.revision(migrate.config(conn), message=message, autogenerate=True, rev_id=rev_id)
        finally:
            engine.dispose()


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit('usage: python -m lifecycle.store.migrations "what the revision changes"')
    new_revision(sys.argv[1])

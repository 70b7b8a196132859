"""racklife's revisions on PostgreSQL: the models exactly, DBOS's schema untouched, concurrent first use."""

from __future__ import annotations

import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext

from lifecycle.store import connect, db, migrate

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.postgres
def test_revisions_on_postgres_match_the_models(postgres_url: str) -> None:
    url = postgres_url.rsplit("/", 1)[0] + "/racklife_schema"  # a database nobody made yet
    code = "import sys; from lifecycle.store import connect; connect.ensure_store(sys.argv[1])"
    with ThreadPoolExecutor(max_workers=4) as pool:  # separate processes: racklife's lock, not ours
        runs = list(pool.map(lambda _: subprocess.run([sys.executable, "-c", code, url], cwd=REPO,
                                                      capture_output=True, text=True, timeout=120),
                             range(4)))
    assert all(r.returncode == 0 for r in runs), [r.stderr for r in runs]
    engine = sa.create_engine(connect.sqlalchemy_url(url))
    try:
        with engine.connect() as conn:
            ctx = MigrationContext.configure(conn, opts={"include_name": migrate.include_name,
                                                          "compare_type": True})
            assert compare_metadata(ctx, db.metadata) == []
            assert migrate.current_revision(conn) == migrate.HEAD
    finally:
        engine.dispose()

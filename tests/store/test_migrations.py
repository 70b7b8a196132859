"""racklife's schema is made by Alembic revisions: they match the models, and first use is race-free."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext

from lifecycle.store import StoreUnavailable, connect, db, migrate

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "site-h100-2rack.yaml"


def fresh(tmp_path: Path, name: str = "rl.sqlite") -> str:
    url = f"sqlite:///{tmp_path / name}"
    connect.ensure_store(url)
    return url


def tables(path: Path) -> set[str]:
    with sqlite3.connect(path) as conn:
        return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}


def revision(path: Path) -> list[str]:
    with sqlite3.connect(path) as conn:
        return [r[0] for r in conn.execute(f"SELECT version_num FROM {migrate.VERSION_TABLE}")]


def legacy_store(path: Path, revision_made: str) -> sa.Engine:
    """A store as racklife made it before revisions existed: the tables (and columns) it had at
    ``revision_made``, and no version table. (A create_all of today's models would carry columns
    that later revisions add to those tables.)"""
    from alembic import command

    engine = sa.create_engine(f"sqlite:///{path}")
    with engine.begin() as conn:
        command.upgrade(migrate.config(conn), revision_made)
        conn.exec_driver_sql(f"DROP TABLE {migrate.VERSION_TABLE}")
    made = next(t for t, rev in migrate.LEGACY.items() if rev == revision_made)
    assert {t for t in tables(path) if t.startswith("racklife_")} == made
    return engine


def test_head_constant_is_the_newest_revision() -> None:
    # HEAD lets an up-to-date store skip loading Alembic; a revision added without bumping it
    # would never be applied to a store at the old head.
    assert migrate.scripts().get_current_head() == migrate.HEAD


def test_revisions_produce_exactly_the_models(tmp_path: Path) -> None:
    """A table or column changed in db.py without a revision fails here."""
    url = fresh(tmp_path)
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        ctx = MigrationContext.configure(conn, opts={"include_name": migrate.include_name,
                                                      "compare_type": True})
        assert compare_metadata(ctx, db.metadata) == []
    engine.dispose()
    assert {t for t in tables(tmp_path / "rl.sqlite") if t.startswith("racklife_")} == \
        set(db.metadata.tables) | {migrate.VERSION_TABLE}
    assert revision(tmp_path / "rl.sqlite") == [migrate.HEAD]
    assert "alembic_version" not in tables(tmp_path / "rl.sqlite")  # DBOS's file, our own version table


def test_dbos_system_tables_are_known_and_left_alone(tmp_path: Path) -> None:
    """DBOS shares the file: its tables are recognised (not 'another application') and untouched."""
    url = f"sqlite:///{tmp_path / 'rl.sqlite'}"
    code = ("import sys; from lifecycle.workflows import engine; "
            "engine.launch(sys.argv[1], executor='test/migrations'); engine.shutdown()")
    subprocess.run([sys.executable, "-c", code, url], check=True, capture_output=True, timeout=120,
                   env=os.environ | {"PYTHONPATH": str(EXAMPLE.parents[1])})
    made = tables(tmp_path / "rl.sqlite")
    dbos_tables = {t for t in made if not t.startswith("racklife_") and not t.startswith("sqlite_")}
    assert dbos_tables and dbos_tables <= migrate.DBOS_TABLES, dbos_tables - migrate.DBOS_TABLES
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        ctx = MigrationContext.configure(conn, opts={"include_name": migrate.include_name})
        assert compare_metadata(ctx, db.metadata) == []  # DBOS's tables are not ours to drop
    engine.dispose()


@pytest.mark.parametrize("revision_made", sorted(set(migrate.LEGACY.values())))
def test_store_from_before_migrations_is_stamped_upgraded_and_keeps_its_rows(
        tmp_path: Path, revision_made: str) -> None:
    path = tmp_path / "old.sqlite"
    engine = legacy_store(path, revision_made)
    with engine.begin() as conn:
        conn.execute(sa.insert(db.pools).values(name="training", spec="{}"))
    engine.dispose()
    connect.ensure_store(f"sqlite:///{path}")
    assert revision(path) == [migrate.HEAD]
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT name FROM racklife_pools").fetchall() == [("training",)]
    assert {t for t in tables(path) if t.startswith("racklife_")} == \
        set(db.metadata.tables) | {migrate.VERSION_TABLE}


def test_newer_schema_is_refused_untouched(tmp_path: Path) -> None:
    fresh(tmp_path)
    path = tmp_path / "rl.sqlite"
    with sqlite3.connect(path) as conn:
        conn.execute(f"UPDATE {migrate.VERSION_TABLE} SET version_num = '9999'")
    before = path.read_bytes()
    connect._ready.discard(f"sqlite:///{path}")  # as a new process would find it
    with pytest.raises(StoreUnavailable, match=r"revision 9999, newer than this racklife"):
        connect.ensure_store(f"sqlite:///{path}")
    assert revision(path) == ["9999"]
    assert path.read_bytes() == before


def test_damaged_schema_without_revision_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "half.sqlite"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE racklife_nodes (name TEXT PRIMARY KEY)")
    with pytest.raises(StoreUnavailable, match="damaged racklife schema"):
        connect.ensure_store(f"sqlite:///{path}")
    assert tables(path) == {"racklife_nodes"}


def test_store_file_and_directory_are_private(tmp_path: Path) -> None:
    home = tmp_path / "home" / ".racklife"
    connect.ensure_store(f"sqlite:///{home / 'racklife.sqlite'}")
    assert (home.stat().st_mode & 0o777) == 0o700
    assert ((home / "racklife.sqlite").stat().st_mode & 0o777) == 0o600
    assert ((home / "racklife.sqlite.lock").stat().st_mode & 0o777) == 0o600


def test_world_readable_store_from_before_is_made_private(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite"
    legacy_store(path, max(migrate.LEGACY.values())).dispose()
    path.chmod(0o644)
    connect.ensure_store(f"sqlite:///{path}")
    assert (path.stat().st_mode & 0o777) == 0o600


def _import(home: Path) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("racklife") or str(Path(sys.executable).with_name("racklife"))
    env = {k: v for k, v in os.environ.items() if k != "RACKLIFE_DB"} | {"RACKLIFE_HOME": str(home)}
    return subprocess.run([exe, "inventory", "import", str(EXAMPLE), "--json"], env=env,
                          capture_output=True, text=True, timeout=180)


@pytest.mark.slow
def test_concurrent_first_imports_on_a_new_store(tmp_path: Path) -> None:
    """Several `inventory import` at once on a store nobody made yet: all succeed, one adds the nodes.

    Before migrations ran under racklife's lock, a third of such runs died with
    'table racklife_nodes already exists'.
    """
    for round_ in range(3):
        home = tmp_path / f"home{round_}"
        with ThreadPoolExecutor(max_workers=5) as pool:
            results = list(pool.map(_import, [home] * 5))
        for res in results:
            assert res.returncode == 0, res.stderr
            assert "Traceback" not in res.stderr
        added = sorted(len(__import__("json").loads(r.stdout)["added"]) for r in results)
        assert added == [0, 0, 0, 0, 16]
        assert revision(home / "racklife.sqlite") == [migrate.HEAD]

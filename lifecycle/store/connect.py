"""Opening the store: the URL checked, the file made private, the schema migrated under one lock.

Every process that touches the database (a CLI command, the workflow engine
before DBOS launches, the boot server) comes through :func:`ensure_store`
first, so the failure modes of a store are answered in one place, each as one
line (:class:`StoreUnavailable`): a URL that is not a database or names an
engine racklife does not support, an in-memory database that would keep
nothing, a path under a file, an empty or non-SQLite file, another
application's database, a newer schema, a locked, read-only or unreachable
store.

Concurrent first use is safe: the checks, the creation of the file (0600, in
a 0700 directory when racklife creates it) and the migrations run under
racklife's own lock, a ``flock`` on ``<db>.lock`` beside a SQLite file or a
PostgreSQL advisory lock, and the migration is one transaction.
"""

from __future__ import annotations

import fcntl
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import URL, Engine

from lifecycle.model.redact import redact
from lifecycle.store import migrate
from lifecycle.store.errors import StoreUnavailable

LOCK_TIMEOUT_S = float(os.environ.get("RACKLIFE_DB_LOCK_TIMEOUT_S", "30"))
SQLITE_MAGIC = b"SQLite format 3\x00"
SUPPORTED = "sqlite:///PATH or postgresql://USER@HOST[:PORT]/DB"
# racklife's advisory-lock key on PostgreSQL: "racklife" as a signed 64-bit number.
PG_LOCK_KEY = int.from_bytes(b"racklife", "big", signed=True)

# (text in the driver's message, what the user is told); first match wins.
_DRIVER_MESSAGES: tuple[tuple[str, str], ...] = (
    ("database is locked", "is locked by another process (waited {timeout:.0f} s)"),
    ("readonly database", "is read-only; racklife needs to write its store"),
    ("read-only file system", "is read-only; racklife needs to write its store"),
    ("file is not a database", "is not a SQLite database"),
    ("database disk image is malformed", "is damaged (database disk image is malformed)"),
    ("unable to open database file", "cannot be opened (missing directory or no permission)"),
    ("connection refused", "does not answer (connection refused)"),
    ("could not translate host name", "names a host that does not resolve"),
    ("name or service not known", "names a host that does not resolve"),
    ("timeout expired", "does not answer (connection timed out)"),
    ("password authentication failed", "refused racklife's credentials"),
    ("does not exist", "names a database that does not exist"),
)

_ready: set[str] = set()
_ready_lock = threading.Lock()


def shown(url: str) -> str:
    """The URL as it may be printed: password hidden, credentials redacted."""
    try:
        parsed = sa.engine.make_url(url)
    except sa.exc.ArgumentError:
        return redact(url)
    return redact(parsed.render_as_string(hide_password=True) if parsed.password else url)


def unavailable(exc: BaseException, url: str) -> StoreUnavailable:
    """One line for a driver error on ``url``; the driver's own text only when no rule knows it."""
    orig = getattr(exc, "orig", None) or exc
    text = str(orig).strip()
    low = text.lower()
    for needle, told in _DRIVER_MESSAGES:
        if needle in low:
            return StoreUnavailable(f"the store {shown(url)} " + told.format(timeout=LOCK_TIMEOUT_S))
    first = text.splitlines()[0] if text else type(orig).__name__
    return StoreUnavailable(f"the store {shown(url)} cannot be used: {redact(first)}")


def parse(url: str) -> URL:
    """A URL racklife can keep its store in, or :class:`StoreUnavailable` saying why not."""
    try:
        parsed = sa.engine.make_url(sqlalchemy_url(url))
    except sa.exc.ArgumentError:
        raise StoreUnavailable(f"'{shown(url)}' is not a database URL (use {SUPPORTED})") from None
    backend, driver = parsed.get_backend_name(), parsed.get_driver_name()
    if (backend, driver) not in {("sqlite", "pysqlite"), ("postgresql", "psycopg")}:
        raise StoreUnavailable(f"racklife cannot keep its store in {parsed.drivername}:// "
                               f"(use {SUPPORTED})")
    if backend == "sqlite" and (not parsed.database or parsed.database == ":memory:"
                                or parsed.query.get("mode") == "memory"
                                or parsed.database.startswith("file:")):
        raise StoreUnavailable(f"'{shown(url)}' is an in-memory or URI database, which keeps nothing "
                               "after the command; use sqlite:///PATH")
    return parsed


def sqlalchemy_url(url: str) -> str:
    """DBOS takes ``postgresql://``; SQLAlchemy needs the psycopg 3 driver named."""
    if url.startswith("postgresql://") or url.startswith("postgres://"):
        return "postgresql+psycopg://" + url.split("://", 1)[1]
    return url


def sqlite_path(url: str) -> Path:
    database = parse(url).database
    assert database  # parse refuses a SQLite URL without a path
    return Path(database)


def ensure_store(url: str) -> None:
    """Check ``url`` and migrate its schema to this code's head, once per process."""
    with _ready_lock:
        if url in _ready:
            return
        parsed = parse(url)
        if parsed.get_backend_name() == "sqlite":
            _ensure_sqlite(url, sqlite_path(url))
        else:
            _ensure_postgres(url)
        _ready.add(url)


def open_engine(url: str) -> Engine:
    """The engine every store reader and writer uses, after :func:`ensure_store`.

    On SQLite, transactions are SQLite's own (the driver's implicit ones start
    only at the first write, so a read-then-write, such as an import, could
    race another process): ``BEGIN IMMEDIATE`` (the write lock first) unless
    the connection is made with ``READ`` as execution options (``BEGIN``).
    """
    ensure_store(url)
    if parse(url).get_backend_name() == "sqlite":
        return _sqlite_engine(url, begin="IMMEDIATE")
    return sa.create_engine(sqlalchemy_url(url), pool_pre_ping=True)


READ = {"racklife_begin": "DEFERRED"}


def _sqlite_engine(url: str, *, begin: str = "DEFERRED") -> Engine:
    engine = sa.create_engine(url, connect_args={"timeout": LOCK_TIMEOUT_S})

    @event.listens_for(engine, "connect")
    def _connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None  # racklife says BEGIN itself, below
        dbapi_conn.execute("PRAGMA foreign_keys=ON")
        dbapi_conn.execute(f"PRAGMA busy_timeout={int(LOCK_TIMEOUT_S * 1000)}")

    @event.listens_for(engine, "begin")
    def _begin(conn: Any) -> None:
        conn.exec_driver_sql(f"BEGIN {conn.get_execution_options().get('racklife_begin', begin)}")

    return engine


# ------------------------------------------------------------------ SQLite


def _private_dir(store: Path) -> None:
    directory = store.parent
    for p in (directory, *directory.parents):
        if p.exists() and not p.is_dir():
            raise StoreUnavailable(f"{p} is a file, not a directory, so the store {store} cannot be "
                                   "made there (check RACKLIFE_HOME and --db)")
    try:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        raise StoreUnavailable(f"cannot create the store's directory {directory}: {exc.strerror}") from None


@contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    lock = path.with_name(path.name + ".lock")
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as exc:
        why = "is read-only" if exc.errno in (13, 30) else f"cannot be written ({exc.strerror})"
        raise StoreUnavailable(f"the store's directory {path.parent} {why}; racklife needs to "
                               "write its store") from None
    try:
        deadline = time.monotonic() + LOCK_TIMEOUT_S
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise StoreUnavailable(f"the store {path} is locked by another racklife "
                                           f"(waited {LOCK_TIMEOUT_S:.0f} s on {lock})") from None
                time.sleep(0.05)
        yield
    finally:
        os.close(fd)  # closing drops the lock


def _check_sqlite_file(path: Path) -> None:
    if path.is_dir():
        raise StoreUnavailable(f"the store {path} is a directory, not a SQLite file")
    if path.stat().st_size == 0:
        raise StoreUnavailable(f"the store {path} is an empty file, not a racklife store "
                               "(remove it to start a new store)")
    with path.open("rb") as fh:
        if fh.read(len(SQLITE_MAGIC)) != SQLITE_MAGIC:
            raise StoreUnavailable(f"the store {path} is not a SQLite database")
    if not os.access(path, os.W_OK):
        raise StoreUnavailable(f"the store {path} is read-only; racklife needs to write its store")


def _tighten(path: Path) -> None:
    """Stores made before racklife created them 0600 were world-readable: make them private."""
    for p in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        try:
            st = p.stat()
            if st.st_mode & 0o077 and st.st_uid == os.geteuid():
                p.chmod(st.st_mode & 0o700)
        except OSError:
            continue


def _ensure_sqlite(url: str, path: Path) -> None:
    _private_dir(path)
    with _file_lock(path):
        if path.exists():
            _check_sqlite_file(path)
            _tighten(path)
        else:
            try:
                os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
            except OSError as exc:
                raise StoreUnavailable(f"cannot create the store {path}: {exc.strerror}") from None
        engine = _sqlite_engine(url, begin="IMMEDIATE")
        try:
            with engine.begin() as conn:
                migrate.upgrade(conn, f"the store {path}")
            # WAL once the file is known to be racklife's (another application's is left as it
            # was), still under the lock, before DBOS or any reader opens it. SQLite switches
            # outside a transaction only, so on the driver's own connection.
            raw = engine.raw_connection()
            try:
                raw.driver_connection.execute("PRAGMA journal_mode=WAL")  # type: ignore[union-attr]
            finally:
                raw.close()
        except sa.exc.DBAPIError as exc:
            raise unavailable(exc, url) from None
        finally:
            engine.dispose()


# ------------------------------------------------------------------ PostgreSQL


def _create_database(url: str) -> None:
    """Create the database the URL names, as DBOS would on its first launch."""
    target = parse(url)
    admin = sa.create_engine(target.set(database="postgres"), isolation_level="AUTOCOMMIT",
                             connect_args={"connect_timeout": 10})
    try:
        with admin.connect() as conn:
            exists = conn.execute(sa.text("SELECT 1 FROM pg_database WHERE datname = :n"),
                                  {"n": target.database}).first()
            if exists is None:
                name = admin.dialect.identifier_preparer.quote(target.database or "")
                conn.exec_driver_sql(f"CREATE DATABASE {name}")
    except sa.exc.DBAPIError as exc:
        if "already exists" not in str(exc):  # another racklife created it meanwhile
            raise unavailable(exc, url) from None
    finally:
        admin.dispose()


def _ensure_postgres(url: str) -> None:
    try:
        _migrate_postgres(url)
    except StoreUnavailable as exc:
        if "does not exist" not in str(exc):
            raise
        _create_database(url)
        _migrate_postgres(url)


def _migrate_postgres(url: str) -> None:
    engine = sa.create_engine(sqlalchemy_url(url), connect_args={"connect_timeout": 10})
    try:
        with engine.connect() as conn:
            conn.execute(sa.text("SELECT pg_advisory_lock(:k)"), {"k": PG_LOCK_KEY})
            conn.commit()
            try:
                with conn.begin():
                    migrate.upgrade(conn, f"the store {shown(url)}")
            finally:
                conn.execute(sa.text("SELECT pg_advisory_unlock(:k)"), {"k": PG_LOCK_KEY})
                conn.commit()
    except sa.exc.DBAPIError as exc:
        raise unavailable(exc, url) from None
    finally:
        engine.dispose()

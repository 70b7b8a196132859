"""Who asked: the operator's name that every history row carries, and the runs it started.

History said *what* moved a node (the actor: operator, workflow, policy) and
which run; an audit asks *who*. A run started by a command records the
command's operator against its run id (``racklife_run_operators``) before it
starts, so every transition the run makes, in whichever process executes it
(a command's own engine, or a ``racklife serve`` it was handed to), carries
that name; a child run (a node of a provisioning run, of a rolling upgrade)
takes its parent's, found by DBOS's child id (``PARENT-N``). A write that no
run makes (an import, a command's own transition) takes the process's
operator: ``--operator`` where a command has it, else ``$RACKLIFE_OPERATOR``,
else the login name; the service's own runs take the service's identity
(``racklife serve HOST/serve/ID``).
"""

from __future__ import annotations

import getpass
import os
from datetime import UTC, datetime

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from lifecycle.model.redact import redact
from lifecycle.model.vocab import text
from lifecycle.store import db

ENV = "RACKLIFE_OPERATOR"
MAX = 128
_process: str | None = None


def clean(name: str) -> str:
    """An operator's name as stored: one printable line, redacted, at most ``MAX`` characters."""
    try:
        return redact(text(name.strip()))[:MAX] or "unknown"
    except ValueError:
        return "unknown (not printable)"


def set_process(name: str | None) -> None:
    """The operator of this process's writes that no run makes (``--operator``, the service's identity)."""
    global _process
    _process = clean(name) if name else None


def current() -> str:
    """This process's operator: ``set_process``, else ``$RACKLIFE_OPERATOR``, else the login name."""
    if _process is not None:
        return _process
    named = os.environ.get(ENV, "").strip()
    if named:
        return clean(named)
    try:
        return clean(getpass.getuser())
    except (KeyError, OSError):  # no passwd entry and no LOGNAME/USER: a container's anonymous uid
        return f"uid {os.getuid()}"


def record(conn: Connection, run_id: str, operator: str) -> None:
    """``operator`` started ``run_id`` (once: a recovered run keeps who started it)."""
    if conn.execute(sa.select(db.run_operators.c.run_id).where(db.run_operators.c.run_id == run_id)).first():
        return
    conn.execute(sa.insert(db.run_operators).values(run_id=run_id[:128], operator=clean(operator),
                                                    at=datetime.now(UTC)))


# (database, run id) -> who started it, as found in racklife_run_operators. A recorded name never
# changes (``record`` keeps the first), so a run's transitions read it once per process, not once each.
_found: dict[tuple[object, str], str] = {}
_OF_RUNS = (sa.select(db.run_operators.c.run_id, db.run_operators.c.operator)
            .where(db.run_operators.c.run_id.in_(sa.bindparam("b_runs", expanding=True))))
_FOUND_MAX = 8192


def of_run(conn: Connection, run_id: str | None) -> str:
    """Who started ``run_id`` (or the run it is a child of); the process's operator when none is recorded."""
    if run_id:
        key = (conn.engine.url, run_id)
        hit = _found.get(key)
        if hit is not None:
            return hit
        wanted = [run_id]
        parent = run_id
        for _ in range(3):  # DBOS names a child PARENT-N, and a grandchild PARENT-N-M
            head, _sep, tail = parent.rpartition("-")
            if not head or not tail.isdigit():
                break
            wanted.append(head)
            parent = head
        rows = {r.run_id: r.operator for r in conn.execute(_OF_RUNS, {"b_runs": wanted})}
        for w in wanted:
            if w in rows:
                if len(_found) >= _FOUND_MAX:
                    _found.clear()
                _found[key] = str(rows[w])
                return _found[key]
    return current()

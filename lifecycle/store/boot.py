"""Single-use phone-home tokens and the iPXE scripts that carry them; once-only side effects.

A provisioning run issues one token per boot attempt; the boot server hands
the script out by MAC and redeems the token when the node phones home. Only
the token's sha256 is a key; a spent or superseded script is blanked so the
token does not linger in the database.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from collections.abc import Callable, Collection
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError

from lifecycle.store import db
from lifecycle.store.store import Store

# The statements of every boot, built once (store.py says why); values come in as bound parameters.
_t = db.boot_tokens
_CLAIM = sa.insert(db.effects)
_SUPERSEDED = json.dumps({"superseded": True})
_SUPERSEDE = (sa.update(_t).where(_t.c.node == sa.bindparam("b_node"), _t.c.used_at.is_(None))
              .values(used_at=sa.bindparam("b_at"), script="", report=sa.bindparam("b_report")))
_FORGET = sa.delete(_t).where(_t.c.run_id == sa.bindparam("b_run"), _t.c.attempt == sa.bindparam("b_attempt"))
_ISSUE = sa.insert(_t)
_TOKEN = sa.select(_t).where(_t.c.token_sha256 == sa.bindparam("b_sha"))
_SPEND = (sa.update(_t).where(_t.c.token_sha256 == sa.bindparam("b_sha"), _t.c.used_at.is_(None))
          .values(used_at=sa.bindparam("b_at"), script="", report=sa.bindparam("b_report")))
_PHONED = (sa.select(_t.c.used_at, _t.c.report)
           .where(_t.c.run_id == sa.bindparam("b_run"), _t.c.attempt == sa.bindparam("b_attempt")))
_SPENT = (sa.select(_t.c.run_id, _t.c.attempt)
          .where(_t.c.run_id.in_(sa.bindparam("b_runs", expanding=True)), _t.c.used_at.is_not(None)))
_PENDING = (sa.select(_t.c.script, _t.c.expires_at)
            .where(_t.c.boot_mac == sa.bindparam("b_mac"), _t.c.used_at.is_(None))
            .order_by(_t.c.issued_at.desc()).limit(1))

def _sha(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _now() -> datetime:
    return datetime.now(UTC)


def _aware(v: datetime) -> datetime:
    return v if v.tzinfo else v.replace(tzinfo=UTC)


def issue_boot(store: Store, node: str, boot_mac: str, run_id: str, attempt: int,
               render: Callable[[str], str], ttl: timedelta) -> None:
    """Issue a fresh token for (run, attempt) and publish the script that carries it.

    Any other unspent boot of this node is superseded: a node has at most one
    pending boot. Re-issuing for the same (run, attempt) replaces the token.
    """
    with store._tx() as conn:
        _issue(conn, node, boot_mac, run_id, attempt, render, ttl)


def claim_boot(store: Store, claim: str, node: str, boot_mac: str, run_id: str, attempt: int,
               render: Callable[[str], str], ttl: timedelta) -> bool:
    """Claim the power cycle of (run, attempt) and issue its token, in one transaction.

    False, with nothing issued, when the cycle was already claimed: a re-run
    of the boot step after a crash leaves the token the node may already
    carry in place. See :func:`claim_effect` for the at-most-once rule.
    """
    try:
        with store._tx() as conn:
            conn.execute(_CLAIM, {"token": claim, "node": node, "action": "power_cycle", "at": _now()})
            _issue(conn, node, boot_mac, run_id, attempt, render, ttl)
    except IntegrityError:
        return False
    return True


def _issue(conn: sa.Connection, node: str, boot_mac: str, run_id: str, attempt: int,
           render: Callable[[str], str], ttl: timedelta) -> None:
    token = secrets.token_urlsafe(24)
    now = _now()
    conn.execute(_SUPERSEDE, {"b_node": node, "b_at": now, "b_report": _SUPERSEDED})
    conn.execute(_FORGET, {"b_run": run_id, "b_attempt": attempt})
    conn.execute(_ISSUE, {"token_sha256": _sha(token), "node": node, "boot_mac": boot_mac, "run_id": run_id,
                          "attempt": attempt, "script": render(token), "issued_at": now, "expires_at": now + ttl})


def pending_script(store: Store, mac: str) -> str | None:
    with store._read() as conn:
        row = conn.execute(_PENDING, {"b_mac": mac.lower()}).first()
    if row is None or _aware(row.expires_at) < _now():
        return None
    return str(row.script)


@dataclass(frozen=True)
class Redeemed:
    accepted: bool
    reason: str
    run_id: str | None = None
    attempt: int | None = None


def redeem(store: Store, token: str, node: str, report: dict[str, Any]) -> Redeemed:
    """Spend a token once, storing the node's report with it (what the waiting run reads).

    Unknown, replayed, expired or mismatched tokens are refused.
    """
    with store._tx() as conn:
        return _redeem(conn, token, node, report)


def _redeem(conn: sa.Connection, token: str, node: str, report: dict[str, Any]) -> Redeemed:
    now = _now()
    row = conn.execute(_TOKEN, {"b_sha": _sha(token)}).first()
    if row is None:
        return Redeemed(False, "unknown token")
    if row.used_at is not None:
        return Redeemed(False, "token already used (replay refused)")
    if _aware(row.expires_at) < now:
        return Redeemed(False, "token expired")
    if row.node != node:
        return Redeemed(False, f"token was issued to another node, not {node}")
    res = conn.execute(_SPEND, {"b_sha": row.token_sha256, "b_at": now, "b_report": json.dumps(report, sort_keys=True)})
    if res.rowcount != 1:
        return Redeemed(False, "token already used (replay refused)")
    return Redeemed(True, "", row.run_id, row.attempt)


def claim_effect(store: Store, token: str, node: str, action: str) -> bool:
    """Record that a side effect is about to happen; False if it was already claimed.

    At most once: a crash between the claim and the effect loses the effect,
    which the workflow's timeout-and-retry covers; it never doubles it.
    """
    try:
        with store._tx() as conn:
            conn.execute(sa.insert(db.effects).values(token=token, node=node, action=action, at=_now()))
    except IntegrityError:
        return False
    return True


def effects(store: Store, node: str) -> list[tuple[str, str]]:
    q = sa.select(db.effects.c.token, db.effects.c.action).where(db.effects.c.node == node).order_by(db.effects.c.at)
    with store._read() as conn:
        return [(r.token, r.action) for r in conn.execute(q)]


def phoned_home(store: Store, run_id: str, attempt: int) -> tuple[bool, dict[str, Any] | None]:
    """Whether the token of boot (run, attempt) is spent, and the node's report if it phoned home.

    ``(True, None)``: spent without a phone-home (superseded by a later boot of the node).
    """
    with store._read() as conn:
        row = conn.execute(_PHONED, {"b_run": run_id, "b_attempt": attempt}).first()
    if row is None or row.used_at is None:
        return False, None
    report = json.loads(row.report) if row.report else {}
    if not isinstance(report, dict) or report.get("superseded"):
        return True, None
    return True, report


def spent(store: Store, run_ids: Collection[str]) -> set[tuple[str, int]]:
    """The (run, attempt) boots among ``run_ids`` whose token is spent (redeemed or superseded)."""
    if not run_ids:
        return set()
    with store._read() as conn:
        return {(r.run_id, r.attempt) for r in conn.execute(_SPENT, {"b_runs": sorted(run_ids)})}

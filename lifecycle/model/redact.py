"""The one redaction filter: every reason, log line, event and JSON output passes through it.

A BMC that echoes a login request in its error message, a driver error that
quotes an ``Authorization`` header, a URL with ``user:password@`` in it: any of
these can carry a secret into a node's append-only history, a log or a
report. Masking at each place that prints is how secrets leak (one place is
always missed), so there is one filter, here at the bottom layer where every
other layer can reach it, and the few places that write text out (the
store's single writer of transitions, driver errors, the logging record
factory, the CLI's JSON and table output) call it.

It knows two things: the credentials in use, registered when they are loaded
(:func:`register`: BMC passwords, session and API tokens), and generic shapes
of secrets (``password=...``, ``"Password": "..."``, ``Authorization:``
headers, URL userinfo), so a secret racklife never loaded (one a BMC made
up, one in a URL typed by the user) is masked too.
"""

from __future__ import annotations

import base64
import json
import logging
import re
import threading
import traceback
from typing import Any
from urllib.parse import quote, quote_plus

MASK = "***"
# Shorter registered secrets would mask ordinary words everywhere; the generic patterns
# still catch them where they appear as a value of a secret-named key.
MIN_SECRET_LEN = 4

_lock = threading.Lock()
_secrets: set[str] = set()
_forms: list[str] = []  # every registered secret in every spelling we mask, longest first

# Names of keys whose value is a secret. Not "credentials": racklife's own are references
# (env:VARIABLE, file:/path), shown on purpose by `node show`.
_KEY = r"(?:password|passwd|passphrase|pwd|secret|token|api[_-]?key|access[_-]?key)"
# (pattern, replacement): generic shapes, applied after the registered secrets.
_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    # HTTP authorization headers: "Authorization: Basic xyz", "X-Auth-Token: xyz", also as dict reprs
    (re.compile(r"(?i)((?:proxy-)?authorization['\"]?\s*[:=]\s*['\"]?)(?:(?:basic|bearer|digest|token)\s+)?"
                r"[^\s'\",}]+"), rf"\1{MASK}"),
    (re.compile(r"(?i)((?:x-auth-token|x-slurm-user-token|x-api-key|cookie|set-cookie)['\"]?\s*[:=]\s*['\"]?)"
                r"[^\s'\",}]+"), rf"\1{MASK}"),
    # JSON or Python-repr key/value: "Password": "x", 'token': 'x'
    (re.compile(rf"(?i)(['\"][\w-]*{_KEY}[\w-]*['\"]\s*:\s*)(['\"])(?:\\.|(?!\2).)*\2"), rf"\1\2{MASK}\2"),
    # the same inside a JSON string (a body quoted in a JSON document): \"Password\": \"x\"
    (re.compile(rf'(?i)(\\"[\w-]*{_KEY}[\w-]*\\"\s*:\s*\\")(?:[^\\]|\\(?!"))*\\"'), rf'\1{MASK}\\"'),
    # key=value and key: value in free text, query strings and command lines
    (re.compile(rf"(?i)(\b[\w-]*{_KEY}[\w-]*\s*[=:]\s*)(?!{re.escape(MASK)})(['\"]?)[^\s&'\",;]+\2"),
     rf"\1\2{MASK}\2"),
    # URL userinfo: scheme://user:password@host
    (re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://[^:/@\s]*:)[^@/\s]+@"), rf"\1{MASK}@"),
)


_SECRET_NAME = re.compile(rf"(?i)(?:^|[-_.])(?:{_KEY}|credentials?)(?:$|[-_.])")


def names_a_secret(name: str) -> bool:
    """Whether a key or label name says it holds a secret (``bmc-password``, ``api_token``)."""
    return bool(_SECRET_NAME.search(name))


def _spellings(secret: str) -> set[str]:
    """The secret as it may appear in text: raw, JSON-escaped, URL-encoded."""
    forms = {secret, json.dumps(secret)[1:-1], quote(secret, safe=""), quote_plus(secret, safe="")}
    return {f for f in forms if len(f) >= MIN_SECRET_LEN}


def register(secret: str | None, *, username: str | None = None) -> None:
    """Mask ``secret`` from now on in this process (and HTTP Basic's ``user:secret`` in base64)."""
    if not secret or len(secret) < MIN_SECRET_LEN:
        return
    with _lock:
        if secret in _secrets and username is None:
            return
        _secrets.add(secret)
        forms = set(_forms) | _spellings(secret)
        if username is not None:
            forms.add(base64.b64encode(f"{username}:{secret}".encode()).decode())
        _forms[:] = sorted(forms, key=len, reverse=True)


def registered() -> frozenset[str]:
    with _lock:
        return frozenset(_secrets)


def redact(text: str) -> str:
    """``text`` with every registered secret and every generic secret shape masked."""
    if not text:
        return text
    for form in _forms:
        if form in text:
            text = text.replace(form, MASK)
    for pattern, replacement in _PATTERNS:
        text = pattern.sub(replacement, text)
    return text


def redact_data(value: Any) -> Any:
    """``value`` (JSON-like: dicts, lists, strings) with every string redacted; keys kept."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {k: redact_data(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact_data(v) for v in value]
    return value


class RedactingFilter(logging.Filter):
    """Masks a record's message, arguments and traceback in place; never drops a record."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a malformed format string: keep what there is, masked
            message = f"{record.msg} {record.args}"
        record.msg, record.args = redact(message), None
        if record.exc_info and record.exc_info[0] is not None and not record.exc_text:
            record.exc_text = redact("".join(traceback.format_exception(*record.exc_info)).rstrip("\n"))
        elif record.exc_text:
            record.exc_text = redact(record.exc_text)
        if record.stack_info:
            record.stack_info = redact(record.stack_info)
        return True


_installed = False


def install_logging_filter() -> None:
    """Pass every log record of the process, from any logger to any handler, through the filter.

    A filter on a logger misses records of its children and a filter on a
    handler misses handlers added later (DBOS adds its own), so the filter is
    applied where every record is made: the log record factory. Idempotent.
    """
    global _installed
    with _lock:
        if _installed:
            return
        make = logging.getLogRecordFactory()
        masker = RedactingFilter()

        def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
            record = make(*args, **kwargs)
            masker.filter(record)
            return record

        logging.setLogRecordFactory(factory)
        _installed = True

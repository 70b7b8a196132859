"""Answers in the API's own shape: ``Status`` errors with the reason, message and details kube-apiserver uses.

Why it exists: clients branch on these — kubectl prints ``Error from server
(NotFound): nodes "x" not found`` from the message, client-go's
``IsConflict`` reads the reason, a driver maps the code to whether a retry
can help — so every refusal is built here, once.
"""

from __future__ import annotations

import datetime
import json
from typing import Any

from aiohttp import web

from lifecycle.lab.kube import rules
from lifecycle.lab.kube.kinds import Kind

Obj = dict[str, Any]


class ApiError(Exception):
    """Ends a request with a ``Status`` answer."""

    def __init__(self, code: int, reason: str, message: str, **details: Any) -> None:
        super().__init__(message)
        self.code, self.reason, self.details = code, reason, details

    def status(self) -> Obj:
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": str(self),
                "reason": self.reason, "details": self.details, "code": self.code}


def answer(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    # kube-apiserver says application/json without a charset; some clients compare it exactly.
    return web.Response(body=json.dumps(body).encode(), status=status,
                        headers={"Content-Type": "application/json", **(headers or {})})


def not_found(kind: Kind, name: str) -> ApiError:
    return ApiError(404, "NotFound", f'{kind.plural}{"." + kind.group if kind.group else ""} "{name}" not found',
                    name=name, group=kind.group, kind=kind.plural)


def conflict(kind: Kind, name: str) -> ApiError:
    return ApiError(409, "Conflict", f'Operation cannot be fulfilled on {kind.plural} "{name}": the object has been '
                    "modified; please apply your changes to the latest version and try again",
                    name=name, group=kind.group, kind=kind.plural)


def invalid(kind: Kind, name: str, found: list[rules.Cause]) -> ApiError:
    lines = [c.line() for c in found]
    text = lines[0] if len(lines) == 1 else "[" + ", ".join(lines) + "]"
    return ApiError(422, "Invalid", f'{kind.kind} "{name}" is invalid: {text}', name=name, group=kind.group,
                    kind=kind.kind, causes=[{"reason": c.reason, "message": c.message, "field": c.field}
                                            for c in found])


def later(seconds: int) -> str:
    at = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=seconds)
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")

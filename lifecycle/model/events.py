"""Events: one structured JSON log line per state transition and per workflow step.

Metrics say how many; events say which node, which run, which step, when,
and how it ended, in a form a log pipeline (Loki, Elasticsearch, journald)
indexes without parsing prose. They go through the standard ``logging``
module on the ``racklife.events`` logger, so a site routes them like any
other log; :func:`configure` (``RACKLIFE_EVENT_LOG``) adds a handler with
the JSON formatter.

Every line carries the same keys (:data:`REQUIRED`), null where a value does
not apply, and every string in it passes the project's one redaction filter
(:mod:`lifecycle.model.redact`) in the formatter: the fields of an event are
not the log record's message, which the record factory already masks.

Emitted by the store's one writer of node state (each transition, after its
commit) and by the workflow step decorator (``lifecycle/workflows/retry.py``).
"""

from __future__ import annotations

import json
import logging
import os
import sys
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, TextIO

from lifecycle.model.redact import redact, redact_data

LOGGER = "racklife.events"
log = logging.getLogger(LOGGER)

REQUIRED = ("time", "kind", "node", "run_id", "step", "outcome", "duration_s")
Kind = Literal["transition", "step"]


@dataclass(frozen=True)
class Event:
    """What happened. ``step``: the transition's event or the step's name; ``outcome``: the target
    state of a transition, or ``ok`` / ``error`` of a step; ``duration_s``: time spent in the source
    state, or the step's run time."""

    kind: Kind
    node: str | None
    run_id: str | None
    step: str
    outcome: str
    duration_s: float | None
    detail: dict[str, Any] = field(default_factory=dict)

    def fields(self) -> dict[str, Any]:
        return {"kind": self.kind, "node": self.node, "run_id": self.run_id, "step": self.step,
                "outcome": self.outcome,
                "duration_s": None if self.duration_s is None else round(self.duration_s, 6)} | self.detail


def emit(event: Event) -> None:
    """Log ``event`` at INFO (errors of steps at WARNING) on the events logger."""
    level = logging.WARNING if event.outcome == "error" else logging.INFO
    if log.isEnabledFor(level):
        log.log(level, "%s %s %s", event.kind, event.step, event.outcome, extra={"racklife_event": event})


class JsonFormatter(logging.Formatter):
    """One JSON object per record: the required keys, the event's detail, the message; all redacted."""

    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {"time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
                               "level": record.levelname.lower(), "logger": record.name}
        event = getattr(record, "racklife_event", None)
        if isinstance(event, Event):
            doc |= event.fields()
        else:
            doc |= dict.fromkeys(REQUIRED[1:])
        doc["message"] = record.getMessage()
        if record.exc_info and record.exc_info[0] is not None:
            doc["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            doc["exception"] = record.exc_text
        return redact(json.dumps(redact_data(doc), default=str, sort_keys=False))


def configure(target: str | None = None, stream: TextIO | None = None) -> logging.Handler | None:
    """Send events as JSON lines to ``target`` (a file path, appended; ``stderr``; ``stdout``).

    ``target`` defaults to ``RACKLIFE_EVENT_LOG``; unset: no handler (events
    propagate to whatever the process configured, and are silent by default).
    Idempotent per target.
    """
    target = target if target is not None else os.environ.get("RACKLIFE_EVENT_LOG")
    if not target and stream is None:
        return None
    for h in log.handlers:
        if getattr(h, "racklife_target", None) == (target or id(stream)):
            return h
    handler: logging.Handler
    if stream is not None:
        handler = logging.StreamHandler(stream)
    elif target in ("stderr", "-"):
        handler = logging.StreamHandler(sys.stderr)
    elif target == "stdout":
        handler = logging.StreamHandler(sys.stdout)
    else:
        path = Path(str(target))
        handler = logging.FileHandler(path, encoding="utf-8", delay=True)
    handler.setFormatter(JsonFormatter())
    handler.__dict__["racklife_target"] = target or id(stream)
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    return handler

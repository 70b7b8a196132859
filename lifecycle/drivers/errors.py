"""The small error hierarchy every driver translates its vendor errors into.

A workflow needs one fact from an error: can trying again help? As in kopf,
the answer is the error's class, decided once at the adapter edge where the
vendor's words are known:

* ``TemporaryError`` — the peer did not answer or asked us to come back: a
  timeout, a refused connection while a BMC reboots, 429, 503, another 5xx to
  an idempotent request. ``delay_s`` carries the peer's own suggestion
  (``Retry-After``) when it gave one; None leaves the wait to the policy.
* ``PermanentError`` — the same request will fail the same way: refused
  credentials, an untrusted certificate, 4xx, validation, an operation the
  peer does not offer or refused.

Whether a temporary error is *retried* is not the driver's call: the workflow
step layer (``lifecycle/workflows/retry.py``) retries only steps declared
idempotent, under one policy from configuration. Messages never carry
credentials: whatever a peer said (a BMC that echoes the login request, a
header quoted back) passes the redaction filter here, once, for every driver,
before the message reaches a reason, a log line or the workflow journal.
"""

from __future__ import annotations

from typing import Any

from lifecycle.model.redact import redact


def _rebuild(cls: type[DriverError], args: tuple[Any, ...], state: dict[str, Any]) -> DriverError:
    err = cls.__new__(cls)
    Exception.__init__(err, *args)
    err.__dict__.update(state)
    return err


class DriverError(Exception):
    """Base of all driver errors; ``retryable`` is True exactly for ``TemporaryError``."""

    exit_code = 5

    def __init__(self, target: str, message: str, *, delay_s: float | None = None) -> None:
        self.target = redact(target)
        self.message = redact(message)
        self.delay_s = delay_s
        super().__init__(f"{self.target}: {self.message}")

    @property
    def retryable(self) -> bool:
        return isinstance(self, TemporaryError)

    def __reduce__(self) -> tuple[Any, ...]:
        # Workflow engines pickle step errors; subclasses have their own constructors, so
        # rebuild from the attributes instead of calling one.
        return (_rebuild, (type(self), self.args, dict(self.__dict__)))


class TemporaryError(DriverError):
    """Trying again later can help; ``delay_s``: the peer's suggested wait, if it gave one."""


class PermanentError(DriverError):
    """Trying again with the same request cannot help."""


class Unreachable(TemporaryError):
    """No answer: connection refused or timed out, DNS failure, a session that stopped answering."""

    exit_code = 3


class Busy(TemporaryError):
    """The peer answered "not now": 429, 503, another 5xx to an idempotent request, IPMI node busy."""

    exit_code = 3


class AuthFailed(PermanentError):
    """The peer refused our credentials. Retrying with the same ones cannot help."""

    exit_code = 4


class Untrusted(PermanentError):
    """The peer's TLS certificate does not verify: no retry makes it trusted."""

    exit_code = 3


class NotSupported(PermanentError):
    """The peer does not offer this operation (missing resource, action or capability)."""

    exit_code = 5


class OperationFailed(PermanentError):
    """The peer refused or failed the operation; ``message`` carries its own words."""

    exit_code = 5

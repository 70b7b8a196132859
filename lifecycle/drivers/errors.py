"""The small error hierarchy every driver translates its vendor errors into.

A workflow needs one fact from an error: can a retry help? ``retryable``
says so. Messages never carry credentials.
"""

from __future__ import annotations


class DriverError(Exception):
    """Base of all driver errors. ``retryable``: whether trying again later can help."""

    retryable = False
    exit_code = 5

    def __init__(self, target: str, message: str) -> None:
        self.target = target
        self.message = message
        super().__init__(f"{target}: {message}")

    def __reduce__(self) -> tuple[type[DriverError], tuple[str, str]]:
        # Workflow engines pickle step errors; keep the constructor's arguments.
        return (type(self), (self.target, self.message))


class Unreachable(DriverError):
    """No answer: connection refused or timed out, DNS failure, 503 after retries."""

    retryable = True
    exit_code = 3


class AuthFailed(DriverError):
    """The peer refused our credentials. Retrying with the same ones cannot help."""

    exit_code = 4


class NotSupported(DriverError):
    """The peer does not offer this operation (missing resource, action or capability)."""

    exit_code = 5


class OperationFailed(DriverError):
    """The peer refused or failed the operation; ``message`` carries its own words."""

    exit_code = 5

    def __init__(self, target: str, message: str, *, retryable: bool = False) -> None:
        super().__init__(target, message)
        self.retryable = retryable

    def __reduce__(self) -> tuple[type[DriverError], tuple[str, str]]:
        return (type(self), (self.target, self.message))

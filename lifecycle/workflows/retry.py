"""Retries of workflow steps: one policy, from configuration, applied here and nowhere else.

Drivers say whether trying again can help (``TemporaryError`` with the peer's
suggested delay, or ``PermanentError``: ``lifecycle/drivers/errors.py``); they
never retry themselves. Only a step knows whether running it again is safe,
so the decision is taken here, once: ``@step(idempotent=True)`` runs the step
again after a temporary error, up to ``RetryPolicy.attempts`` tries in all,
waiting the peer's ``Retry-After`` or an exponential backoff (capped);
``@step(idempotent=False)`` runs it once, whatever the error. A permanent error
is never retried. Every step of a workflow says which it is.

Why our own loop and not DBOS's ``@DBOS.step(retries_allowed=True, ...)``:

* DBOS fixes the policy when the module is imported; ours is data read from
  the environment when the step runs (``RetryPolicy.from_env``), so a site
  sets it without code;
* DBOS's retries wait with ``time.sleep``; ours wait through an injected
  ``sleep``, so backoff is tested in virtual time (``using``);
* DBOS computes its own interval and cannot honour the ``Retry-After`` a BMC
  or an API server sent; ours does, and gives up at once when the peer asks
  for longer than ``max_delay_s``;
* after its last attempt DBOS raises ``DBOSMaxStepRetriesExceeded`` instead of
  the step's error, and the workflows branch on our error types.

The attempts run inside one DBOS step, before its checkpoint: the journal
holds the step's one outcome (the result, or the last error), and a replay
returns it without calling anything. A controller killed between two
attempts runs the step again from the first attempt, which is why only steps
that read the actual state first (idempotent) may be retried at all: a
journaled step must never repeat a side effect that is not (a power cycle, a
job requeue).
"""

from __future__ import annotations

import functools
import inspect
import logging
import os
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, fields
from typing import ParamSpec, TypeVar

from lifecycle.drivers.errors import TemporaryError
from lifecycle.model import events

log = logging.getLogger(__name__)

P = ParamSpec("P")
R = TypeVar("R")


@dataclass(frozen=True)
class RetryPolicy:
    """How an idempotent step is retried after a temporary error.

    ``attempts`` counts every try (1: never retry). The n-th retry waits the
    peer's suggested delay if it gave one, else ``backoff_s * 2**(n-1)``
    capped at ``max_backoff_s``. A suggested delay above ``max_delay_s`` is
    not waited for: the error goes to the workflow at once.
    """

    attempts: int = 4
    backoff_s: float = 2.0
    max_backoff_s: float = 30.0
    max_delay_s: float = 120.0

    ENV_PREFIX = "RACKLIFE_RETRY_"

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError(f"{self.ENV_PREFIX}ATTEMPTS must be 1 or more, not {self.attempts}")
        for f in fields(self)[1:]:
            value = getattr(self, f.name)
            if not value >= 0:  # also refuses NaN
                raise ValueError(f"{self.ENV_PREFIX}{f.name.upper()} must be 0 or more, not {value}")

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> RetryPolicy:
        """The policy from ``RACKLIFE_RETRY_ATTEMPTS``, ``_BACKOFF_S``, ``_MAX_BACKOFF_S``,
        ``_MAX_DELAY_S``; an unset variable keeps its default, a malformed one is an error."""
        env = os.environ if env is None else env
        values: dict[str, int | float] = {}
        for f in fields(cls):
            name = f"{cls.ENV_PREFIX}{f.name.upper()}"
            raw = env.get(name, "").strip()
            if not raw:
                continue
            try:
                values[f.name] = int(raw) if f.name == "attempts" else float(raw)
            except ValueError:
                raise ValueError(f"{name}={raw!r} is not a number") from None
        return cls(**values)  # type: ignore[arg-type]

    def patience_s(self) -> float:
        """How long a step waits in all, across its retries, for a peer that suggests no delay."""
        return float(sum(min(self.max_backoff_s, self.backoff_s * 2 ** (n - 1)) for n in range(1, self.attempts)))

    def delay(self, retry: int, error: TemporaryError) -> float | None:
        """Seconds to wait before retry number ``retry`` (1-based); None: do not retry."""
        if error.delay_s is not None:
            return error.delay_s if error.delay_s <= self.max_delay_s else None
        return float(min(self.max_backoff_s, self.backoff_s * 2 ** (retry - 1)))


@dataclass(frozen=True)
class Retrier:
    """A policy and the clock it waits with (``time.sleep``, or a virtual one in tests)."""

    policy: RetryPolicy
    sleep: Callable[[float], None] = time.sleep

    def call(self, fn: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
        what = getattr(fn, "__name__", "step")
        attempt = 1
        while True:
            try:
                return fn(*args, **kwargs)
            except TemporaryError as exc:
                if attempt >= self.policy.attempts:
                    log.warning("%s: %s; giving up after %d attempt(s)", what, exc, attempt)
                    raise
                wait = self.policy.delay(attempt, exc)
                if wait is None:
                    log.warning("%s: %s; asked to wait %.0fs, more than the %.0fs allowed",
                                what, exc, exc.delay_s or 0.0, self.policy.max_delay_s)
                    raise
                log.info("%s: %s; attempt %d of %d in %.1fs", what, exc, attempt + 1,
                         self.policy.attempts, wait)
                self.sleep(wait)
                attempt += 1


_retrier: Retrier | None = None


def retrier() -> Retrier:
    """This process's retrier: the policy from the environment, read at first use."""
    global _retrier
    if _retrier is None:
        _retrier = Retrier(RetryPolicy.from_env())
    return _retrier


@contextmanager
def using(r: Retrier) -> Iterator[Retrier]:
    """Run with ``r`` as the process's retrier (tests: a virtual clock, a small policy)."""
    global _retrier
    previous, _retrier = _retrier, r
    try:
        yield r
    finally:
        _retrier = previous


def step(*, idempotent: bool, name: str | None = None) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """A DBOS step that says whether it is safe to run again; only then is it retried.

    ``idempotent=True``: the step reads the actual state first and treats
    "already done" as done, so after a ``TemporaryError`` it runs again under
    the policy. ``idempotent=False``: it runs once; any error goes to the
    workflow.
    """

    from dbos import DBOS  # here, so that reading the policy (the CLI does, first) needs no DBOS

    def decorate(fn: Callable[P, R]) -> Callable[P, R]:
        body: Callable[P, R] = fn
        if idempotent:
            @functools.wraps(fn)
            def retried(*args: P.args, **kwargs: P.kwargs) -> R:
                return retrier().call(fn, *args, **kwargs)

            body = retried
        body = _announced(body, name or fn.__name__, inspect.signature(fn), lambda: DBOS.workflow_id)
        body.__dict__["idempotent"] = idempotent
        wrapped: Callable[P, R] = DBOS.step(name=name)(body) if name else DBOS.step()(body)
        wrapped.__dict__["idempotent"] = idempotent
        return wrapped

    return decorate


def _announced(fn: Callable[P, R], step_name: str, sig: inspect.Signature,
               run_id: Callable[[], str | None]) -> Callable[P, R]:
    """``fn`` emitting one event when it ends (inside the DBOS step: a replay returns the journaled
    outcome without running it, and so without a second event)."""

    @functools.wraps(fn)
    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            bound = sig.bind_partial(*args, **kwargs).arguments
        except TypeError:
            bound = {}
        node = bound.get("node")
        many = bound.get("nodes")
        detail: dict[str, object] = {}
        if isinstance(many, list | tuple) and all(isinstance(n, str) for n in many):
            detail["nodes"] = list(many)
        started = time.monotonic()
        try:
            result = fn(*args, **kwargs)
        except BaseException as exc:
            events.emit(events.Event("step", node if isinstance(node, str) else None, run_id(), step_name,
                                     "error", time.monotonic() - started,
                                     detail | {"error": f"{type(exc).__name__}: {exc}"}))
            raise
        events.emit(events.Event("step", node if isinstance(node, str) else None, run_id(), step_name, "ok",
                                 time.monotonic() - started, detail))
        return result

    return run


def is_idempotent(fn: object) -> bool | None:
    """What a step declared (None: not declared through ``step``)."""
    value = getattr(fn, "idempotent", None)
    return value if isinstance(value, bool) else None

"""How a command runs workflows: one controller helper, live progress while it waits, and Ctrl-C.

`accept` printed one line and then nothing for as long as burn-in took (an
hour per node by default): nobody could tell a wait from a hang. And Ctrl-C
printed DBOS's tracebacks and left the run PENDING without a word. Every
command that starts workflows goes through :func:`controller` (the
workflows' one :class:`~lifecycle.workflows.controller.Controller`, with this
command's message line), and waits inside :func:`progress`:

* on a terminal, a status line (Rich) with each state's nodes and the time
  waited, redrawn every second;
* not on a terminal, a timestamped plain line on stderr whenever a node
  changes state, and every minute while nothing does;
* under ``-o json|yaml|name``, nothing extra: stdout is the document.

Ctrl-C stops the waiting, not the run: the command says which runs were left
pending, that the next command of its kind recovers them and how to cancel
them, and exits 130 without a traceback.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, NoReturn

from lifecycle.cli import _output
from lifecycle.cli._common import INTERRUPTED, err_console, say_interrupted

if TYPE_CHECKING:
    from lifecycle.workflows.controller import Controller

QUIET_S = 60.0  # a plain line at least this often while waiting, so a wait never looks like a hang


def say(message: str) -> None:
    """A progress line on stderr (with the time when stderr is not a terminal, as in a log)."""
    stamp = "" if err_console.is_terminal else time.strftime("%H:%M:%S ")
    err_console.print(f"{stamp}{message}", markup=False, soft_wrap=True)


@contextmanager
def controller(role: str, *, command: str | None = None) -> Iterator[Controller]:
    """The workflow controller for this command; Ctrl-C says what it left and exits 130."""
    from lifecycle.workflows.controller import Controller

    ctl = Controller(role, say=say)
    with ctl:
        try:
            yield ctl
        except KeyboardInterrupt:
            _interrupted(ctl, role, command)


def _interrupted(ctl: Controller, role: str, command: str | None) -> NoReturn:
    """Say what the interrupt left and end the process at once, before the controller's own shutdown.

    Handled outside the ``with``, the shutdown (the heartbeat thread joined, the engine destroyed) ran
    first; in one CI run on a loaded machine the process was still alive a minute after the interrupt.
    Ending here is what a kill is, which the next command recovers from.
    """
    again = command or f"racklife {role}"
    runs = ctl.runs()
    if ctl.service is not None:  # handed to racklife serve: the runs go on there
        lines = [f"run {r} goes on in racklife serve ({ctl.service.id}): `racklife workflows show {r}` "
                 f"follows it; `racklife workflows cancel {r}` stops it" for r in runs]
    else:
        lines = [f"run {r} was left pending: the next `{again}` recovers and finishes it; "
                 f"`racklife workflows cancel {r}` stops it" for r in runs]
    say_interrupted(*(lines or ["no workflow run had started"]))
    # The engine's threads would go on running the runs here (a leave waiting 600 s for a job) and
    # keep the process alive. Every step is journaled, so ending now is what a kill is, which the
    # next command recovers from: end now.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(INTERRUPTED)


def _states(nodes: Sequence[str]) -> dict[str, list[str]]:
    from lifecycle.store import NodeNotFound, Store

    store = Store()
    try:
        by_state: dict[str, list[str]] = {}
        for n in nodes:
            try:
                by_state.setdefault(store.get(n).state.value, []).append(n)
            except NodeNotFound:
                by_state.setdefault("unknown", []).append(n)
        return by_state
    finally:
        store.close()


def describe(by_state: dict[str, list[str]]) -> str:
    return "; ".join(f"{state}: {', '.join(names)}" for state, names in sorted(by_state.items()))


@contextmanager
def progress(nodes: Sequence[str], what: str, *, read: Callable[[Sequence[str]], dict[str, list[str]]] = _states,
             tick_s: float = 1.0) -> Iterator[None]:
    """While the block waits on ``what`` (a run), show where ``nodes`` are (their states in the store)."""
    if _output.current().machine or not nodes:
        yield
        return
    stop = threading.Event()
    started = time.monotonic()
    live = err_console.is_terminal

    def watch() -> None:
        last, last_at = "", 0.0
        status = err_console.status(what) if live else None
        if status is not None:
            status.start()
        try:
            while not stop.wait(tick_s):
                try:
                    now = describe(read(nodes))
                except Exception as exc:  # a busy or locked store: say so, keep waiting
                    now = f"(node states not readable now: {type(exc).__name__})"
                waited = f"{time.monotonic() - started:.0f} s"
                if status is not None:
                    status.update(f"{what}, {waited}: {now}")
                elif now != last or time.monotonic() - last_at >= QUIET_S:
                    say(f"{what}, {waited}: {now}")
                    last, last_at = now, time.monotonic()
        finally:
            if status is not None:
                status.stop()

    thread = threading.Thread(target=watch, name="racklife-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=5)

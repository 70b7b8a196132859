"""How a command runs workflows: one controller helper, live progress while it waits, and Ctrl-C.

`accept` printed one line and then nothing for as long as burn-in took (an
hour per node by default): nobody could tell a wait from a hang. And Ctrl-C
printed DBOS's tracebacks and left the run PENDING without a word. Every
command that starts workflows goes through :func:`controller` (the
workflows' one :class:`~lifecycle.workflows.controller.Controller`, with this
command's message line), and waits inside :func:`progress`:

* per node: its phase (state), how long, and what its run waits on (the
  drain of job 12, a phone-home, burn-in), read from the store
  (:mod:`lifecycle.cli._progress`), on a terminal as a Rich Live table, off
  one as timestamped plain lines on stderr;
* under ``-o json|yaml|name``, nothing extra: stdout is the document.
* ``--no-wait`` (:func:`no_wait`): the run is handed to ``racklife serve``,
  its id printed, and the command returns.

Ctrl-C stops the waiting, not the run: the command says which runs were left
pending, that the next command of its kind recovers them and how to cancel
them, and exits 130 without a traceback.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, NoReturn

import typer

from lifecycle.cli import _output, _progress
from lifecycle.cli._common import (
    INTERRUPTED,
    OK,
    REFUSED,
    emit_json,
    err_console,
    fail,
    out_console,
    say_interrupted,
)

if TYPE_CHECKING:
    from lifecycle.workflows.controller import Controller

QUIET_S = _progress.QUIET_S


def say(message: str) -> None:
    """A progress line on stderr (with the time when stderr is not a terminal, as in a log)."""
    stamp = "" if err_console.is_terminal else time.strftime("%H:%M:%S ")
    err_console.print(f"{stamp}{message}", markup=False, soft_wrap=True)


def operator_name(given: str | None) -> str:
    """The operator of this command's writes and runs: ``--operator``, else ``$RACKLIFE_OPERATOR``, else
    the login name (``lifecycle.store.operators``); the history's operator column carries it."""
    from lifecycle.store import operators

    operators.set_process(given)
    return operators.current()


NoWaitOpt = typer.Option(False, "--no-wait", help="Hand the run(s) to racklife serve, print the run id(s) and "
                                                   "return (needs a live `racklife serve`; `racklife workflows show "
                                                   "RUN --watch` follows a run).")
NO_SERVICE = ("--no-wait needs a live `racklife serve` to carry the run on after this command returns (embedded, "
              "the run stops with the command); start one (`racklife serve`) or leave out --no-wait")


def check_no_wait(no_wait: bool) -> None:
    """Refuse ``--no-wait`` before anything is done when no service would run the run."""
    if not no_wait:
        return
    from lifecycle.store import Store
    from lifecycle.workflows.controller import live_services

    store = Store()
    try:
        alive = bool(live_services(store))
    finally:
        store.close()
    if not alive:
        fail(NO_SERVICE, REFUSED)


@contextmanager
def controller(role: str, *, command: str | None = None, no_wait: bool = False) -> Iterator[Controller]:
    """The workflow controller for this command; Ctrl-C says what it left and exits 130.

    With ``no_wait``, a command that finds no live service (it stopped since
    :func:`check_no_wait`) is refused before it starts a run.
    """
    from lifecycle.workflows.controller import Controller

    ctl = Controller(role, say=say)
    with ctl:
        if no_wait and ctl.service is None:
            fail(NO_SERVICE, REFUSED)
        try:
            yield ctl
        except KeyboardInterrupt:
            _interrupted(ctl, role, command)


def leave_running(ctl: Controller, as_json: bool) -> NoReturn:
    """``--no-wait``: print the runs handed to the service (one id a line, or JSON) and return at once."""
    runs = ctl.detach()
    service = ctl.service.id if ctl.service is not None else None
    if as_json:
        emit_json({"runs": runs, "waited": False, "service": service})
    else:
        for r in runs:
            out_console.print(r, markup=False, soft_wrap=True)
        for r in runs:
            say(f"run {r} goes on in racklife serve ({service}): `racklife workflows show {r} --watch` follows it")
    raise typer.Exit(OK)


def _interrupted(ctl: Controller, role: str, command: str | None) -> NoReturn:
    """Say what the interrupt left and end the process at once, before the controller's own shutdown.

    Handled outside the ``with``, the shutdown (the heartbeat thread joined, the engine destroyed) ran
    first; in one CI run on a loaded machine the process was still alive a minute after the interrupt.
    Ending here is what a kill is, which the next command recovers from.
    """
    again = command or f"racklife {role}"
    runs = ctl.runs()
    if ctl.service is not None:  # handed to racklife serve: the runs go on there
        lines = [f"{role} {r} continues in the service (racklife serve {ctl.service.id}): `racklife workflows "
                 f"show {r}` follows it; `racklife workflows cancel {r}` stops it" for r in runs]
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


@contextmanager
def progress(nodes: Sequence[str] | Callable[[], Sequence[str]], what: str, *,
             runs: Callable[[], Collection[str]] | None = None,
             read: _progress.Reader = _progress.read_store, tick_s: float = 1.0) -> Iterator[None]:
    """While the block waits on ``what``, show each of ``nodes``: its phase, for how long, what it waits on.

    ``nodes`` may be a function, asked again each time (the nodes of a run someone else started).
    ``runs`` (e.g. the controller's ``runs``) limits the waits shown to those of the runs this
    command follows and their child runs; without it, any run's wait on these nodes is shown.
    """
    if _output.current().machine or not nodes:
        yield
        return
    stop = threading.Event()
    started = time.monotonic()

    def rows() -> list[_progress.NodeProgress]:
        names: Sequence[str] = []
        try:
            names = nodes() if callable(nodes) else nodes
            return read(names, runs() if runs is not None else None)
        except Exception as exc:  # a busy or locked store: say so, keep waiting
            return [_progress.NodeProgress(n, f"(not readable now: {type(exc).__name__})") for n in names]

    def watch_live() -> None:
        from rich.live import Live

        with Live(_progress.table(what, 0, rows()), console=err_console, refresh_per_second=2,
                  transient=False) as live:
            while not stop.wait(tick_s):
                live.update(_progress.table(what, time.monotonic() - started, rows()))

    def watch_plain() -> None:
        plain = _progress.Plain(err_console, what)
        plain.say(f"{what}: following {len(nodes)} node(s)" if not callable(nodes) else what)
        while not stop.wait(tick_s):
            plain.show(rows())

    thread = threading.Thread(target=watch_live if err_console.is_terminal else watch_plain,
                              name="racklife-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=5)

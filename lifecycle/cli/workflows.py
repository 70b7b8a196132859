"""`racklife workflows list|show|cancel|resume`: the durable runs behind every command."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import typer

from lifecycle.cli._common import BAD_INPUT, FAILED, JsonOpt, emit_json, emit_table, fail, interrupted, out_console

if TYPE_CHECKING:
    from lifecycle.workflows import engine

app = typer.Typer(help="Inspect and control workflow runs.", no_args_is_help=True)

_STATUSES = ("PENDING", "SUCCESS", "ERROR", "CANCELLED", "ENQUEUED", "MAX_RECOVERY_ATTEMPTS_EXCEEDED")


def _inspector() -> Any:
    # DBOS is heavy to import: only commands that need it pay for it.
    from lifecycle.workflows import engine

    return engine.Inspector()


def _run_json(r: engine.RunInfo) -> dict[str, Any]:
    return {"id": r.id, "name": r.name, "status": r.status,
            "created_at": r.created_at.isoformat() if r.created_at else None,
            "updated_at": r.updated_at.isoformat() if r.updated_at else None,
            "app_version": r.app_version, "executor": r.executor, "error": r.error}


@app.command("list")
def list_(status: str | None = typer.Option(None, "--status", help=f"One of {', '.join(_STATUSES)}."),
          limit: int = typer.Option(50, "--limit", min=1, help="Most runs listed."), as_json: bool = JsonOpt) -> None:
    """List workflow runs, newest first."""
    if status is not None and status.upper() not in _STATUSES:
        fail(f"unknown status '{status}' (one of {', '.join(_STATUSES)})", BAD_INPUT)
    insp = _inspector()
    try:
        runs = insp.list_runs(status=status.upper() if status else None, limit=limit)
    finally:
        insp.close()
    if as_json:
        emit_json([_run_json(r) for r in runs])
        return
    emit_table(None, ["id", "workflow", "status", "created", "executor", "updated", "version", "error"],
               [(r.id, r.name, r.status, f"{r.created_at:%Y-%m-%d %H:%M:%S}" if r.created_at else "",
                 r.executor, f"{r.updated_at:%Y-%m-%d %H:%M:%S}" if r.updated_at else "", r.app_version,
                 (r.error or "")[:200]) for r in runs], wide=("updated", "version", "error"))


_RUNNING = ("PENDING", "ENQUEUED")


@app.command()
def show(run_id: str = typer.Argument(..., help="The run id (from `workflows list`)."),
         watch: float = typer.Option(0, "--watch", min=0,
                                     help="Follow the run, every N seconds: each step as it is checkpointed, "
                                          "until the run ends (exit 0 if it succeeded, 1 if not)."),
         as_json: bool = JsonOpt) -> None:
    """Show a run and its checkpointed steps; with --watch, follow it (a run any process executes) to its end."""
    insp = _inspector()
    try:
        run = insp.get_run(run_id)
        if run is None:
            fail(f"no workflow run '{run_id}'", BAD_INPUT)
        steps = insp.run_steps(run_id)
        if watch:
            run, steps = _follow(insp, run, steps, watch, quiet=as_json)
    finally:
        insp.close()
    if as_json:
        emit_json(_run_json(run) | {"steps": [
            {"step": s.step, "name": s.name, "output": s.output, "error": s.error} for s in steps]})
        return
    out_console.print(f"[bold]{run.id}[/] {run.name} [cyan]{run.status}[/] version {run.app_version}")
    if run.error:
        out_console.print(f"error: {run.error}", markup=False)
    emit_table("steps", ["#", "step", "error"], [(s.step, s.name, s.error or "") for s in steps])
    if watch and run.status != "SUCCESS":
        raise typer.Exit(FAILED)


def _follow(insp: Any, run: Any, steps: list[Any], every: float, *, quiet: bool) -> tuple[Any, list[Any]]:
    """Print each new step (stderr) until the run leaves PENDING/ENQUEUED; Ctrl-C stops watching, not the run.

    Beside the steps, the progress display shows each node the run (or a child run) holds or
    waits on: its phase and what it waits on, from the store, wherever the run executes.
    """
    import time

    from lifecycle.cli._runs import progress, say

    seen: dict[str, None] = {}

    def nodes() -> list[str]:
        from lifecycle.store import Store, waits

        store = Store()
        try:
            seen.update(dict.fromkeys(waits.nodes_of(store, run.id)))
        finally:
            store.close()
        return list(seen)

    shown = 0
    try:
        with progress(nodes, f"run {run.id}", runs=lambda: [run.id], tick_s=min(every, 1.0)):
            while True:
                if not quiet:
                    for s in steps[shown:]:
                        say(f"{run.id}: step {s.step} {s.name}" + (f" failed: {s.error}" if s.error else " done"))
                shown = len(steps)
                if run.status not in _RUNNING:
                    return run, steps
                time.sleep(every)
                run = insp.get_run(run.id) or run
                steps = insp.run_steps(run.id)
    except KeyboardInterrupt:
        interrupted(f"stopped watching; run {run.id} is {run.status} and goes on where it runs")


@app.command()
def cancel(run_id: str = typer.Argument(..., help="The run id (from `workflows list`)."),
           as_json: bool = JsonOpt) -> None:
    """Cancel a run: it stops at its next step boundary and is not recovered."""
    insp = _inspector()
    try:
        if insp.get_run(run_id) is None:
            fail(f"no workflow run '{run_id}'", BAD_INPUT)
        insp.cancel(run_id)
    finally:
        insp.close()
    if as_json:
        emit_json({"id": run_id, "cancelled": True})
    else:
        out_console.print(f"cancelled {run_id}")


@app.command()
def resume(run_id: str = typer.Argument(..., help="The run id (from `workflows list`)."),
           wait: bool = typer.Option(True, "--wait/--no-wait", help="Wait for the run to finish."),
           as_json: bool = JsonOpt) -> None:
    """Resume a cancelled or failed run from its last checkpointed step."""
    insp = _inspector()
    try:
        if insp.get_run(run_id) is None:
            fail(f"no workflow run '{run_id}'", BAD_INPUT)
    finally:
        insp.close()
    from lifecycle.cli._runs import controller

    try:
        with controller("resume", command="racklife workflows resume RUN") as ctl:
            handle = ctl.resume(run_id)
            result = handle.get_result() if wait else None
    except Exception as exc:  # the run's own error (DBOS re-raises it): the run ran and failed
        fail(f"run {run_id} failed: {type(exc).__name__}: {exc}", FAILED)
    if as_json:
        emit_json({"id": run_id, "resumed": True, "waited": wait, "result": result})
    else:
        out_console.print(f"resumed {run_id}" + (f": {result}" if wait else ""))

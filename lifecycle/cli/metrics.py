"""`racklife metrics serve|textfile|show`: the fleet's Prometheus metrics, from the store.

``racklife serve`` mounts the same endpoint; this group serves it on its own,
for a site that wants metrics before (or without) the controller service,
and writes node exporter's textfile for a site that scrapes node exporters
only. With a Slurm client setup (``SLURM_CONF``) each also reads Slurm's
queue (``squeue``) at the scrape.
"""

from __future__ import annotations

import signal
import sys
import threading
from pathlib import Path
from types import FrameType

import typer

from lifecycle.cli._common import BAD_INPUT, err_console, fail

app = typer.Typer(help="Prometheus metrics computed from the store.", no_args_is_help=True)


@app.command("serve")
def serve_cmd(
    port: int = typer.Option(9464, "--port", min=0, max=65535, help="TCP port (0: any free port, printed)."),
    host: str = typer.Option("127.0.0.1", "--host",
                             help="Address to bind. Loopback by default; another address exposes the fleet's "
                                  "node names and states to whoever can reach it."),
) -> None:
    """Serve /metrics until interrupted (SIGINT or SIGTERM)."""
    from lifecycle.service import metrics
    from lifecycle.service import queue as slurm_queue
    from lifecycle.store import Store

    store = Store()
    try:
        server = metrics.serve(store, host, port, queue=slurm_queue.from_env())
    except OSError as exc:
        store.close()
        fail(f"cannot listen on {host}:{port}: {exc.strerror or exc}", BAD_INPUT)
    stop = threading.Event()

    def _stop(_sig: int, _frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    err_console.print(f"serving metrics on http://{server.host}:{server.port}/metrics", markup=False)
    try:
        stop.wait()
    finally:
        server.close()
        store.close()


@app.command("textfile")
def textfile_cmd(path: Path = typer.Argument(..., help="Output file; must end in .prom (node exporter reads "
                                                       "only those).")) -> None:
    """Write the metrics once, atomically, for node exporter's textfile collector."""
    if path.suffix != ".prom":
        fail(f"{path}: node exporter's textfile collector reads only files ending in .prom", BAD_INPUT)
    if not path.parent.is_dir():
        fail(f"{path.parent}: no such directory", BAD_INPUT)
    from lifecycle.service import metrics
    from lifecycle.service import queue as slurm_queue
    from lifecycle.store import Store

    store = Store()
    try:
        metrics.write_textfile(store, path, queue=slurm_queue.from_env())
    except OSError as exc:
        fail(f"{path}: {exc.strerror or exc}", BAD_INPUT)
    finally:
        store.close()


@app.command("show")
def show_cmd() -> None:
    """Print the metrics as a scrape would see them."""
    from lifecycle.service import metrics
    from lifecycle.service import queue as slurm_queue
    from lifecycle.store import Store

    store = Store()
    try:
        sys.stdout.write(metrics.render(store, queue=slurm_queue.from_env()))
    finally:
        store.close()

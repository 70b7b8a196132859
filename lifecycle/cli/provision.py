"""`racklife provision` and `racklife boot serve`: network-boot nodes into their image, durably."""

from __future__ import annotations

import signal
import threading
from pathlib import Path
from typing import Any

import typer

from lifecycle.cli._common import BAD_INPUT, FAILED, JsonOpt, emit_json, emit_table, fail, out_console
from lifecycle.cli._runs import NoWaitOpt, check_no_wait
from lifecycle.cli._select import AllOpt, PoolOpt, RackOpt, SelectorOpt, select
from lifecycle.store import Store
from lifecycle.store.db import default_home

boot_app = typer.Typer(help="The HTTP boot server.", no_args_is_help=True)


def _split(listen: str) -> tuple[str, int]:
    host, _, port = listen.rpartition(":")
    if not host or not port.isdigit():
        fail(f"--boot-listen must be HOST:PORT, not {listen!r}", BAD_INPUT)
    return host, int(port)


def run_provision(names: list[str], image: str | None, max_in_flight: int, boot_listen: str,
                  boot_url: str | None, boot_timeout: float, images_dir: Path, *, no_wait: bool = False,
                  as_json: bool = False) -> list[dict[str, Any]]:
    """Start the boot server, launch DBOS, provision ``names``; return each node's outcome.

    ``no_wait``: hand the run to racklife serve, print its id and end the command."""
    from lifecycle.cli._runs import controller, leave_running, progress, say
    from lifecycle.workflows.boot_run import BootSettings, BootSetupError, boot_server, provision_nodes
    from lifecycle.workflows.controller import live_services

    cfg = BootSettings(images_dir, boot_listen, boot_url, boot_timeout, image)
    store = Store()
    try:
        # With a live racklife serve the run is handed to it, and so is the boot server.
        here = not live_services(store)
        with boot_server(store, cfg, here=here) as boot, controller("provision", no_wait=no_wait) as ctl:
            if no_wait:
                provision_nodes(ctl, boot, names, max_in_flight, say, wait=False)
                leave_running(ctl, as_json)
            with progress(names, f"provisioning {len(names)} node(s)", runs=ctl.runs):
                _run_id, outcomes = provision_nodes(ctl, boot, names, max_in_flight, say)
            return outcomes
    except BootSetupError as exc:
        fail(str(exc), BAD_INPUT)
    finally:
        store.close()


def provision_cmd(
    nodes: list[str] = typer.Argument(None, help="Node names or hostlists (node-[01-04])."),
    rack: list[str] = RackOpt, pool: list[str] = PoolOpt, all_: bool = AllOpt, selector: str | None = SelectorOpt,
    image: str | None = typer.Option(None, "--image", help="Image to boot (default: minimal, or the only one built)."),
    max_in_flight: int = typer.Option(10, "--max-in-flight", min=1, max=1000,
                                       help="Most nodes provisioned at once."),
    boot_listen: str = typer.Option("127.0.0.1:8069", "--boot-listen", envvar="RACKLIFE_BOOT_LISTEN",
                                    help="Where the embedded boot server listens."),
    boot_url: str | None = typer.Option(None, "--boot-url", envvar="RACKLIFE_BOOT_URL",
                                        help="The boot server's URL as nodes see it (default: the listen address)."),
    boot_timeout: float = typer.Option(600.0, "--boot-timeout", envvar="RACKLIFE_BOOT_TIMEOUT_S", min=1,
                                       help="Seconds to wait for a node to phone home, per boot."),
    images_dir: Path = typer.Option(None, "--images", help="Built images (default: $RACKLIFE_HOME/images)."),
    no_wait: bool = NoWaitOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Inspect, network-boot and verify nodes: enrolled → available → provisioned."""
    check_no_wait(no_wait)
    store = Store()
    try:
        names = select(store, nodes or [], racks=rack, pools=pool, all_=all_, selector=selector)
    finally:
        store.close()
    outcomes = run_provision(names, image, max_in_flight, boot_listen, boot_url, boot_timeout,
                             images_dir or default_home() / "images", no_wait=no_wait, as_json=as_json)
    if as_json:
        emit_json(outcomes)
    else:
        emit_table("provisioning", ["node", "result", "state", "reason"],
                   [(o["node"], "ok" if o["ok"] else "FAILED", o["state"], o["reason"]) for o in outcomes])
    if not all(o["ok"] for o in outcomes):
        raise typer.Exit(FAILED)


@boot_app.command("serve")
def serve(
    listen: str = typer.Option("127.0.0.1:8069", "--listen", envvar="RACKLIFE_BOOT_LISTEN",
                               help="HOST:PORT the boot server listens on."),
    url: str | None = typer.Option(None, "--url", envvar="RACKLIFE_BOOT_URL",
                                   help="The boot server's URL as nodes see it (default: the listen address)."),
    images_dir: Path = typer.Option(None, "--images", help="Built images (default: $RACKLIFE_HOME/images)."),
) -> None:
    """Run the boot server until interrupted (iPXE scripts, images with ranges, phone-home)."""
    from lifecycle.drivers.boot.server import BootServer
    from lifecycle.workflows.boot_service import StoreBootBackend

    host, port = _split(listen)
    store = Store()
    backend = StoreBootBackend(store)
    server = BootServer(backend, images_dir or default_home() / "images", host=host, port=port)
    if url:
        server.advertise_as(url)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    server.start()
    out_console.print(f"boot server on {listen}, advertised as {server.url}")
    stop.wait()
    server.stop()
    store.close()

"""`racklife serve`: run the controller service until SIGTERM (lifecycle/service/serve.py says why).

While it runs, every command that starts workflows hands them to it instead of
running them embedded. With ``--auto-repair`` it reads each in-service node's
kernel log over SSH on the refresh interval and repairs what the Xids call
for, within each pool's circuit breaker (docs/repair.md). It logs one line per thing it does to stderr (the
journal under systemd). Exit codes: 0 stopped by SIGTERM/SIGINT, 2 bad input,
6 the store unavailable.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from pathlib import Path

import typer

from lifecycle.cli._common import BAD_INPUT, err_console, fail
from lifecycle.cli.kube import KubeconfigOpt
from lifecycle.store.db import default_home


def _host_port(text: str, option: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        fail(f"{option} must be HOST:PORT, not {text!r}", BAD_INPUT)
    return host, int(port)


def serve_cmd(
    db: str | None = typer.Option(None, "--db", envvar="RACKLIFE_DB",
                                  help="The shared database (several services share one PostgreSQL)."),
    refresh_interval: float = typer.Option(300.0, "--refresh-interval", envvar="RACKLIFE_REFRESH_INTERVAL_S", min=0,
                                           help="Seconds between refreshes of the fleet (0: none)."),
    takeover_interval: float = typer.Option(5.0, "--takeover-interval", min=0.5, max=30,
                                            help="Seconds between looks for dead executors whose runs to adopt."),
    workers: int = typer.Option(64, "--workers", min=1, max=10000,
                                help="Runs handed to the service that this process runs at once."),
    firmware: bool = typer.Option(False, "--firmware/--no-firmware",
                                  help="The periodic refresh reads firmware versions too (many BMC requests)."),
    boot_listen: str | None = typer.Option(None, "--boot-listen",
                                           help="Run the boot server here, on HOST:PORT (default: none here)."),
    boot_url: str | None = typer.Option(None, "--boot-url", envvar="RACKLIFE_BOOT_URL",
                                        help="The boot server's URL as nodes see it (default: the listen address)."),
    images_dir: Path = typer.Option(None, "--images", help="Built images (default: $RACKLIFE_HOME/images)."),
    metrics_listen: str | None = typer.Option(
        None, "--metrics-listen", help="Serve Prometheus /metrics on HOST:PORT (default: none; racklife metrics "
                                       "serve does it apart)."),
    auto_repair: bool = typer.Option(False, "--auto-repair/--no-auto-repair",
                                     help="Read in-service nodes' kernel logs for Xids on the refresh interval "
                                          "and repair them (within each pool's breaker)."),
    health_interval: float | None = typer.Option(None, "--health-interval", min=0.5,
                                                 help="With --auto-repair: seconds between reads of the nodes' "
                                                      "kernel logs (default: the refresh interval)."),
    ssh_config: Path = typer.Option(Path.home() / ".ssh" / "config", "--ssh-config", envvar="RACKLIFE_SSH_CONFIG",
                                    help="With --auto-repair: the SSH config that reaches the nodes."),
    profile: str | None = typer.Option(None, "--profile", envvar="RACKLIFE_BURNIN_PROFILE",
                                       help="With --auto-repair: the re-test's burn-in profile (default: the "
                                            "node's SKU)."),
    burnin_python: str = typer.Option("python3", "--burnin-python", envvar="RACKLIFE_BURNIN_PYTHON",
                                      help="With --auto-repair: Python on the nodes that has the burnin package."),
    kubeconfig: Path | None = KubeconfigOpt,
) -> None:
    """Run the controller: recover and run every workflow, take over dead peers' runs, refresh the fleet."""
    from lifecycle.service.serve import ServeSettings, Service
    from lifecycle.workflows.boot_run import BootSettings, BootSetupError

    if db:
        os.environ["RACKLIFE_DB"] = db  # every workflow step opens the store by this
    boot = BootSettings(images_dir or default_home() / "images", boot_listen, boot_url) if boot_listen else None
    watch = None
    if auto_repair:
        from lifecycle.service.health import HealthSettings
        from lifecycle.workflows.kube_pool import KubeSettings

        if health_interval is None and refresh_interval <= 0:
            fail("--auto-repair reads the nodes on the refresh interval: give --refresh-interval above 0 or "
                 "--health-interval", BAD_INPUT)
        if not ssh_config.is_file():
            fail(f"--auto-repair: SSH config {ssh_config} is not a file", BAD_INPUT)
        kube = KubeSettings(str(kubeconfig.resolve())) if kubeconfig is not None and kubeconfig.is_file() else None
        watch = HealthSettings(str(ssh_config.resolve()), str(default_home() / "acceptance"), profile=profile,
                               burnin_python=burnin_python, kube=kube,
                               interval_s=health_interval if health_interval is not None else refresh_interval)
    cfg = ServeSettings(db, refresh_interval, takeover_interval, workers, firmware, boot,
                        _host_port(metrics_listen, "--metrics-listen") if metrics_listen else None, watch)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stderr)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    try:
        try:
            Service(cfg, lambda m: err_console.print(m, markup=False, soft_wrap=True)).run(stop)
        except BootSetupError as exc:
            fail(str(exc), BAD_INPUT)
        except OSError as exc:  # a boot or metrics address in use, or not this host's
            fail(f"cannot listen: {exc.strerror or exc}", BAD_INPUT)
        code = 0
    except typer.Exit as done:
        code = done.exit_code
    sys.stdout.flush()
    sys.stderr.flush()
    # Workflow threads cut off by the stop are the engine's pool threads, which the interpreter
    # would join at exit (for hours); their runs are left to a peer or the next start.
    os._exit(code)

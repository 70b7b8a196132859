"""The `racklife` command. Each command group lives in its own module and is registered here."""

from __future__ import annotations

import atexit
import gc
import os
import sys
from types import ModuleType

import sqlalchemy as sa
import typer

from lifecycle.cli import accept as _accept
from lifecycle.cli import apply as _apply
from lifecycle.cli import bmc as _bmc
from lifecycle.cli import build as _build
from lifecycle.cli import burnin as _burnin
from lifecycle.cli import evidence as _evidence
from lifecycle.cli import image as _image
from lifecycle.cli import inventory as _inventory
from lifecycle.cli import kube as _kube
from lifecycle.cli import metrics as _metrics
from lifecycle.cli import nodes as _nodes
from lifecycle.cli import plan as _plan
from lifecycle.cli import provision as _provision
from lifecycle.cli import refresh as _refresh
from lifecycle.cli import report as _report
from lifecycle.cli import slurm as _slurm
from lifecycle.cli import status as _status
from lifecycle.cli import workflows as _workflows
from lifecycle.cli._common import BAD_INPUT, fail, unavailable
from lifecycle.cli._extras import STAND_IN_SETTINGS, load
from lifecycle.model import events
from lifecycle.model.redact import install_logging_filter
from lifecycle.store import StoreUnavailable
from lifecycle.store.connect import unavailable as store_unavailable
from lifecycle.workflows.retry import RetryPolicy

app = typer.Typer(
    name="racklife",
    help="Bare-metal GPU racks from cabled and powered to accepted and serving.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


@app.callback()
def _root(
    db: str | None = typer.Option(
        None, "--db", envvar="RACKLIFE_DB",
        help="Database URL (sqlite:///PATH or postgresql://...). Default: ~/.racklife/racklife.sqlite.",
    ),
) -> None:
    if db:
        os.environ["RACKLIFE_DB"] = db
    try:
        RetryPolicy.from_env()  # a malformed RACKLIFE_RETRY_* is refused before anything runs
    except ValueError as exc:
        fail(str(exc), BAD_INPUT)
    event_log = os.environ.get("RACKLIFE_EVENT_LOG")
    if event_log and event_log not in ("stderr", "stdout", "-") and (
            os.path.isdir(event_log) or not os.path.isdir(os.path.dirname(os.path.abspath(event_log)))):
        fail(f"RACKLIFE_EVENT_LOG={event_log}: not a file in an existing directory", BAD_INPUT)
    events.configure(event_log)  # JSON lines of every transition and step (docs/observability.md)


app.add_typer(_inventory.app, name="inventory")
app.add_typer(_nodes.nodes_app, name="nodes")
app.add_typer(_nodes.node_app, name="node")
app.add_typer(_workflows.app, name="workflows")
app.add_typer(_image.app, name="image")
app.command("provision")(_provision.provision_cmd)
app.command("accept")(_accept.accept_cmd)
app.command("build")(_build.build_cmd)
app.command("refresh")(_refresh.refresh_cmd)
app.command("plan")(_plan.plan_cmd)
app.command("apply")(_apply.apply_cmd)
app.add_typer(_provision.boot_app, name="boot")
# Command groups of other components register below, one line each.
app.add_typer(_slurm.app, name="slurm")
app.add_typer(_evidence.app, name="evidence")
app.add_typer(_burnin.app, name="burnin")
app.add_typer(_bmc.app, name="bmc")
app.add_typer(_kube.app, name="kube")
app.add_typer(_metrics.app, name="metrics")
app.command("status")(_status.status_cmd)
app.add_typer(_report.app, name="report")
# The lab needs the 'lab' extra: without it the group is a stand-in that names the extra.
_lab = load("lab", "lab")
if isinstance(_lab, ModuleType):
    app.add_typer(_lab.app, name="lab")
    _lab.app.command("tour")(load("tour", "lab tour").tour_cmd)  # type: ignore[union-attr]
else:
    app.command("lab", context_settings=STAND_IN_SETTINGS)(_lab)


def main() -> None:
    # The interpreter's last collections walk every object of sqlalchemy, pydantic, DBOS and
    # matplotlib before the process ends: ~0.7 s per command measured (docs/acceptance.md).
    # Frozen objects are skipped; the process is ending anyway.
    atexit.register(gc.freeze)
    install_logging_filter()
    as_json = "--json" in sys.argv[1:]
    try:
        app()
    except StoreUnavailable as exc:
        unavailable(str(exc), as_json)
    except (sa.exc.OperationalError, sa.exc.InterfaceError) as exc:
        # A database error past the store's own translation (DBOS's queries, say): still one line.
        unavailable(str(store_unavailable(exc, os.environ.get("RACKLIFE_DB") or "(default store)")), as_json)

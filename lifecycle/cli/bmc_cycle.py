"""`bmc firmware update --force` / `bmc bios set --reboot --force` of a node in service: through the node cycle.

Why: with --force these went straight to the BMC while the node was serving:
a firmware update or a BIOS reboot under running jobs, behind the store's and
the scheduler's back. Now a node in service takes the change the way `racklife
upgrade --firmware|--bios` gives it (``workflows/upgrade.py`` →
``workflows/changes.change_node`` → ``node_cycle``): one durable run per node
that leaves its scheduler with racklife's own drain or cordon, makes the
change, reads it back, re-tests the node and rejoins it, within its pool's
floor, one node at a time. The re-test reads the upgrade's settings from the
environment (``RACKLIFE_SSH_CONFIG``, ``RACKLIFE_BURNIN_PROFILE``,
``RACKLIFE_BURNIN_PYTHON``; ``RACKLIFE_KUBECONFIG`` or ``KUBECONFIG`` for a
Kubernetes pool), as `racklife upgrade` does.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from lifecycle.cli._change import Change, go_ahead
from lifecycle.cli._common import BAD_INPUT, REFUSED, fail

if TYPE_CHECKING:
    from lifecycle.workflows.changes import ChangeSpec


def through_cycle(busy: Sequence[tuple[str, str]], change: ChangeSpec, what: str, *, yes: bool, dry_run: bool,
                  as_json: bool) -> None:
    """Run ``change`` on the in-service nodes ``busy`` as the upgrade does (asked first; --dry-run plans it)."""
    others = [f"{n} ({s})" for n, s in busy if s != "in_service"]
    if others:
        fail(f"refusing to {what} {', '.join(others)}: another run is moving it in or out of its scheduler; let it "
             "finish (racklife workflows list)", REFUSED)
    nodes = [n for n, _s in busy]
    go_ahead(Change(f"{what} nodes in service, through the node cycle", nodes,
                    [f"{n}: leave the scheduler with racklife's drain or cordon (the pool's policy); "
                     f"{change.describe()}, read back; re-test; rejoin (one node at a time, within the pool's floor)"
                     for n in nodes]), yes=yes, dry_run=dry_run)
    from lifecycle.cli import upgrade_start
    from lifecycle.cli._runs import operator_name

    try:
        req = upgrade_start.Request.parse(
            pool=None, nodes=",".join(nodes), image=None, max_unavailable="1", canary=0, policy=None,
            deadline_s=None, window=None, auto_continue=True, halt_after="100%", operator=operator_name(None),
            change=change)
    except ValueError as exc:
        fail(str(exc), BAD_INPUT)
    ssh_config = Path(os.environ.get("RACKLIFE_SSH_CONFIG") or Path.home() / ".ssh" / "config")
    accept = upgrade_start.accept_template(req.operator, ssh_config, os.environ.get("RACKLIFE_BURNIN_PROFILE"),
                                           os.environ.get("RACKLIFE_BURNIN_PYTHON") or "python3")
    kube = os.environ.get("RACKLIFE_KUBECONFIG") or os.environ.get("KUBECONFIG")
    boot = upgrade_start.boot_settings(None, "127.0.0.1:8069", None, 600.0)  # unused: no reimage
    upgrade_start.start(req, boot, accept, Path(kube) if kube else None, False, as_json)

"""A Slurm upgrade in Slurm's own order: slurmdbd, then slurmctld, then every slurmd through the batched node cycle.

Slurm's upgrade guide (slurm.schedmd.com/upgrades.html) fixes the order:
slurmdbd first, and running before anything else moves (a slurmdbd accepts
the two or three previous releases' slurmctld and clients, not newer ones);
then the slurmctld, all of a cluster's controllers together ("when multiple
slurmctld hosts are used, all should be upgraded simultaneously"); then
slurmd, which may follow "in any number of groups" — the rolling upgrade's
batches, each node out of service under the pool's policy while its slurmd
restarts.

The control plane is changed once, by the upgrade run itself, before its
first batch (:func:`control_plane`), and a daemon that does not come back on
the version asked for halts the run before any node leaves service. The
controllers restart through the site's hook in one call (the lab's: the
backup, which is standby, then the primary, so control never passes to the
backup on purpose).

Every restart (slurmdbd, slurmctld, each slurmd) is two journaled steps, so
that a run recovered after a crash never restarts a daemon twice: first the
intent (:func:`daemon_before`: the start time and version the daemon
reports before anything is done), then the act (``restart_*``), which looks
at the daemon before it acts: a hook that a killed process started and that
still runs is waited for (``DaemonHook.wait_for_earlier``), and a daemon
that answers with another start time than the intent's, on the version
asked for, was restarted by this run before the crash and is not restarted
again (the record says ``already``). A crash before the intent is journaled
left nothing done. The intent waits for the daemon to answer (a slurmd shows
no start time until it has registered with a slurmctld just restarted); one
recorded without a start time never counts as done, and the hook runs.

A restart is proven by the daemon, not by the hook's word: slurmdbd's and
slurmctld's ``BOOT_TIME`` (``sacctmgr show configuration``, ``scontrol show
config``) and each slurmd's ``SlurmdStartTime`` must move, and the version
each reports must be the one asked for (``drivers/slurm/daemons``); both
controllers must answer ``scontrol ping``. The backup slurmctld reports no
start time of its own while it is standby: its restart is the hook's word.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from lifecycle.drivers.errors import DriverError, Unreachable
from lifecycle.drivers.slurm import daemons
from lifecycle.drivers.slurm.runner import CommandRunner, Runner
from lifecycle.store.db import default_home
from lifecycle.workflows.node_cycle import ChangeResult, now
from lifecycle.workflows.retry import RetryPolicy, retrier, step

SETTLE_S = 120.0
"""How long a restarted daemon has to answer with its new version."""


def _runner() -> Runner:
    return CommandRunner(timeout_s=30)


def _hook() -> daemons.DaemonHook:
    return daemons.DaemonHook.from_env(lock_dir=default_home() / "slurm-hooks")


def _until(read: Callable[[], Any], done: Callable[[Any], bool], timeout_s: float = SETTLE_S) -> Any:
    """``read()`` until ``done`` holds of it (a DriverError while the daemon restarts is "not yet")."""
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while True:
        try:
            last = read()
            if done(last):
                return last
        except DriverError:
            pass
        if time.monotonic() > deadline:
            return last
        time.sleep(0.5)


def _config(run: Runner) -> dict[str, str]:
    out = {}
    for line in run(["scontrol", "show", "config"]).splitlines():
        key, sep, value = line.partition("=")
        if sep:
            out[key.strip()] = value.strip()
    return out


def slurmctld_timeout_s(config: Mapping[str, str]) -> float | None:
    """``SlurmctldTimeout`` as ``scontrol show config`` prints it (``120 sec``); None when it is not there."""
    found = re.match(r"^(\d+)\s*sec", config.get("SlurmctldTimeout", ""))
    return float(found[1]) if found else None


def failover_gap(policy: RetryPolicy, timeout_s: float | None) -> str | None:
    """Why a controller failover during the upgrade would fail a node: the backup takes over only after
    ``SlurmctldTimeout``, and a step gives up on a missing controller after its retries (None: they outlast it,
    or the timeout is unknown)."""
    patience = policy.patience_s()
    if timeout_s is None or patience >= timeout_s:
        return None
    return (f"racklife retries a Slurm call that finds no controller for about {patience:.0f} s "
            f"({RetryPolicy.ENV_PREFIX}*), less than this cluster's SlurmctldTimeout of {timeout_s:.0f} s: a node "
            f"whose step meets a controller failover fails and is quarantined; raise {RetryPolicy.ENV_PREFIX}"
            f"ATTEMPTS / {RetryPolicy.ENV_PREFIX}MAX_BACKOFF_S to outlast it (docs/upgrade.md)")


def failover_warning() -> str | None:
    """:func:`failover_gap` for the cluster as its controller says now (None when it does not answer: the
    upgrade's own first step says so)."""
    try:
        config = _config(_runner())
    except DriverError:
        return None
    return failover_gap(retrier().policy, slurmctld_timeout_s(config))


@dataclass(frozen=True)
class Look:
    """What a daemon says of itself now: when it started and what it runs (None: it did not say)."""

    boot: str | None = None
    version: str | None = None
    controllers: dict[str, bool] = field(default_factory=dict)
    """slurmctld: ``scontrol ping`` (role -> answers)."""

    @property
    def answers(self) -> bool:
        return self.boot is not None and (not self.controllers or all(self.controllers.values()))


def _look(run: Runner, daemon: daemons.Daemon, node: str | None = None) -> Look:
    if daemon == "slurmdbd":
        dbd = daemons.dbd_config(run)
        return Look(dbd.get("BOOT_TIME"), dbd.get("SLURMDBD_VERSION"))
    if daemon == "slurmctld":
        up = daemons.controllers_up(run)
        conf = _config(run)
        return Look(conf.get("BOOT_TIME"), conf.get("SLURM_VERSION"), up or {"primary": False})
    words = run(["scontrol", "-o", "show", "node", str(node)]).split()
    start = next((w.split("=", 1)[1] for w in words if w.startswith("SlurmdStartTime=")), None)
    return Look(start if start not in (None, "None") else None, daemons.slurmd_version(run, str(node)))


@step(idempotent=True)  # reads only
def daemon_before(daemon: daemons.Daemon, node: str | None = None) -> dict[str, Any]:
    """What ``daemon`` says before its restart, journaled before the hook runs: the intent a recovered run
    reads, to tell a restart this run made before a crash from one still to make.

    slurmdbd on a cluster without one (``AccountingStorageType``) is ``skipped``."""
    run = _runner()
    if daemon == "slurmdbd" and _config(run).get("AccountingStorageType") != "accounting_storage/slurmdbd":
        return {"daemon": "slurmdbd", "skipped": "the cluster has no slurmdbd (AccountingStorageType)",
                "ok": True, "at": now()}
    # A daemon that does not answer yet (a slurmd shows no start time until it has registered with a
    # slurmctld just restarted) is waited for: an intent without a start time proves nothing later.
    look = _until(lambda: _look(run, daemon, node), lambda lk: lk.answers)
    return asdict(look if look is not None else Look())


def _restart(daemon: daemons.Daemon, version: str, before: dict[str, Any], node: str | None = None) -> dict[str, Any]:
    """Restart ``daemon`` onto ``version`` unless this run already did (checked against ``before``, the
    intent): a hook an earlier, killed process started is waited for, then the daemon is looked at; one
    that answers with a start time other than ``before``'s and on ``version`` was restarted, and is not
    restarted again."""
    run = _runner()
    hook = _hook()
    earlier = hook.wait_for_earlier(daemon, node)
    old: str | None = before.get("boot")

    def restarted(look: Look | None, since: str | None) -> bool:
        return look is not None and look.answers and look.boot != since and look.version == version

    now_look = _until(lambda: _look(run, daemon, node), lambda lk: lk.answers)
    if old is not None and restarted(now_look, old):  # an intent without a start time never says "done"
        return {"already": f"restarted before this run was recovered (started {now_look.boot}"
                           f"{f', by hook pid {earlier}' if earlier else ''}); not restarted again",
                "output": "", "look": asdict(now_look)}
    since = old if old is not None else now_look.boot if now_look is not None else None
    out = hook.restart(daemon, version, node)
    after = _until(lambda: _look(run, daemon, node), lambda lk: restarted(lk, since))
    return {"output": out, "look": asdict(after) if after is not None else {}, "since": since}


@step(idempotent=True)  # checks the daemon against the journaled intent before acting: a re-run never restarts twice
def restart_slurmdbd(version: str, before: dict[str, Any]) -> dict[str, Any]:
    done = _restart("slurmdbd", version, before)
    after = done["look"].get("version")
    return {"daemon": "slurmdbd", "before": before.get("version"), "after": after,
            "started": [before.get("boot"), done["look"].get("boot")],
            "ok": after == version and done["look"].get("boot") != done.get("since", before.get("boot")), "at": now(),
            **{k: done[k] for k in ("output", "already") if k in done}}


@step(idempotent=True)  # as restart_slurmdbd
def restart_slurmctld(version: str, before: dict[str, Any]) -> dict[str, Any]:
    done = _restart("slurmctld", version, before)
    look = done["look"]
    return {"daemon": "slurmctld", "before": before.get("version"), "after": look.get("version"),
            "started": [before.get("boot"), look.get("boot")], "controllers": look.get("controllers") or {},
            "ok": look.get("boot") != done.get("since", before.get("boot")) and look.get("version") == version,
            "at": now(),
            **{k: done[k] for k in ("output", "already") if k in done}}


def control_plane(version: str) -> tuple[bool, str, list[dict[str, Any]]]:
    """slurmdbd, then slurmctld, onto ``version``: (all ok, why not, one record per daemon in order)."""
    records: list[dict[str, Any]] = []
    for name, restart in (("slurmdbd", restart_slurmdbd), ("slurmctld", restart_slurmctld)):
        try:
            before = daemon_before(name)  # type: ignore[arg-type]
            rec = before if before.get("skipped") else restart(version, before)
        except (DriverError, ValueError) as exc:
            records.append({"daemon": name, "ok": False, "error": str(exc), "at": now()})
            return False, f"{name} was not restarted onto {version}: {exc}; no node was touched", records
        records.append(rec)
        if not rec["ok"]:
            return False, (f"{rec['daemon']} runs {rec.get('after')} after its restart, not {version}; "
                           "no node was touched"), records
    return True, "", records


@step(idempotent=True)  # as restart_slurmdbd
def restart_slurmd(node: str, version: str, before: dict[str, Any]) -> dict[str, Any]:
    done = _restart("slurmd", version, before, node)
    look = done["look"]
    restarted = bool(look) and look.get("boot") is not None and look.get("boot") != done.get("since",
                                                                                              before.get("boot"))
    return {"node": node, "version": look.get("version"), "restarted": restarted,
            "ok": restarted and look.get("version") == version, "at": now(),
            **{k: done[k] for k in ("output", "already") if k in done}}


@dataclass(frozen=True)
class SlurmdChange:
    """Restart the node's slurmd onto ``version`` (the site's hook) while the node is out of service."""

    version: str
    name: str = "slurmd"

    def precheck(self) -> str:
        try:
            _hook()
            daemons.check_version(self.version)
        except (DriverError, ValueError) as exc:
            return str(exc)
        return ""

    def apply(self, node: str) -> ChangeResult:
        try:
            rec = restart_slurmd(node, self.version, daemon_before("slurmd", node))
        except Unreachable as exc:
            return ChangeResult(False, f"slurmd was not restarted: {exc}")
        if not rec["restarted"]:
            return ChangeResult(False, "slurmd did not register again after its restart", rec)
        if rec["version"] != self.version:
            return ChangeResult(False, f"slurmd reports {rec['version']} after its restart, not {self.version}",
                                rec)
        return ChangeResult(True, "", rec)

    def undo(self, node: str) -> ChangeResult | None:
        return None  # the old binaries are gone: a node whose slurmd did not come back is quarantined

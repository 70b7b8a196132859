"""A Slurm upgrade's edges without a cluster: the version vocabulary, the daemon hook, what Slurm's replies say.

The replies are what Slurm 22.05's clients printed against the lab cluster
(two controllers, one of them killed); the hook is a real command run with
an argv list.
"""

from __future__ import annotations

import json
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest
import sqlalchemy as sa

from lifecycle.drivers.errors import NotSupported, OperationFailed, Unreachable
from lifecycle.drivers.slurm import daemons
from lifecycle.store import Store
from lifecycle.store import db as dbm
from tests.cli.test_roleswap_cli import EXAMPLE, racklife

PING_BOTH = "Slurmctld(primary) at lab-ctl-1 is UP\nSlurmctld(backup) at lab-ctl-2 is UP\n"
PING_BACKUP = "Slurmctld(primary) at lab-ctl-1 is DOWN\nSlurmctld(backup) at lab-ctl-2 is UP\n"
# sacctmgr -n show configuration: the client's settings, then what the running slurmdbd says of itself.
CONFIG = ("MessageTimeout         = 5 sec\nSLURM_VERSION          = 22.05.8\n\nSlurmDBD configuration:\n"
          "BOOT_TIME              = 2026-12-01T17:55:53\nMessageTimeout         = 10 secs\n"
          "SLURMDBD_VERSION       = 22.05.8\n")


class Replies:
    """Slurm's output per command; a command that exits 1 raises what the runner raises."""

    def __init__(self, out: dict[str, str], failing: dict[str, str] | None = None) -> None:
        self.out, self.failing = out, failing or {}

    def __call__(self, argv: Sequence[str]) -> str:
        key = " ".join(argv[:3])
        if key in self.failing:
            raise OperationFailed(key, self.failing[key])
        return self.out[key]


@pytest.mark.parametrize("text", ["22.05.8", "24.11.5", " 23.02.7 ", "22.05.8-1"])
def test_versions_as_slurm_prints_them(text: str) -> None:
    assert daemons.check_version(text) == text.strip()


@pytest.mark.parametrize("text", ["", "22.05", "latest", "22.05.8; reboot", "22.05.8\nx", "../22.05.8"])
def test_other_versions_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="--slurm must be a Slurm release"):
        daemons.check_version(text)


def test_replies_read_as_the_daemons_answered() -> None:
    run = Replies({"sacctmgr -n show": CONFIG, "scontrol ping": PING_BOTH,
                   "scontrol -o show": "NodeName=node-01 Arch=x86_64 Version=22.05.8 SlurmdStartTime=2026-12-01T15:00:01"})
    assert daemons.dbd_version(run) == "22.05.8"
    assert daemons.dbd_config(run)["BOOT_TIME"] == "2026-12-01T17:55:53"
    assert daemons.dbd_config(run)["MessageTimeout"] == "10 secs"  # slurmdbd's, not the client's
    assert daemons.controllers_up(run) == {"primary": True, "backup": True}
    assert daemons.slurmd_version(run, "node-01") == "22.05.8"
    # scontrol ping exits 1 when a controller is down; its text is still the answer.
    down = Replies({}, {"scontrol ping": PING_BACKUP})
    assert daemons.controllers_up(down) == {"primary": False, "backup": True}
    never = Replies({"scontrol -o show": "NodeName=node-02 Version=(null) SlurmdStartTime=None"})
    assert daemons.slurmd_version(never, "node-02") is None
    with pytest.raises(Unreachable, match="no SLURMDBD_VERSION"):
        daemons.dbd_version(Replies({"sacctmgr -n show": "SlurmDBD configuration:\n"}))


def test_the_hook_is_an_argv_with_the_version_in_its_environment() -> None:
    script = 'import os, sys; print(os.environ["RACKLIFE_SLURM_VERSION"], *sys.argv[1:]); sys.exit(len(sys.argv) > 4)'
    hook = daemons.DaemonHook.from_env({daemons.DAEMON_CMD_ENV: shlex.join([sys.executable, "-c", script])})
    assert hook.restart("slurmdbd", "22.05.8") == "22.05.8 restart slurmdbd"
    assert hook.restart("slurmd", "22.05.8", "node-01") == "22.05.8 restart slurmd node-01"
    with pytest.raises(ValueError, match="not a valid node name"):
        hook.restart("slurmd", "22.05.8", "node-01; reboot")
    with pytest.raises(ValueError, match="--slurm must be"):
        hook.restart("slurmctld", "$(reboot)")
    failing = daemons.DaemonHook((*hook.argv, "extra", "words"))
    with pytest.raises(OperationFailed, match="restart slurmd failed"):
        failing.restart("slurmd", "22.05.8", "node-01")
    with pytest.raises(NotSupported, match="RACKLIFE_SLURM_DAEMON_CMD"):
        daemons.DaemonHook.from_env({})


def test_upgrade_cli_refuses_a_bad_version_or_no_hook_and_plans_a_good_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(daemons.DAEMON_CMD_ENV, raising=False)
    assert racklife(tmp_path, "inventory", "import", str(EXAMPLE)).returncode == 0
    base = ["upgrade", "--nodes", "r01-n01,r01-n08"]
    cases = [([*base, "--slurm", "newest"], "--slurm must be a Slurm release"),
             ([*base, "--slurm", "22.05.8"], "RACKLIFE_SLURM_DAEMON_CMD"),
             ([*base, "--slurm", "22.05.8", "--image", "minimal:2"], "exactly one change")]
    for args, needle in cases:
        res = racklife(tmp_path, *args)
        text = " ".join(res.stderr.split())
        assert res.returncode == 2 and needle in text and "Traceback" not in text, (args, res.stderr)
    monkeypatch.setenv(daemons.DAEMON_CMD_ENV, "/bin/false")
    store = Store(f"sqlite:///{tmp_path / 'racklife.sqlite'}")
    try:
        with store.engine.begin() as conn:
            conn.execute(sa.update(dbm.nodes).values(state="in_service"))
    finally:
        store.close()
    res = racklife(tmp_path, *base, "--slurm", "22.05.8", "--canary", "1", "--dry-run", "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    doc = json.loads(res.stdout)
    # No BMC interface is needed: the IPMI node is upgraded like the Redfish one.
    assert doc["change"] == "slurm 22.05.8" and doc["batches"] == [["r01-n01"], ["r01-n08"]] and not doc["skipped"]


def test_a_restart_waits_for_the_hook_a_killed_process_left_running(tmp_path: Path) -> None:
    """racklife SIGKILLed while its hook runs: the hook goes on; the next restart of that daemon waits for it."""
    import os
    import signal
    import subprocess
    import time

    done = tmp_path / "done"
    script = f"import time, pathlib; time.sleep(3); pathlib.Path({str(done)!r}).write_text('x')"
    parent = ("from pathlib import Path; from lifecycle.drivers.slurm import daemons; "
              f"daemons.DaemonHook(({sys.executable!r}, '-c', {script!r}), lock_dir=Path({str(tmp_path)!r}))"
              ".restart('slurmctld', '22.05.8')")
    proc = subprocess.Popen([sys.executable, "-c", parent], env=os.environ | {"PYTHONPATH": os.getcwd()})
    mark = tmp_path / "slurmctld.hook"
    deadline = time.monotonic() + 30
    while not mark.exists():
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    hook = daemons.DaemonHook(("true",), lock_dir=tmp_path)
    assert not done.exists()
    pid = hook.wait_for_earlier("slurmctld")
    assert done.exists() and pid == int(mark.read_text().split()[0])  # waited for the orphan to finish
    assert hook.wait_for_earlier("slurmd", "node-01") is None  # no hook of that one ran
    # A mark whose pid now belongs to another process (another start time) is not waited for.
    mark.write_text(f"{os.getpid()} 1")
    assert hook.wait_for_earlier("slurmctld") == os.getpid()
    # A finished restart leaves no mark.
    assert daemons.DaemonHook((sys.executable, "-c", "print('ok')"), lock_dir=tmp_path).restart(
        "slurmd", "22.05.8", "node-01") == "ok"
    assert not (tmp_path / "slurmd-node-01.hook").exists()


def test_a_retry_policy_shorter_than_slurmctld_timeout_is_named() -> None:
    """Slurm's backup takes over only after SlurmctldTimeout (120 s by default); the default retry policy waits
    about 14 s for a controller, so a failover during an upgrade would fail the node in its way: said up front."""
    from lifecycle.workflows.retry import RetryPolicy
    from lifecycle.workflows.slurm_upgrade import failover_gap, slurmctld_timeout_s

    assert RetryPolicy().patience_s() == 14.0  # 2 + 4 + 8
    assert RetryPolicy(attempts=8, max_backoff_s=30).patience_s() == 120.0  # 2+4+8+16+30+30+30
    assert RetryPolicy(attempts=1).patience_s() == 0.0
    assert slurmctld_timeout_s({"SlurmctldTimeout": "120 sec"}) == 120.0
    assert slurmctld_timeout_s({"SlurmctldTimeout": "garbage"}) is None and slurmctld_timeout_s({}) is None
    said = failover_gap(RetryPolicy(), 120.0)
    assert said is not None and "about 14 s" in said and "SlurmctldTimeout of 120 s" in said, said
    assert "RACKLIFE_RETRY_ATTEMPTS" in said
    assert failover_gap(RetryPolicy(), 10.0) is None  # the lab's
    assert failover_gap(RetryPolicy(attempts=8, max_backoff_s=30), 120.0) is None
    assert failover_gap(RetryPolicy(), None) is None

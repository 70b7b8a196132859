"""The one retry layer: a policy from configuration, applied to idempotent steps only, in virtual time.

The BMC is our Redfish emulator with injected faults (a real HTTP exchange, real client
timeouts); every wait goes through the retrier's injected ``sleep``, so nothing here sleeps
for the backoff.
"""

from __future__ import annotations

import os
import pickle
import re
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from lifecycle.drivers.bmc.base import Credentials, PowerState
from lifecycle.drivers.bmc.redfish import RedfishDriver
from lifecycle.drivers.errors import AuthFailed, Busy, DriverError, OperationFailed, Unreachable
from lifecycle.drivers.slurm.driver import NotOurs
from lifecycle.drivers.slurm.types import DrainOwner
from lifecycle.lab.redfish_emulator import BmcConfig, RedfishEmulator
from lifecycle.workflows import (
    accept,
    changes,
    decommission,
    elastic,
    erase_certificate,
    erase_readback,
    kube_pool,
    leasing,
    node_cycle,
    node_ops,
    provision,
    retry,
    role_switch,
    roleswap,
    slurm_pool,
    upgrade,
)
from lifecycle.workflows.retry import Retrier, RetryPolicy, is_idempotent, step, using

TREE = "dmtf-public-rackmount1"
USER, PASSWORD = "racklife", "emulator-S3cret!"


@pytest.fixture
def emulator(fixtures_dir: Path) -> Iterator[RedfishEmulator]:
    with RedfishEmulator([BmcConfig(name=TREE, tree=fixtures_dir / "redfish" / TREE, username=USER,
                                    password=PASSWORD)]) as emu:
        yield emu


@pytest.fixture
def sleeps() -> Iterator[list[float]]:
    """Virtual time: the process's retrier records its waits instead of sleeping."""
    waited: list[float] = []
    with using(Retrier(RetryPolicy(attempts=4, backoff_s=2.0, max_backoff_s=30.0), waited.append)):
        yield waited


def driver(url: str, password: str = PASSWORD, timeout: float = 0.3) -> RedfishDriver:
    return RedfishDriver(url, Credentials(USER, password), timeout=timeout)


def test_policy_defaults_and_configuration() -> None:
    assert RetryPolicy.from_env({}) == RetryPolicy(attempts=4, backoff_s=2.0, max_backoff_s=30.0,
                                                   max_delay_s=120.0)
    env = {"RACKLIFE_RETRY_ATTEMPTS": "6", "RACKLIFE_RETRY_BACKOFF_S": "0.5",
           "RACKLIFE_RETRY_MAX_BACKOFF_S": "4", "RACKLIFE_RETRY_MAX_DELAY_S": ""}
    assert RetryPolicy.from_env(env) == RetryPolicy(attempts=6, backoff_s=0.5, max_backoff_s=4.0)
    with pytest.raises(ValueError, match="RACKLIFE_RETRY_ATTEMPTS='three' is not a number"):
        RetryPolicy.from_env({"RACKLIFE_RETRY_ATTEMPTS": "three"})
    with pytest.raises(ValueError, match="RACKLIFE_RETRY_ATTEMPTS must be 1 or more"):
        RetryPolicy.from_env({"RACKLIFE_RETRY_ATTEMPTS": "0"})
    with pytest.raises(ValueError, match="RACKLIFE_RETRY_BACKOFF_S must be 0 or more"):
        RetryPolicy.from_env({"RACKLIFE_RETRY_BACKOFF_S": "-1"})


def test_a_bmc_that_times_out_twice_then_answers(emulator: RedfishEmulator, sleeps: list[float]) -> None:
    emulator.set_fault(TREE, timeout=True, remaining=2)
    drv = driver(emulator.urls[TREE])
    try:
        assert retry.retrier().call(drv.power_state) is PowerState.ON
    finally:
        drv.close()
    assert sleeps == [2.0, 4.0]  # backoff, doubling


def test_backoff_is_capped_and_gives_up_after_the_attempts(sleeps: list[float]) -> None:
    with socket.socket() as sock:  # a port nobody listens on: connection refused
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    drv = driver(f"http://127.0.0.1:{port}")
    with using(Retrier(RetryPolicy(attempts=4, backoff_s=0.5, max_backoff_s=1.5), sleeps.append)), \
            pytest.raises(Unreachable, match="connection failed"):
        retry.retrier().call(drv.power_state)
    assert drv.transport.calls == 4
    assert sleeps == [0.5, 1.0, 1.5]


def test_the_bmcs_retry_after_is_honoured(emulator: RedfishEmulator, sleeps: list[float]) -> None:
    emulator.set_fault(TREE, status=503, retry_after=7, remaining=1)
    drv = driver(emulator.urls[TREE])
    try:
        assert retry.retrier().call(drv.power_state) is PowerState.ON
    finally:
        drv.close()
    assert sleeps == [7.0]


def test_a_retry_after_beyond_the_cap_is_not_waited_for(emulator: RedfishEmulator,
                                                        sleeps: list[float]) -> None:
    emulator.set_fault(TREE, status=503, retry_after=600)
    with pytest.raises(Busy, match="HTTP 503"):
        retry.retrier().call(driver(emulator.urls[TREE]).power_state)
    assert sleeps == []
    assert emulator.requests(TREE) == 1


def test_a_permanent_error_is_not_retried(emulator: RedfishEmulator, sleeps: list[float]) -> None:
    drv = driver(emulator.urls[TREE], password="wrong-password")
    with pytest.raises(AuthFailed):
        retry.retrier().call(drv.power_state)
    assert sleeps == []
    assert emulator.requests(TREE) == 2  # the service root, one login: no second try


def test_only_idempotent_steps_are_retried(sleeps: list[float]) -> None:
    calls: list[str] = []

    def flaky(kind: str) -> str:
        calls.append(kind)
        if calls.count(kind) < 3:
            raise Unreachable("bmc", "timed out")
        return kind

    @step(idempotent=True)
    def read_state() -> str:
        return flaky("read")

    @step(idempotent=False)
    def power_cycle() -> str:
        return flaky("cycle")

    assert read_state() == "read" and calls.count("read") == 3
    assert sleeps == [2.0, 4.0]
    with pytest.raises(Unreachable):
        power_cycle()
    assert calls.count("cycle") == 1 and sleeps == [2.0, 4.0]


def test_every_workflow_step_declares_whether_it_may_run_again() -> None:
    declared = {
        fn.__name__: is_idempotent(fn)
        for fn in (provision.begin_run, provision.boot_attempt, provision.await_phone_home, provision.await_runs,
                   node_ops.transition, node_ops.node_state, slurm_pool.valid_acceptance,
                   slurm_pool.slurm_holder, slurm_pool.slurm_join, slurm_pool.slurm_await_serving,
                   slurm_pool.slurm_hold_again, slurm_pool.drain_and_empty,
                   elastic.lendable_pool, elastic.slurm_down, elastic.slurm_release, role_switch.switch_role,
                   kube_pool.kube_holder, kube_pool.kube_wait_ready, kube_pool.kube_set_pool,
                   kube_pool.kube_lift_own_cordon, kube_pool.kube_cordon, kube_pool.kube_drain,
                   elastic.acceptance_record_id, role_switch.slurm_registered, node_cycle.now, roleswap.swap_checks,
                   leasing.reserve_floor, roleswap.move_pool, node_cycle.lift_own_drain, elastic.record_trip,
                   roleswap.record_swap, changes.begin_reimage, changes.record_node_change, changes.last_image,
                   upgrade.pools_now,
                   accept.burn_in,
                   accept.multi_node, accept.judge_and_record, accept.quarantine_in_slurm,
                   accept.begin_burn_in, accept.gate_nodes, leasing.take_leases,
                   decommission.decommission_checks, decommission.slurm_remove, decommission.kube_remove,
                   decommission.bmc_power_off, decommission.bmc_reset, erase_certificate.erase_drives,
                   erase_certificate.write_certificate, erase_readback.read_drive_logs,
                   erase_certificate.sample_seed, erase_readback.read_samples)
    }
    assert None not in declared.values()
    # The side effects that must not repeat (a power cycle, requeueing or cancelling jobs, a role
    # switch) and the waits whose deadline a retry would stretch.
    assert [n for n, ok in declared.items() if not ok] == [
        "boot_attempt", "slurm_await_serving", "drain_and_empty", "switch_role", "kube_wait_ready", "kube_drain", "slurm_registered",
        "burn_in", "multi_node", "judge_and_record", "bmc_reset", "erase_drives"]
    # And no step anywhere bypasses the declaration with a bare DBOS step.
    root = Path(provision.__file__).resolve().parents[1]
    bare = [str(f.relative_to(root)) for f in root.rglob("*.py")
            if re.search(r"^\s*@DBOS\.step\(", f.read_text(), re.M)]
    assert bare == []


@pytest.mark.parametrize("error", [
    Unreachable("bmc", "timed out"),
    Busy("bmc", "HTTP 503", delay_s=3.0),
    OperationFailed("bmc", "HTTP 400"),
    NotOurs("gpu-001", DrainOwner.of("admin: bad DIMM", "root")),
])
def test_errors_survive_the_journal(error: DriverError) -> None:
    """DBOS pickles a step's error; the copy keeps its class, words and suggested delay."""
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is type(error) and str(copy) == str(error)
    assert (copy.retryable, copy.delay_s, copy.exit_code) == (error.retryable, error.delay_s, error.exit_code)


def test_a_malformed_policy_is_refused_before_anything_runs(tmp_path: Path) -> None:
    exe = shutil.which("racklife") or str(Path(sys.executable).with_name("racklife"))
    env = dict(os.environ) | {"RACKLIFE_DB": f"sqlite:///{tmp_path / 'rl.sqlite'}",
                              "RACKLIFE_RETRY_MAX_DELAY_S": "soon"}
    res = subprocess.run([exe, "nodes", "list", "--json"], env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 2
    assert "RACKLIFE_RETRY_MAX_DELAY_S='soon' is not a number" in res.stderr
    assert "Traceback" not in res.stderr and not (tmp_path / "rl.sqlite").exists()

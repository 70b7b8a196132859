"""A value that ends in a newline is refused by every validator that guards a rendered command or name.

Python's ``re.match(r"^…$")`` accepts a trailing newline (``$`` matches before it); the iPXE renderer
had exactly that hole (a ``chain`` command smuggled after a kernel argument). These validators use ``\\Z``.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

import pytest

from acceptance import evidence, fanout
from lifecycle.drivers.kube import types as kube_types
from lifecycle.drivers.kube.manifests.bootstrap_token import BootstrapToken
from lifecycle.drivers.slurm import driver as slurm_driver
from lifecycle.lab import netns

LATER = datetime(2030, 1, 1, tzinfo=UTC)
CHECKS: dict[str, Callable[[str], object]] = {
    "slurm run id in a reason": lambda v: slurm_driver.reason_for(v, "x"),
    "slurm job id": slurm_driver._job,
    "kube run id": kube_types.check_run_id,
    "evidence file name": evidence.safe_name,
    "fan-out host": lambda v: fanout.Target(node="node-01", host=v),
    "fan-out user": lambda v: fanout.Target(node="node-01", host="10.1.0.1", user=v),
    "burn-in run id": lambda v: fanout.BurninCommand(profile="h100", level="quick", run_id=v).remote_dir("node-01"),
    "burn-in env key": lambda v: fanout.BurninCommand(profile="h100", level="quick", run_id="r1", env={v: "1"}).argv("node-01"),
    "bootstrap token": lambda v: BootstrapToken(token_id=v[:6], secret=v[7:], expires=LATER),
    "lab prefix": netns.check_prefix,
}
GOOD = {
    "slurm run id in a reason": "accept-1",
    "slurm job id": "1234",
    "kube run id": "accept-1",
    "evidence file name": "node-01.json",
    "fan-out host": "10.1.0.1",
    "fan-out user": "root",
    "burn-in run id": "accept-1",
    "burn-in env key": "CUDA_VISIBLE_DEVICES",
    "bootstrap token": "abcdef.0123456789abcdef",
    "lab prefix": "rl-",
}


@pytest.mark.parametrize("what", sorted(CHECKS))
def test_the_clean_value_is_accepted(what: str) -> None:
    CHECKS[what](GOOD[what])


@pytest.mark.parametrize("what", sorted(CHECKS))
def test_a_trailing_newline_is_refused(what: str) -> None:
    with pytest.raises(ValueError):
        CHECKS[what](GOOD[what] + "\n")

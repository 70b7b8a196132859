"""Fixtures shared by every test module."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import settings

from lifecycle.lab.ports import PortLease

# CI (`nox -s ci` sets HYPOTHESIS_PROFILE=ci) draws each property test's examples from a seed fixed by the
# test, so a red run means the change broke something, not that this run drew a case no run drew before
# (one such draw turned CI red). Elsewhere the draws are new each run and find new cases; a failing one is
# printed with its reproduction blob.
settings.register_profile("ci", derandomize=True, database=None, print_blob=True)
settings.register_profile("dev", print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def repo_dir() -> Path:
    return REPO


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    """The project's shared material (fixtures, schemas, notes): ``<repo>/../shared``."""
    path = (REPO / ".." / "shared").resolve()
    assert (path / "fixtures").is_dir(), f"shared fixtures not found at {path}"
    return path


@pytest.fixture(scope="session")
def fixtures_dir(shared_dir: Path) -> Path:
    return shared_dir / "fixtures"


@pytest.fixture(scope="session")
def free_port() -> Iterator[Callable[[], int]]:
    """A port for a daemon a test starts: below the kernel's ephemeral range, locked for the session."""
    lease = PortLease()
    yield lambda: lease.take(1)[0]
    lease.release()


@pytest.fixture(autouse=True)
def _default_output() -> Iterator[None]:
    """Each test starts, and leaves, the CLI's output format at its default (table).

    The format is a context variable that the entry point sets for the process
    (``_output.set_current``); a test that runs ``racklife`` in-process with
    ``-o json`` left it set for the next test on the same worker, whose progress
    display then stayed silent ("the progress thread never ticked", in a CI run
    whose random order put tests/cli/test_cli_surface.py first).
    """
    from lifecycle.cli import _output

    with _output.using(_output.Output()):
        yield


@pytest.fixture(autouse=True)
def _no_unanswered_sources() -> Iterator[None]:
    """Each test starts with no source held as unanswered (``observe.UNANSWERED``: process-wide, so a BMC
    one test left failing would be read without retries by the next test that names the same node)."""
    from lifecycle.planner.observe import UNANSWERED

    UNANSWERED.clear()
    yield
    UNANSWERED.clear()

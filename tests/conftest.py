"""Fixtures shared by every test module."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from lifecycle.lab.ports import PortLease

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

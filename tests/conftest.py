"""Fixtures shared by every test module."""

from __future__ import annotations

from pathlib import Path

import pytest

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

"""A throwaway PostgreSQL cluster (initdb + pg_ctl) for the store and workflow tests."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from tests.postgres import throwaway_postgres


@pytest.fixture(scope="session")
def postgres_url(tmp_path_factory: pytest.TempPathFactory, free_port: Callable[[], int]) -> Iterator[str]:
    with throwaway_postgres(tmp_path_factory.mktemp("pg"), free_port()) as url:
        yield url

"""Integration fixtures: a private PostgreSQL 15 on loopback (the deployments' database), one database per test."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest

from service.devkit.postgres import LocalPostgres

_numbers = itertools.count(1)


@pytest.fixture(scope="session")
def postgres() -> Iterator[LocalPostgres]:
    with LocalPostgres() as server:
        yield server


@pytest.fixture
def postgres_url(postgres: LocalPostgres) -> str:
    return postgres.create_database(f"test_{next(_numbers)}")

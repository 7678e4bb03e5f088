from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from registry_gen.settings import Settings
from tests.user_api.pg_server import PostgresServer, start_postgres_or_skip

_state_schemas = itertools.count()


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    """Settings over an empty content/ and public/ in a temp folder."""
    content = tmp_path / "content"
    content.mkdir()
    return Settings(content_dir=content, out_dir=tmp_path / "public", base_url="http://127.0.0.1:9/", data_dir=tmp_path / "data")


@pytest.fixture(scope="session")
def state_postgres() -> Iterator[PostgresServer]:
    """One real PostgreSQL (Debian's) for the tests of the state on PostgreSQL; each test takes a
    fresh schema of it (`postgres_state_url`)."""
    server = start_postgres_or_skip()
    try:
        yield server
    finally:
        server.stop()


def postgres_state_url(server: PostgresServer) -> str:
    """The URL of a new, empty schema of `server` (isolation without a database per test)."""
    import psycopg

    schema = f"state_{next(_state_schemas)}_{os.getpid()}"
    with psycopg.connect(server.url(), autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    return server.url(schema=schema)


@pytest.fixture(params=["sqlite", "postgres"])
def any_state_settings(request: pytest.FixtureRequest, settings: Settings) -> Settings:
    """`settings` with the state on the embedded default, then on PostgreSQL (the contract's
    conformance: a store-level test runs on both)."""
    if request.param == "sqlite":
        return settings
    return settings.with_updates(database_url=postgres_state_url(request.getfixturevalue("state_postgres")))

"""The upgrade tests' stores: SQLite in the registry folder, or a schema of its own on the session's
real PostgreSQL (tests/user_api's server, started only when a test asks for it)."""

from __future__ import annotations

import itertools

import pytest

from tests.user_api.conftest import PG_DATABASE, postgres_server  # noqa: F401 - a fixture, used by name
from tests.user_api.pg_server import PostgresServer

_schemas = itertools.count()


@pytest.fixture(params=["sqlite", "postgres"])
def database_url(request: pytest.FixtureRequest) -> str | None:
    """None for SQLite (data/users.sqlite3); else a fresh PostgreSQL schema's URL."""
    if request.param == "sqlite":
        return None
    import psycopg

    server: PostgresServer = request.getfixturevalue("postgres_server")
    schema = f"upgrade_{next(_schemas)}"
    with psycopg.connect(server.url(PG_DATABASE), autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    return server.url(PG_DATABASE, schema=schema)

"""The user store's part of `registry-gen migrate` (registry_gen.migrate, entry-point group
`registry_gen.migrators`): accounts, tokens, groups, upgrade steps, hooks and their deliveries,
the account changes of the audit log copied whole between `<data_dir>/users.sqlite3` and PostgreSQL, in either direction.

Rows come over as they are: password hashes (argon2, verified the same anywhere), token digests (a
token made before still authenticates), the hooks' secrets as sealed (they open with the same
`hooks.secret_key`), every key and number (users' pk, hook ids, the deliveries' journal numbers and
the hook cursor). Only the types differ between the two: times (ISO text on SQLite, timestamptz on
PostgreSQL) and the readonly flag. What each store derives (the search index, the gram tables, the
live count) is made again on the target, not copied: the two index grams of different lengths.
What several instances share only while they run (store_shared: web-login sessions, the login
guard's buckets, the leader's terms) is not copied either: the embedded default keeps it in memory.

The source is only read: a read-only SQLite connection, plain SELECTs on PostgreSQL.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Final

from registry_gen.errors import ConfigError, MigrationRefused
from registry_gen.settings import Settings

USERS_FILE: Final = "users.sqlite3"
# Parents first (a row's references land before it). The derived tables are left out on purpose.
TABLES: Final[tuple[tuple[str, tuple[str, ...]], ...]] = (
    ("users", ("pk", "id", "username", "email", "full_name", "role", "status", "password_hash", "created_at", "updated_at", "version")),
    ("user_tokens", ("key", "user_pk", "token_hash", "token_prefix", "readonly", "cidr_whitelist", "description", "created_at", "expires_at")),
    ("account_groups", ("user_pk", "name")),
    ("upgrade_steps", ("step", "since")),
    ("hooks", ("id", "user_pk", "type", "name", "endpoint", "secret", "created_at", "updated_at")),
    ("hook_deliveries", ("id", "hook_id", "seq", "package", "event", "status", "attempts", "created", "due", "claimed_by",
                         "claimed_until", "last_attempt", "response_code", "last_error", "latency_ms", "excerpt")),
    ("hook_cursor", ("id", "seq")),
    ("account_audit", ("seq", "time", "event", "actor", "actor_id", "subject", "who", "detail")),  # user_api.store_audit
)  # fmt: skip
TIME_COLUMNS: Final = {("users", "created_at"), ("users", "updated_at"), ("user_tokens", "created_at"),
                       ("user_tokens", "expires_at"), ("upgrade_steps", "since")}  # fmt: skip
FLAG_COLUMNS: Final = {("user_tokens", "readonly")}


def converted(table: str, names: tuple[str, ...], row: tuple[Any, ...], *, to_postgres: bool) -> tuple[Any, ...]:
    """A row of one store in the other's types: times as timestamptz or ISO text (UTC), flags as
    booleans or 0/1; every other value as it is."""
    values = []
    for name, value in zip(names, row):
        if value is not None and (table, name) in TIME_COLUMNS:
            value = datetime.fromisoformat(value) if to_postgres else value.astimezone(timezone.utc).isoformat()
        elif value is not None and (table, name) in FLAG_COLUMNS:
            value = bool(value) if to_postgres else int(value)
        values.append(value)
    return tuple(values)


@contextmanager
def reading(settings: Settings) -> Iterator[Any | None]:
    """A read-only connection to the store `settings` name, with its schema checked; None when the
    store was never made (no file, or no tables yet)."""
    if settings.database_url:
        with _reading_postgres(settings.database_url) as conn:
            yield conn
        return
    path = Path(settings.data_dir) / USERS_FILE
    if not path.is_file():
        yield None
        return
    from user_api.store_sqlite import SCHEMA_VERSION

    conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    try:
        version = int(conn.execute("PRAGMA user_version").fetchone()[0])
        _check_version(version, SCHEMA_VERSION, path)
        yield conn if version else None
    finally:
        conn.close()


@contextmanager
def _reading_postgres(url: str) -> Iterator[Any | None]:
    import psycopg

    from user_api.store_postgres import SCHEMA_VERSION

    try:
        conn = psycopg.connect(url, autocommit=True, connect_timeout=10)
    except psycopg.OperationalError as exc:  # its message may quote the URL, password included
        raise ConfigError(f"cannot open the PostgreSQL user store ({exc.__class__.__name__})") from None
    try:
        if conn.execute("SELECT to_regclass('user_api_schema')").fetchone()[0] is None:
            yield None
            return
        _check_version(int(conn.execute("SELECT COALESCE(MAX(version), 0) FROM user_api_schema").fetchone()[0]), SCHEMA_VERSION, "the database")
        yield conn
    finally:
        conn.close()


def _check_version(version: int, latest: int, where: object) -> None:
    if version not in (0, latest):
        raise MigrationRefused(f"{where}: a user store of schema {version}, this release's is {latest}: "
                               f"run `registry-gen user list` once with the release that matches both ends, then migrate")  # fmt: skip


def has_table(conn: Any, table: str) -> bool:
    """Tables added without a schema step (account_audit) exist only once this release opened the store."""
    if isinstance(conn, sqlite3.Connection):
        return conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (table,)).fetchone() is not None
    return conn.execute("SELECT to_regclass(%s)", (table,)).fetchone()[0] is not None


def rows_of(conn: Any, table: str, names: tuple[str, ...]) -> list[tuple[Any, ...]]:
    if not has_table(conn, table):
        return []
    return [tuple(row) for row in conn.execute(f"SELECT {', '.join(names)} FROM {table} ORDER BY 1").fetchall()]


def counts_of(conn: Any | None) -> dict[str, int]:
    if conn is None:
        return {table: 0 for table, _ in TABLES}
    found = {table: int(conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]) if has_table(conn, table) else 0
             for table, _ in TABLES if table != "hook_cursor"}  # fmt: skip
    cursor = conn.execute("SELECT seq FROM hook_cursor")  # one row: the journal number hooks were expanded up to
    return {**found, "hook_cursor": int((cursor.fetchone() or (0,))[0])}


class UserStoreMigrator:
    what = "accounts"

    def counts(self, settings: Settings) -> dict[str, int]:
        with reading(settings) as conn:
            return counts_of(conn)

    def copy(self, source: Settings, target: Settings) -> None:
        to_postgres = bool(target.database_url)
        with reading(source) as conn:
            if conn is None:
                return  # no account was ever made: nothing to copy, no store to make
            tables = [(table, names, [converted(table, names, row, to_postgres=to_postgres) for row in rows_of(conn, table, names)])
                      for table, names in TABLES]  # fmt: skip
        dialect = _target_dialect(target)
        try:
            dialect.restore(tables)
        finally:
            dialect.close()


def _target_dialect(target: Settings) -> Any:
    if target.database_url:
        from user_api.store_postgres import PostgresDialect

        return PostgresDialect(target.database_url)
    from user_api.store_sqlite import SqliteDialect

    return SqliteDialect(Path(target.data_dir) / USERS_FILE)


MIGRATOR: Final = UserStoreMigrator()

"""SQLite dialect: one file, WAL, one connection per thread, FTS5 trigram index for search."""

from __future__ import annotations

import os
import sqlite3
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any, Final

from registry_gen.errors import ConfigError
from registry_gen.state.sqlite_base import use_wal
from user_api.grams import MAX_GRAM, RECOUNT, UPSERT_COUNTS, counted, gram_rows
from user_api.groups import legacy_groups
from user_api.models import utcnow
from user_api import store_audit
from user_api.store_audit import SQLITE_TABLE as ACCOUNT_AUDIT_TABLE
from user_api.store_hooks import HOOK_TABLES
from user_api.sqlstore import BIND_RECORDED_MAINTAINERS, USER_COLUMNS, Tx, adopt_legacy_groups, columns, count_rows

MIN_SQLITE: Final = (3, 35, 0)  # FTS5 trigram needs 3.34, RETURNING 3.35
# 2: user_tokens.expires_at; 3: user_grams; 4: user_gram_counts; 5: upgrade_steps; 6: account_groups;
# 7: hooks, hook_deliveries, hook_cursor (user_api.store_hooks)
SCHEMA_VERSION: Final = 7
BUSY_TIMEOUT_MS: Final = 5000

TABLES: Final = """
CREATE TABLE IF NOT EXISTS users (
    pk INTEGER PRIMARY KEY,
    id TEXT NOT NULL UNIQUE,
    username TEXT NOT NULL UNIQUE,
    email TEXT,
    full_name TEXT,
    role TEXT NOT NULL CHECK (role IN ('user', 'admin')),
    status TEXT NOT NULL CHECK (status IN ('active', 'disabled', 'deleted')),
    password_hash TEXT NOT NULL,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    version INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS user_tokens (
    key TEXT PRIMARY KEY,
    user_pk INTEGER NOT NULL REFERENCES users (pk) ON DELETE CASCADE,
    token_hash TEXT NOT NULL UNIQUE,
    token_prefix TEXT NOT NULL,
    readonly INTEGER NOT NULL,
    cidr_whitelist TEXT NOT NULL,
    description TEXT,
    created_at TEXT NOT NULL,
    expires_at TEXT
);
CREATE INDEX IF NOT EXISTS user_tokens_by_user ON user_tokens (user_pk);
-- Covers the username-prefix search (range + tombstone filter) without touching the table.
CREATE INDEX IF NOT EXISTS users_by_username_status ON users (username, status);
CREATE TABLE IF NOT EXISTS user_stats (id INTEGER PRIMARY KEY CHECK (id = 1), live_users INTEGER NOT NULL);
INSERT OR IGNORE INTO user_stats (id, live_users) VALUES (1, 0);
-- Tombstones (status 'deleted') stay out of the index: the view is what 'rebuild' reads.
CREATE VIEW IF NOT EXISTS users_live AS
    SELECT pk, username, full_name, email FROM users WHERE status <> 'deleted';
-- 1-2 character keywords (user_api/grams.py); kept by the store in each write's transaction.
CREATE TABLE IF NOT EXISTS user_grams (
    gram TEXT NOT NULL,
    field INTEGER NOT NULL,
    user_pk INTEGER NOT NULL,
    PRIMARY KEY (gram, field, user_pk)
) WITHOUT ROWID;
-- How many user_grams rows each (gram, field) has: a short search's counts in one row read each.
CREATE TABLE IF NOT EXISTS user_gram_counts (
    gram TEXT NOT NULL,
    field INTEGER NOT NULL,
    n INTEGER NOT NULL,
    PRIMARY KEY (gram, field)
) WITHOUT ROWID;
-- Schema 5: what an operator still has to run after an upgrade (SqlUserStore.pending_upgrade_steps).
CREATE TABLE IF NOT EXISTS upgrade_steps (step TEXT PRIMARY KEY, since TEXT NOT NULL);
-- Schema 6: the accounts' groups (user_api.groups), which were a file of their own before.
CREATE TABLE IF NOT EXISTS account_groups (
    user_pk INTEGER NOT NULL REFERENCES users (pk) ON DELETE CASCADE,
    name TEXT NOT NULL,
    PRIMARY KEY (user_pk, name)
) WITHOUT ROWID;
CREATE VIRTUAL TABLE IF NOT EXISTS users_fts USING fts5(
    username, full_name, email, content = 'users_live', content_rowid = 'pk', tokenize = 'trigram'
);
"""

# Kept apart so the bulk path can drop them, load, then rebuild the index and the count once.
TRIGGERS: Final = """
CREATE TRIGGER IF NOT EXISTS users_after_insert AFTER INSERT ON users BEGIN
    INSERT INTO users_fts (rowid, username, full_name, email)
        SELECT new.pk, new.username, new.full_name, new.email WHERE new.status <> 'deleted';
    UPDATE user_stats SET live_users = live_users + (new.status <> 'deleted') WHERE id = 1;
END;
CREATE TRIGGER IF NOT EXISTS users_after_delete AFTER DELETE ON users BEGIN
    INSERT INTO users_fts (users_fts, rowid, username, full_name, email)
        SELECT 'delete', old.pk, old.username, old.full_name, old.email WHERE old.status <> 'deleted';
    UPDATE user_stats SET live_users = live_users - (old.status <> 'deleted') WHERE id = 1;
END;
CREATE TRIGGER IF NOT EXISTS users_after_update
AFTER UPDATE OF username, full_name, email, status ON users BEGIN
    INSERT INTO users_fts (users_fts, rowid, username, full_name, email)
        SELECT 'delete', old.pk, old.username, old.full_name, old.email WHERE old.status <> 'deleted';
    INSERT INTO users_fts (rowid, username, full_name, email)
        SELECT new.pk, new.username, new.full_name, new.email WHERE new.status <> 'deleted';
    UPDATE user_stats SET live_users = live_users + (new.status <> 'deleted') - (old.status <> 'deleted')
        WHERE id = 1;
END;
"""
TRIGGER_NAMES: Final = ("users_after_insert", "users_after_delete", "users_after_update")



def private_folder(folder: Path) -> None:
    """The data folder holds password hashes and token digests: only the server's user may enter."""
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(folder, 0o700)


def private_files(database: Path) -> None:
    """The database and its WAL/SHM siblings: 0600 (created so, and tightened when found wider)."""
    for path in (database, database.with_name(database.name + "-wal"), database.with_name(database.name + "-shm")):
        if not path.exists():
            if path == database:
                os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))
            continue
        os.chmod(path, 0o600)

def migrate(conn: sqlite3.Connection, version: int) -> None:
    """Brings a database of an older schema up to SCHEMA_VERSION (inside the schema transaction)."""
    token_columns = {row[1] for row in conn.execute("PRAGMA table_info(user_tokens)")}
    if version < 2 and conn.execute("SELECT 1 FROM users LIMIT 1").fetchone():
        # Accounts of a release whose maintainer entries were rights by name (docs/operating/upgrades.md).
        conn.execute("INSERT OR IGNORE INTO upgrade_steps (step, since) VALUES (?, ?)",
                     (BIND_RECORDED_MAINTAINERS, utcnow().isoformat()))  # fmt: skip
    if version < 2 and "expires_at" not in token_columns:
        conn.execute("ALTER TABLE user_tokens ADD COLUMN expires_at TEXT")
    if version < 3:
        conn.execute("DELETE FROM user_grams")  # rebuilt whole: the index starts from what users hold
        conn.execute("DELETE FROM user_gram_counts")
        fill_grams(conn, 0)
    elif version < 4:
        conn.execute("DELETE FROM user_gram_counts")
        conn.execute(RECOUNT)


def fill_grams(conn: sqlite3.Connection, after_pk: int) -> None:
    """Indexes the grams of every live user past `after_pk`, and adds them to the counts (a
    migration's backfill, a bulk load)."""
    users = conn.execute(
        "SELECT pk, username, full_name, email FROM users WHERE pk > ? AND status <> 'deleted' ORDER BY pk",
        (after_pk,),
    )
    counts: Counter[tuple[str, int]] = Counter()
    rows = counted(gram_rows(users), counts, range(1, MAX_GRAM + 1))
    conn.executemany("INSERT INTO user_grams (gram, field, user_pk) VALUES (?, ?, ?)", rows)
    conn.executemany(UPSERT_COUNTS, ((gram, field, n) for (gram, field), n in sorted(counts.items())))


class _SqliteTx:
    def __init__(self, cursor: sqlite3.Cursor):
        self._cursor = cursor

    def all(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return self._cursor.execute(sql, params).fetchall()

    def one(self, sql: str, params: Sequence[Any] = ()) -> tuple[Any, ...] | None:
        row = self._cursor.execute(sql, params).fetchone()
        self._cursor.fetchall()  # drain, so RETURNING statements complete before COMMIT
        return row

    def run(self, sql: str, params: Sequence[Any] = ()) -> int:
        return self._cursor.execute(sql, params).rowcount


def fts5_phrase(keyword: str) -> str:
    """The keyword as one FTS5 string: a literal substring, never query syntax (AND, NEAR, ")."""
    return '"' + keyword.replace('"', '""') + '"'


def match_expression(keyword: str, *, include_email: bool) -> str:
    phrase = fts5_phrase(keyword)
    return phrase if include_email else "{username full_name} : " + phrase


class SqliteDialect:
    name = "sqlite"
    for_update = ""  # BEGIN IMMEDIATE already serialises writers
    indexed_gram = MAX_GRAM  # longer keywords read FTS5, which counts at ~0.4 us a match:
    counted_gram = MAX_GRAM  # no need to index or count their grams

    def __init__(self, path: Path):
        if sqlite3.sqlite_version_info < MIN_SQLITE:
            raise ConfigError(
                f"SQLite {'.'.join(map(str, MIN_SQLITE))}+ is needed (FTS5 trigram, RETURNING); "
                f"this Python has {sqlite3.sqlite_version}"
            )
        self.path = Path(path)
        private_folder(self.path.parent)
        private_files(self.path)
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self._init_schema()

    def _connect(self) -> sqlite3.Connection:
        # isolation_level=None: transactions are explicit (BEGIN / BEGIN IMMEDIATE below).
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=BUSY_TIMEOUT_MS / 1000)
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        conn.execute("PRAGMA foreign_keys = ON")
        # FULL: an acknowledged commit (a token revocation, a password change) survives power loss.
        conn.execute("PRAGMA synchronous = FULL")
        with self._lock:
            self._connections.append(conn)
        return conn

    def pragma(self, name: str) -> Any:
        """The value of a PRAGMA on this thread's connection (diagnostics and tests)."""
        if not name.isidentifier():
            raise ValueError(f"not a pragma name: {name!r}")
        return self._connection().execute(f"PRAGMA {name}").fetchone()[0]

    def _connection(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._connect()
            self._local.conn = conn
        return conn

    def _init_schema(self) -> None:
        conn = self._connection()
        use_wal(conn)
        private_files(self.path)  # the -wal and -shm files exist now
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise ConfigError(f"{self.path} was written by a newer version (schema {version})")
        with legacy_groups(self.path.parent) as legacy:  # the groups file of an earlier release, if any
            conn.execute("BEGIN IMMEDIATE")
            try:
                for statement in _statements(TABLES + HOOK_TABLES + ACCOUNT_AUDIT_TABLE + TRIGGERS):
                    conn.execute(statement)
                migrate(conn, version)
                unknown = [] if legacy is None else adopt_legacy_groups(_SqliteTx(conn.cursor()), legacy.rows)
                conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            if legacy is not None:
                legacy.retire(unknown)

    @contextmanager
    def _transaction(self, begin: str) -> Iterator[Tx]:
        conn = self._connection()
        cursor = conn.cursor()
        cursor.execute(begin)
        try:
            yield _SqliteTx(cursor)
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        else:
            conn.execute("COMMIT")
        finally:
            cursor.close()

    def read(self) -> Any:
        return self._transaction("BEGIN")  # one snapshot for a count and its page

    def write(self) -> Any:
        return self._transaction("BEGIN IMMEDIATE")

    def is_unavailable(self, exc: BaseException) -> bool:
        message = str(exc).lower()
        return isinstance(exc, sqlite3.OperationalError) and ("locked" in message or "busy" in message)

    def is_username_conflict(self, exc: BaseException) -> bool:
        return isinstance(exc, sqlite3.IntegrityError) and "users.username" in str(exc)

    def encode_time(self, moment: datetime) -> str:
        return moment.isoformat()

    def count_matches(self, tx: Tx, keyword: str, *, include_email: bool, limit: int | None) -> int:
        return count_rows(
            tx, "SELECT 1 FROM users_fts WHERE users_fts MATCH ?",
            (match_expression(keyword, include_email=include_email),), limit,
        )

    def page_matches(
        self, tx: Tx, keyword: str, *, include_email: bool, skip_prefix: tuple[str, str], offset: int, limit: int,
        matches: int,
    ) -> list[tuple[Any, ...]]:
        # FTS5 yields rowids in ascending order, so "ORDER BY rowid LIMIT" streams: no sort of all hits.
        return tx.all(
            f"SELECT {columns(USER_COLUMNS, 'u')} FROM users_fts JOIN users u ON u.pk = users_fts.rowid"
            " WHERE users_fts MATCH ? AND NOT (u.username >= ? AND u.username < ?)"
            " ORDER BY users_fts.rowid LIMIT ? OFFSET ?",
            (match_expression(keyword, include_email=include_email), *skip_prefix, limit, offset),
        )

    def bulk_insert(self, rows: Iterable[tuple[Any, ...]], audit: Callable[[], list[tuple[Any, ...]]] | None = None) -> int:
        conn = self._connection()
        conn.execute("BEGIN IMMEDIATE")
        try:
            for name in TRIGGER_NAMES:
                conn.execute(f"DROP TRIGGER IF EXISTS {name}")
            before = conn.execute("SELECT count(*) FROM users").fetchone()[0]
            last_pk = conn.execute("SELECT coalesce(max(pk), 0) FROM users").fetchone()[0]
            conn.executemany(
                "INSERT INTO users (id, username, email, full_name, role, status, password_hash,"
                " created_at, updated_at, version) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 1)",
                rows,
            )
            inserted = conn.execute("SELECT count(*) FROM users").fetchone()[0] - before
            if audit is not None:
                conn.executemany(store_audit.INSERT, audit())  # the accounts' entries, in their transaction
            conn.execute("INSERT INTO users_fts (users_fts) VALUES ('rebuild')")
            # One segment per level instead of the rebuild's many: phrase counts read ~20% less.
            conn.execute("INSERT INTO users_fts (users_fts) VALUES ('optimize')")
            fill_grams(conn, last_pk)
            conn.execute(
                "UPDATE user_stats SET live_users = (SELECT count(*) FROM users WHERE status <> 'deleted')"
            )
            for statement in _statements(TRIGGERS):
                conn.execute(statement)
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("PRAGMA optimize")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # a bulk load leaves a WAL as big as the data
        return int(inserted)

    def restore(self, tables: Sequence[tuple[str, Sequence[str], Sequence[tuple[Any, ...]]]]) -> None:
        """Rows copied whole from another store (`registry-gen migrate`), keys kept, into this empty
        one in one transaction: each table's rows replace its defaults (hook_cursor's row); the
        triggers fill the search index and the live count, the grams are made from the users."""
        conn = self._connection()
        conn.execute("BEGIN IMMEDIATE")
        try:
            for table, names, rows in tables:
                conn.execute(f"DELETE FROM {table}")  # names: user_api.store_migrate's own list
                marks = ", ".join("?" for _ in names)
                conn.executemany(f"INSERT INTO {table} ({', '.join(names)}) VALUES ({marks})", rows)
            fill_grams(conn, 0)
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    def close(self) -> None:
        with self._lock:
            connections, self._connections = self._connections, []
        for conn in connections:
            conn.close()
        self._local = threading.local()


def _statements(script: str) -> list[str]:
    """Split a DDL script on statement ends, keeping trigger bodies whole."""
    statements: list[str] = []
    buffer = ""
    for line in script.splitlines(keepends=True):
        if line.lstrip().startswith("--"):
            continue
        buffer += line
        if sqlite3.complete_statement(buffer):
            statements.append(buffer.strip())
            buffer = ""
    return statements

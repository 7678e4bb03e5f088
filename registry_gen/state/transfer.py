"""The ledger copied whole from one store to the other (`registry-gen migrate`, registry_gen.migrate):
the embedded `ledger.sqlite3` into an empty PostgreSQL ledger, and a PostgreSQL ledger into a new
`ledger.sqlite3`. Every row comes over as it is: pins, first-seen times, the keyring, the writes and
the journal with their numbers (a follower's `since` and a hook's cursor stay meaningful).

The source is only read (a read-only SQLite connection; plain SELECTs on PostgreSQL); the cache is
not copied (the first build on the target is a full one and refills it).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from registry_gen.errors import MigrationRefused
from registry_gen.settings import Settings
from registry_gen.state.migrations import LATEST
from registry_gen.state.postgres_base import LOCK_SCHEMA, POOL, PgDb
from registry_gen.state.postgres_schema import LEDGER_COLUMNS, LEDGER_LATEST, import_embedded_ledger, prepare
from registry_gen.state.sqlite_base import connect_readonly, user_version
from registry_gen.state.sqlite_ledger import LEDGER_DATABASE, SqliteLedger

LEDGER_TABLES = tuple(LEDGER_COLUMNS)


def ledger_counts(settings: Settings) -> dict[str, int]:
    """Rows per ledger table of the store `settings` name (all 0 for a ledger not made yet)."""
    if settings.database_url:
        db = POOL.connect(settings.database_url)
        try:
            return _pg_counts(db)
        finally:
            db.close()
    return _sqlite_counts(settings.state_folder / LEDGER_DATABASE)


def _sqlite_counts(path: Path) -> dict[str, int]:
    if not path.is_file():
        return dict.fromkeys(LEDGER_TABLES, 0)
    db = connect_readonly(path)
    try:
        if user_version(db) == 0:
            return dict.fromkeys(LEDGER_TABLES, 0)
        _check_step(user_version(db), LATEST, path)
        return {table: int(db.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]) for table in LEDGER_TABLES}
    except sqlite3.DatabaseError as exc:
        raise MigrationRefused(f"{path}: not a readable ledger ({exc})") from None
    finally:
        db.close()


def _pg_counts(db: PgDb) -> dict[str, int]:
    if db.execute("SELECT to_regclass('registry_ledger_steps')").fetchone()[0] is None:
        return dict.fromkeys(LEDGER_TABLES, 0)
    _check_step(int(db.execute("SELECT COALESCE(MAX(number), 0) FROM registry_ledger_steps").fetchone()[0]), LEDGER_LATEST, "the database")
    return {table: int(db.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]) for table in LEDGER_TABLES}


def _check_step(step: int, latest: int, where: object) -> None:
    if step != latest:
        raise MigrationRefused(
            f"{where}: its ledger is at step {step}, this release's at {latest}: run `registry-gen build` once with "
            f"the release that matches both ends, then migrate"
        )


def copy_ledger_into_postgres(state_folder: Path, url: str) -> None:
    """The embedded ledger of `state_folder` into the (empty) ledger of `url`, in one transaction:
    a new database takes it in the transaction that makes its schema (postgres_schema.prepare);
    one whose schema was made before, empty, takes it in a transaction of its own."""
    _sqlite_counts(state_folder / LEDGER_DATABASE)  # refuses a ledger of another step before anything is written
    db = POOL.connect(url)
    try:
        prepare(db, state_folder)
        if sum(_pg_counts(db).values()) == 0:
            db.begin()
            try:
                db.lock(LOCK_SCHEMA, 0)
                import_embedded_ledger(db, state_folder)
            except BaseException:
                db.rollback()
                raise
            db.commit()
    finally:
        db.close()


def copy_ledger_into_sqlite(url: str, state_folder: Path) -> None:
    """The ledger of `url` into a new `<state_folder>/ledger.sqlite3`, in one transaction."""
    source = POOL.connect(url)
    try:
        _pg_counts(source)  # refuses a ledger of another step before anything is written
        with SqliteLedger(state_folder / LEDGER_DATABASE) as target:
            target.begin()
            for table, columns in LEDGER_COLUMNS.items():
                rows = source.execute(f"SELECT {columns} FROM {table} ORDER BY 1").fetchall()  # names from LEDGER_COLUMNS
                marks = ", ".join("?" for _ in columns.split(","))
                target.db.executemany(f"INSERT INTO {table} ({columns}) VALUES ({marks})", rows)
            target.commit()
    finally:
        source.close()

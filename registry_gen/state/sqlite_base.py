"""What every SQLite database of the state shares: how a connection is opened, how results are read."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from registry_gen.state import heldopen


def connect(path: Path, *, synchronous: str) -> sqlite3.Connection:
    """A connection in WAL mode, autocommit (transactions are opened explicitly), shared across
    threads by its owner. `synchronous`: NORMAL for what a build can redo (a commit is one append,
    atomic, and survives a crash of the process; a power cut may lose the last build's changes,
    which only makes the next build redo them), FULL for what nothing can redo (the ledger)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    use_wal(db)
    db.execute(f"PRAGMA synchronous={synchronous}")
    db.execute("PRAGMA busy_timeout=30000")
    db.execute(f"PRAGMA journal_size_limit={heldopen.WAL_KEPT_AT_MOST}")  # a reset WAL shrinks back to this
    return db


def use_wal(db: sqlite3.Connection, patience: float = 30.0) -> None:
    """`PRAGMA journal_mode=WAL`, retried while another connection holds the file. Turning a new
    database to WAL answers a lock conflict at once with "database is locked" (SQLite's busy
    handler is not asked), so two threads or processes opening a new file together failed: a
    mirror's first read racing its start-up sweep answered a 500 in CI."""
    deadline, delay = time.monotonic() + patience, 0.002
    while True:
        try:
            db.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() >= deadline:
                raise
        time.sleep(delay)  # a backoff, as SQLite's own busy handler does
        delay = min(delay * 2, 0.1)


def connect_readonly(path: Path) -> sqlite3.Connection:
    """A read-only connection: it skips every schema script, and closing it never checkpoints the
    WAL (only a writer can), so a look before a write costs no fsync."""
    db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, isolation_level=None, check_same_thread=False)
    db.execute("PRAGMA busy_timeout=30000")
    return db


def user_version(db: sqlite3.Connection) -> int:
    return int(db.execute("PRAGMA user_version").fetchone()[0])


def first_column(rows: sqlite3.Cursor, batch: int) -> Iterator[Any]:
    """A query's first column, fetched `batch` rows at a time: never the whole result in the heap."""
    while block := rows.fetchmany(batch):
        yield from (row[0] for row in block)

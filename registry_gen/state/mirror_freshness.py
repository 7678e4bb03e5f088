"""The mirror's freshness state (I/O): per package, when the upstream was last asked, its validators
(ETag, Last-Modified) and what the answer was. `<data_dir>/mirror/state.sqlite3`, one row a package.

Only what is cheap to lose lives here: without it, the next request for a package asks its
upstream again (conditionally once the row is back). What the mirror took from an upstream is in
content/ (registry-meta.json `mirror`), the source of truth.

Every proxied document read looks its row up (the freshness check), so a lookup is one indexed
read on a connection the thread keeps open: its cost does not grow with the number of packages.
It lives with the state's other SQL (tests/core/test_code_rules.py) but outside its contract: a
file per machine, on PostgreSQL set-ups too, as a cache each server may lose on its own.
"""

from __future__ import annotations

import contextlib
import logging
import sqlite3
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from registry_gen.state.sqlite_base import use_wal

MIRRORED = "mirrored"  # the tree holds what the upstream has (the policy allowing)
MISSING = "missing"  # the upstream has no such package (remembered for maxage, like a document)
LOCAL = "local"  # owned here: never proxied (`note` says why)
_SET_ASIDE_LOCK = threading.Lock()  # one thread sets a damaged file aside; the others open the new one
log = logging.getLogger(__name__)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS packages (
    name TEXT PRIMARY KEY,
    uplink TEXT NOT NULL,
    status TEXT NOT NULL,
    checked REAL NOT NULL,
    etag TEXT,
    last_modified TEXT,
    fingerprint TEXT NOT NULL DEFAULT '',
    next_change REAL,
    note TEXT NOT NULL DEFAULT ''
)
"""


@dataclass(frozen=True)
class Entry:
    name: str
    uplink: str
    status: str
    checked: float  # epoch seconds of the last answer from the upstream (or ownership check)
    etag: str | None = None
    last_modified: str | None = None
    fingerprint: str = ""  # the policy inputs the verdicts were made with
    next_change: float | None = None  # when a held version comes of age
    note: str = ""


class MirrorState:
    def __init__(self, data_dir: Path):
        self.path = data_dir / "mirror" / "state.sqlite3"
        self.local = threading.local()

    def _connection(self) -> sqlite3.Connection:
        found = getattr(self.local, "connection", None)
        if found is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            try:
                found = self._open()
            except sqlite3.DatabaseError as exc:
                if isinstance(exc, sqlite3.OperationalError):
                    raise  # locked, read-only, disk full: the file itself is fine
                found = self._open_after_setting_aside(exc)
            self.local.connection = found
        return found

    def _open(self) -> sqlite3.Connection:
        connection = sqlite3.connect(str(self.path), timeout=30, isolation_level=None)
        try:
            use_wal(connection)
            connection.execute("PRAGMA synchronous=NORMAL")  # a lost row costs one more upstream request
            connection.execute(_SCHEMA)
        except BaseException:
            connection.close()
            raise
        return connection

    def _open_after_setting_aside(self, damage: sqlite3.DatabaseError) -> sqlite3.Connection:
        """A file that is not a database (a disk error, a stray copy) is only a cache: it is kept
        aside for whoever wants to look, and the mirror starts afresh (each package is asked of its
        upstream again, conditionally once its row is back) instead of answering 500s."""
        with _SET_ASIDE_LOCK:
            try:
                return self._open()  # another thread set it aside already
            except sqlite3.OperationalError:
                raise  # locked or unwritable now: no proof the file is damaged, so it stays
            except sqlite3.DatabaseError:
                pass
            aside = self.path.with_name(f"{self.path.name}.damaged-{int(time.time())}")
            for suffix in ("", "-wal", "-shm"):
                with contextlib.suppress(FileNotFoundError):
                    Path(f"{self.path}{suffix}").rename(f"{aside}{suffix}")
            log.warning("%s is damaged (%s); it is kept as %s and the mirror's freshness state starts afresh", self.path, damage, aside.name)
            return self._open()

    def get(self, name: str) -> Entry | None:
        row = self._connection().execute("SELECT * FROM packages WHERE name = ?", (name,)).fetchone()
        return Entry(*row) if row is not None else None

    def put(self, entry: Entry) -> None:
        self._connection().execute(
            "INSERT OR REPLACE INTO packages VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (entry.name, entry.uplink, entry.status, entry.checked, entry.etag, entry.last_modified,
             entry.fingerprint, entry.next_change, entry.note),
        )  # fmt: skip

    def put_many(self, entries: Iterator[Entry]) -> None:
        connection = self._connection()
        with connection:
            connection.execute("BEGIN")
            connection.executemany(
                "INSERT OR REPLACE INTO packages VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                ((e.name, e.uplink, e.status, e.checked, e.etag, e.last_modified, e.fingerprint, e.next_change, e.note)
                 for e in entries),
            )  # fmt: skip

    def entries(self, status: str | None = None) -> Iterator[Entry]:
        """Every row (of one status), by name."""
        query = "SELECT * FROM packages" + (" WHERE status = ?" if status else "") + " ORDER BY name"
        for row in self._connection().execute(query, (status,) if status else ()):
            yield Entry(*row)

    def forget(self, name: str) -> None:
        self._connection().execute("DELETE FROM packages WHERE name = ?", (name,))

    def close(self) -> None:
        found = getattr(self.local, "connection", None)
        if found is not None:
            found.close()
            self.local.connection = None

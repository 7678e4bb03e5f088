"""The state on PostgreSQL (`database_url`): the ledger, the cache and the journal as tables of one
database (postgres_schema), so that several `registry-gen api` processes share one state.

    ledger   pins (UNIQUE (name, version)), first_seen, keyring, writes, journal: never dropped,
             numbered steps; an embedded ledger.sqlite3 found beside the tree is moved in once
    cache    the SQLite cache's tables (settings, folders, archives, ... manifests): dropped and
             made again when their version changes (a full build refills them)

A build is one transaction holding the ledger's rows and the cache's (one commit, nothing to
converge). Each session, view or journal takes a connection from a per-process pool
(postgres_base); a database that cannot be reached is StateUnavailable (HTTP 503) within
CONNECT_TIMEOUT_SECONDS.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

from registry_gen.state.postgres_base import LISTINGS, LOCK_REGISTRY, POOL, PgDb
from registry_gen.state.postgres_cache import PgManifests, PgSession, settle_stale_listings, settle_whole_documents
from registry_gen.state.postgres_ledger import PgLedger
from registry_gen.state.postgres_locks import PgWriteLock
from registry_gen.state.postgres_schema import prepare
from registry_gen.state.records import StalePage
from registry_gen.state.sqlite_schema import WHOLE_STALE

PREPARED: set[str] = set()  # database URLs whose schema this process brought up to date
_preparing = threading.Lock()


class PostgresState:
    def __init__(self, url: str, state_folder: Path) -> None:
        self.url = url
        self.state_folder = state_folder  # where an embedded ledger to move in would be

    def connect(self) -> PgDb:
        """A pooled connection, the schema made or moved on first use in this process."""
        db = POOL.connect(self.url)
        if self.url not in PREPARED:
            try:
                with _preparing:
                    if self.url not in PREPARED:
                        prepare(db, self.state_folder)
                        PREPARED.add(self.url)
            except BaseException:
                db.close()
                raise
        return db

    def session(self) -> PgSession:
        return PgSession(self.connect())

    def manifests(self, *, readonly: bool = False) -> PgManifests:
        return PgManifests(self.connect(), readonly=readonly)

    def journal(self) -> PgLedger:
        """The change journal: a connection of its own, each call its own transaction."""
        return PgLedger(self.connect(), owned=True)

    def write_lock(self, lock_file: Path) -> PgWriteLock:
        """Per-package advisory locks (registry_gen.state.locks, postgres_locks); `lock_file`,
        the embedded default's, is not needed."""
        return PgWriteLock(self.connect)

    def registry_lock(self, timeout: float) -> AbstractContextManager[object]:
        """What a whole build holds besides the tree's file lock: every package's writes wait."""
        return PgWriteLock(self.connect).whole(timeout)

    @contextmanager
    def view(self) -> Iterator[PgSession]:
        """The write side's look: each question one query of its own (no transaction held)."""
        state = self.session()
        try:
            yield state
        finally:
            state.close()

    def search_pieces(self, needles: list[str], *, listed_only: bool) -> list[bytes]:
        sql = "SELECT search_fragment FROM packages WHERE versions > 0"
        if listed_only:
            sql += " AND listed"
        sql += "".join(" AND strpos(search_text, ?) > 0" for _ in needles)
        db = self.connect()
        try:
            return [bytes(row[0]) for row in db.execute(sql + " ORDER BY name", needles)]
        finally:
            db.close()

    def listings_stale(self) -> bool:
        db = self.connect()
        try:
            return bool(db.execute("SELECT EXISTS (SELECT 1 FROM stale_listings)").fetchone()[0])
        finally:
            db.close()

    def settle_stale_listings(self, pages: Iterable[StalePage]) -> None:
        """After the rewrite's files are visible: its rows go, under the listings lock (a write's
        marks wait, and a row it marked again meanwhile keeps its new marking)."""
        wanted = list(pages)
        if not wanted:
            return
        db = self.connect()
        try:
            db.begin()
            db.lock(LOCK_REGISTRY, LISTINGS)
            settle_stale_listings(db, wanted)
            db.commit()
        finally:
            db.close()

    def settle_whole_documents(self, mark: str) -> None:
        """After the rewrite's -/all and -/search.json are uploaded: their mark goes unless a write set another."""
        if not mark:
            return
        db = self.connect()
        try:
            db.begin()
            settle_whole_documents(db, mark)
            db.commit()
        finally:
            db.close()

    def whole_documents_stale(self) -> bool:
        db = self.connect()
        try:
            row = db.execute("SELECT value FROM settings WHERE key = ?", (WHOLE_STALE,)).fetchone()
        finally:
            db.close()
        return bool(row and row[0])

"""The state on SQLite: three files in the state folder beside the tree (`Settings.state_folder`).

    ledger.sqlite3   the ledger (sqlite_ledger): never dropped, numbered migrations, FULL sync
    state.sqlite3    the cache of content/ (sqlite_cache, sqlite_listings): dropped when unreadable or foreign
    cache.sqlite3    the manifest cache (sqlite_manifests): content-addressed, dropped likewise

`SqliteState` only knows where they are: each session, view or search opens its own connections
(a held idle one per file keeps closes cheap, registry_gen.state.heldopen).
"""

from __future__ import annotations

import shutil
import sqlite3
from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path

from registry_gen.layout import STATE_DATABASE
from registry_gen.state.locks import FileWriteLock
from registry_gen.state.records import StalePage
from registry_gen.state.sqlite_base import connect_readonly, user_version
from registry_gen.state.sqlite_cache import BuildState, SqliteSession
from registry_gen.state.sqlite_schema import LEGACY_STATE_FILE, SCHEMA_VERSION, WHOLE_STALE
from registry_gen.state.sqlite_ledger import LEDGER_DATABASE, SqliteLedger
from registry_gen.state.sqlite_manifests import CACHE_FILE, ManifestCache


class SqliteState:
    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.cache_path = folder / STATE_DATABASE

    def session(self) -> BuildState:
        """A build's session: the ledger opened (made, or migrated) first, then the cache. What
        older layouts left in the folder goes once the ledger has taken what it held."""
        session = SqliteSession(self.cache_path)
        for legacy in (self.folder / LEGACY_STATE_FILE, self.folder / "manifests"):
            if legacy.is_dir():
                shutil.rmtree(legacy, ignore_errors=True)
            elif legacy.exists():
                legacy.unlink()
        return session

    def manifests(self, *, readonly: bool = False) -> ManifestCache:
        return ManifestCache(self.folder / CACHE_FILE, self.cache_path, readonly=readonly)

    def journal(self) -> SqliteLedger:
        """The change journal (in the ledger): its own connection, each call its own transaction;
        a context manager that closes it."""
        return SqliteLedger(self.folder / LEDGER_DATABASE)

    def write_lock(self, lock_file: Path) -> FileWriteLock:
        """The tree's lock file (registry_gen.state.locks): one writer at a time."""
        return FileWriteLock(lock_file)

    def registry_lock(self, timeout: float) -> AbstractContextManager[object]:
        """Nothing besides the tree's file lock, which a whole build holds already."""
        return nullcontext()

    @contextmanager
    def view(self) -> Iterator[BuildState]:
        """A read-only look for the write side (with the build lock held): no schema script, and
        closing it never checkpoints (a publish would pay an fsync for its look otherwise)."""
        state = BuildState.reading(self.cache_path)
        try:
            yield state
        finally:
            state.close()

    def search_pieces(self, needles: list[str], *, listed_only: bool) -> list[bytes]:
        """The search pieces of the packages whose search text holds every one of `needles`, by
        name. Read-only and without the build lock: WAL readers see the last committed build."""
        if not self.cache_path.is_file():
            return []
        sql = "SELECT search_fragment FROM packages WHERE versions > 0"
        if listed_only:
            sql += " AND listed"
        sql += "".join(" AND instr(search_text, ?) > 0" for _ in needles)
        try:
            db = connect_readonly(self.cache_path)
        except sqlite3.DatabaseError:
            return []
        try:
            if user_version(db) != SCHEMA_VERSION:
                return []  # built by another version: the next build migrates it
            return [row[0] for row in db.execute(sql + " ORDER BY name", needles)]
        except sqlite3.DatabaseError:
            return []  # being recreated by a build: nothing to answer from yet
        finally:
            db.close()

    def listings_stale(self) -> bool:
        return False  # the embedded default renders its listing pages in the write (BuildListings)

    def settle_stale_listings(self, pages: Iterable[StalePage]) -> None:
        return None

    def settle_whole_documents(self, mark: str) -> None:
        return None  # the embedded default's rewrite settles them in its build (its files are written before it commits)

    def whole_documents_stale(self) -> bool:
        """Whether a write left -/all and -/search.json for its server's refresher (read-only look)."""
        if not self.cache_path.is_file():
            return False
        try:
            db = connect_readonly(self.cache_path)
            try:
                row = db.execute("SELECT value FROM settings WHERE key = ?", (WHOLE_STALE,)).fetchone()
            finally:
                db.close()
        except sqlite3.DatabaseError:
            return False
        return bool(row and row[0])

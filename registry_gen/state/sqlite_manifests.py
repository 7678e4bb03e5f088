"""The manifest cache on SQLite (`cache.sqlite3` in the state folder): what the package documents
need from each archive (manifest, README, file list), by the tarball's sha1. Pure cache,
content-addressed, committed as archives are read, so the package writers (worker processes)
can read it while the build's transaction is still open."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from registry_gen.state import heldopen
from registry_gen.state.records import CachedManifest
from registry_gen.state.sqlite_base import connect_readonly
from registry_gen.state.sqlite_schema import CACHE_KEPT, open_database
from registry_gen.state.sqlite_ledger import LEDGER_DATABASE

CACHE_FILE = "cache.sqlite3"
MANY_AT_ONCE = 500  # shasums per query of manifests_of (under SQLite's oldest limit of 999 parameters)
# The README sits apart from the manifest: a package document needs every version's manifest but
# only the latest version's README.
_CACHE_SCHEMA = """
CREATE TABLE IF NOT EXISTS manifests (
    shasum TEXT PRIMARY KEY, manifest BLOB NOT NULL, readme TEXT, readme_filename TEXT
);
-- A table of its own, so a cache made before file lists existed gains it without a migration.
CREATE TABLE IF NOT EXISTS file_lists (shasum TEXT PRIMARY KEY, files BLOB NOT NULL) WITHOUT ROWID;
"""



class ManifestCache:
    """sha1 of a tarball -> what the packuments need from it (manifest, README)."""

    def __init__(self, path: Path, state_path: Path, *, readonly: bool = False):
        self.path = path
        self.state_path = state_path  # the cache whose archives (and the ledger beside it, whose pins) refer to entries
        self.readonly = readonly
        if readonly:
            self.db = connect_readonly(path)
        else:
            self.db = open_database(path, _CACHE_SCHEMA, kept=CACHE_KEPT)

    def manifest(self, shasum: str) -> bytes | None:
        row = self.db.execute("SELECT manifest FROM manifests WHERE shasum = ?", (shasum,)).fetchone()
        return row[0] if row else None

    def manifests_of(self, shasums: Iterable[str]) -> dict[str, bytes]:
        """The manifests of many archives, one query per MANY_AT_ONCE: a package document needs every
        version's, which on PostgreSQL would be a round trip each (bench/PROFILE.md, sharewall)."""
        wanted = sorted(set(shasums))
        found: dict[str, bytes] = {}
        for start in range(0, len(wanted), MANY_AT_ONCE):
            chunk = wanted[start : start + MANY_AT_ONCE]
            marks = ", ".join("?" * len(chunk))
            found.update((row[0], row[1]) for row in self.db.execute(f"SELECT shasum, manifest FROM manifests WHERE shasum IN ({marks})", chunk))
        return found

    def extras(self, shasum: str) -> tuple[str | None, str | None, bytes | None] | None:
        """(README, its file name, file list) of one archive in one query, as a version's pages want
        them; None when its manifest's row is missing (the file list is None when only it is)."""
        row = self.db.execute(
            "SELECT m.readme, m.readme_filename, f.files FROM manifests m LEFT JOIN file_lists f ON f.shasum = m.shasum WHERE m.shasum = ?",
            (shasum,),
        ).fetchone()
        return (row[0], row[1], row[2]) if row else None

    def readme(self, shasum: str) -> tuple[str | None, str | None] | None:
        row = self.db.execute("SELECT readme, readme_filename FROM manifests WHERE shasum = ?", (shasum,)).fetchone()
        return (row[0], row[1]) if row else None

    def files(self, shasum: str) -> bytes | None:
        row = self.db.execute("SELECT files FROM file_lists WHERE shasum = ?", (shasum,)).fetchone()
        return row[0] if row else None

    def heal(self, shasum: str, cached: CachedManifest) -> None:
        """Puts back a lost entry read again from its archive, so that the next publish of that
        package does not read it again. A worker's read-only connection cannot: a build big enough
        for workers reads such archives again until an in-process build heals them."""
        if not self.readonly:
            self.put_many([(shasum, cached)])

    def put_many(self, items: list[tuple[str, CachedManifest]]) -> None:
        if not items:
            return
        self.begin()
        try:
            self.db.executemany(
                "INSERT INTO manifests (shasum, manifest, readme, readme_filename) VALUES (?, ?, ?, ?) ON CONFLICT (shasum) DO UPDATE"
                " SET manifest = excluded.manifest, readme = excluded.readme, readme_filename = excluded.readme_filename",
                ((shasum, c.manifest, c.readme, c.readme_filename) for shasum, c in items),
            )
            self.db.executemany(
                "INSERT INTO file_lists (shasum, files) VALUES (?, ?) ON CONFLICT (shasum) DO UPDATE SET files = excluded.files",
                ((shasum, c.files) for shasum, c in items if c.files is not None),
            )
        except BaseException:
            self.rollback()
            raise
        self.commit()

    # the put's transaction (the PostgreSQL cache overrides these three)
    def begin(self) -> None:
        self.db.execute("BEGIN IMMEDIATE")

    def commit(self) -> None:
        self.db.execute("COMMIT")

    def rollback(self) -> None:
        self.db.execute("ROLLBACK")

    def forget_unreferenced(self, shasums: Iterable[str] | None) -> None:
        """Drops the manifests of `shasums` (None: of all) that no archive of the committed state
        and no pinned version of the ledger refers to."""
        self.db.execute("ATTACH DATABASE ? AS state", (str(self.state_path),))
        self.db.execute("ATTACH DATABASE ? AS ledger", (str(self.state_path.parent / LEDGER_DATABASE),))
        try:
            self.db.execute("BEGIN IMMEDIATE")
            if shasums is None:
                for table in ("manifests", "file_lists"):
                    self.db.execute(
                        f"DELETE FROM {table} WHERE shasum NOT IN (SELECT shasum FROM state.archives WHERE shasum IS NOT NULL)"
                        " AND shasum NOT IN (SELECT shasum FROM ledger.pins)"
                    )
            else:
                doomed = list(shasums)
                for table in ("manifests", "file_lists"):
                    self.db.executemany(
                        f"DELETE FROM {table} WHERE shasum = ?1 AND NOT EXISTS (SELECT 1 FROM state.archives WHERE shasum = ?1)"
                        " AND NOT EXISTS (SELECT 1 FROM ledger.pins WHERE shasum = ?1)",
                        ((s,) for s in doomed),
                    )
            self.db.execute("COMMIT")
        finally:
            if self.db.in_transaction:
                self.db.execute("ROLLBACK")
            self.db.execute("DETACH DATABASE state")
            self.db.execute("DETACH DATABASE ledger")

    def close(self) -> None:
        if self.readonly:
            self.db.close()
        else:
            heldopen.close(self.db, self.path)
